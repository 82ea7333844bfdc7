-- jobs.cancel_where(filter, max): cancels at most max matching live jobs (ready,
-- running, parked, interrupted); remaining = what a second call would still cancel.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform jobs.enqueue_many('[
    {"name": "cw.job", "key": "1", "queue": "q_cw"}, {"name": "cw.job", "key": "2", "queue": "q_cw"},
    {"name": "cw.job", "key": "3", "queue": "q_cw_run"}, {"name": "cw.job", "key": "4", "queue": "q_cw_done"},
    {"name": "cw.job", "key": "5", "queue": "q_cw", "delay_s": 600},
    {"name": "cw.other", "key": "6", "queue": "q_cw"}
  ]');
  perform from jobs.claim('{q_cw_run}', 'w', 1, 30);
  perform jobs.ack(c.id, c.claim) from jobs.claim('{q_cw_done}', 'w', 1, 30) c;
end $$;
-- cw.job live: 1, 2, 5 ready (5 in the future), 3 running; 4 succeeded. cw.other: 6 ready.
set local jobs.fake_now = '2030-01-01 00:00:05+00';

select results_eq($$ select moved, remaining from jobs.cancel_where('{"name": "cw.job"}', 2) $$,
                  $$ values (2, 2::bigint) $$, 'max 2 of 4: moved 2, remaining 2');
select results_eq($$ select moved, remaining from jobs.cancel_where('{"name": "cw.job"}', 1) $$,
                  $$ values (1, 1::bigint) $$, 'then 1: remaining 1');
select results_eq($$ select moved, remaining from jobs.cancel_where('{"name": "cw.job"}', 5) $$,
                  $$ values (1, 0::bigint) $$, 'the last one: remaining 0');
select results_eq($$ select moved, remaining from jobs.cancel_where('{"name": "cw.job"}') $$,
                  $$ values (0, 0::bigint) $$, 'nothing left: moved 0, remaining 0');

select results_eq($$ select key, state::text from jobs.job where name = 'cw.job' order by key $$,
                  $$ values ('1', 'cancelled'), ('2', 'cancelled'), ('3', 'cancelled'), ('4', 'succeeded'),
                            ('5', 'cancelled') $$,
                  'every live job was cancelled, the running and future ones included; the finished one not');
select is((select count(*)::int from jobs.job where name = 'cw.job' and state = 'cancelled'
              and finished_at = '2030-01-01 00:00:05+00' and lease_expires_at is null), 4,
          'each cancelled job is finished now, with no lease');
select is((select state from jobs.job where name = 'cw.other'), 'ready'::jobs.job_state, 'a job the filter did not match is untouched');
select is(jobs.heartbeat(test.jid('cw.job', '3'), test.claim_of('cw.job', '3'), 30), false,
          'the cancelled running job''s heartbeat (under its own claim token) answers false');

select results_eq($$ select moved, remaining from jobs.cancel_where('{"name": "cw.other", "queue": "q_nope"}') $$,
                  $$ values (0, 0::bigint) $$, 'a filter matching nothing: 0, 0');
select results_eq($$ select moved, remaining from jobs.cancel_where('{"name": "cw.other", "state": "running"}') $$,
                  $$ values (0, 0::bigint) $$, 'a state filter narrows it');
select results_eq($$ select moved, remaining from jobs.cancel_where('{"name": "cw.other", "state": "ready"}', 1) $$,
                  $$ values (1, 0::bigint) $$, 'a matching state filter cancels');
select is((select state from jobs.job where name = 'cw.other'), 'cancelled'::jobs.job_state, 'cancelled');

select * from finish();
rollback;
