-- jobs.promote_where(filter, max): makes at most max matching WAITING jobs runnable now
-- (parked, or ready/interrupted with a future run_at); jobs already due are neither
-- moved nor counted; remaining = what a second call would still move.
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform jobs.enqueue_many('[
    {"name": "pw.job", "key": "fut1", "queue": "q_pw", "delay_s": 60},
    {"name": "pw.job", "key": "fut2", "queue": "q_pw", "delay_s": 120},
    {"name": "pw.job", "key": "fut3", "queue": "q_pw", "delay_s": 180},
    {"name": "pw.job", "key": "due", "queue": "q_pw", "run_at": "2029-12-31T00:00:00Z"},
    {"name": "pw.job", "key": "park", "queue": "q_pw_p"},
    {"name": "pw.job", "key": "run", "queue": "q_pw_r"}
  ]');
  perform jobs.nack(c.id, c.claim, null, 'park') from jobs.claim('{q_pw_p}', 'w', 1, 30) c;
  perform from jobs.claim('{q_pw_r}', 'w', 1, 30);
end $$;

select results_eq($$ select moved, remaining from jobs.promote_where('{"name": "pw.job"}', 3) $$,
                  $$ values (3, 1::bigint) $$, 'max 3 of 4 waiting jobs: moved 3, remaining 1 (the due job not counted)');
select results_eq($$ select moved, remaining from jobs.promote_where('{"name": "pw.job"}', 3) $$,
                  $$ values (1, 0::bigint) $$, 'the last waiting one: remaining 0');
select results_eq($$ select moved, remaining from jobs.promote_where('{"name": "pw.job"}', 3) $$,
                  $$ values (0, 0::bigint) $$, 'promoted jobs are no longer waiting: nothing left');
select results_eq($$ select key, state::text, run_at from jobs.job where name = 'pw.job' order by key $$,
                  $$ values ('due', 'ready', '2029-12-31 00:00:00+00'::timestamptz),
                            ('fut1', 'ready', '2030-01-01 00:00:00+00'::timestamptz),
                            ('fut2', 'ready', '2030-01-01 00:00:00+00'::timestamptz),
                            ('fut3', 'ready', '2030-01-01 00:00:00+00'::timestamptz),
                            ('park', 'ready', '2030-01-01 00:00:00+00'::timestamptz),
                            ('run', 'running', '2030-01-01 00:00:00+00'::timestamptz) $$,
                  'future and parked jobs are ready now; the due one (not waiting) and the running one untouched');
select is((select lease_expires_at from jobs.job where name = 'pw.job' and key = 'run'),
          '2030-01-01 00:00:30+00'::timestamptz, 'the running job keeps its lease');
select is((select count(*)::int from jobs.claim('{q_pw,q_pw_p}', 'w', 10, 30)), 5, 'all five are claimable now');

do $$ begin perform jobs.enqueue('pw.job', 'later', '{}', '{"queue": "q_pw", "delay_s": 60}'); end $$;
select results_eq($$ select moved, remaining from jobs.promote_where('{"name": "pw.job", "queue": "q_pw_p"}') $$,
                  $$ values (0, 0::bigint) $$, 'a queue filter leaves other queues alone');
select results_eq($$ select moved, remaining from jobs.promote_where('{"name": "pw.job", "queue": "q_pw"}') $$,
                  $$ values (1, 0::bigint) $$, 'and moves its own');

select * from finish();
rollback;
