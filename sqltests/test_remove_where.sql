-- jobs.remove_where(filter, max): deletes at most max matching jobs that are not
-- running; remaining = what a second call would still delete.
begin;
select plan(7);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform jobs.enqueue_many('[
    {"name": "xw.job", "key": "r1", "queue": "q_xw"}, {"name": "xw.job", "key": "r2", "queue": "q_xw"},
    {"name": "xw.job", "key": "s1", "queue": "q_xw_s"}, {"name": "xw.job", "key": "f1", "queue": "q_xw_f"},
    {"name": "xw.job", "key": "run", "queue": "q_xw_run"}, {"name": "xw.keep", "key": "k", "queue": "q_xw"}
  ]');
  perform jobs.ack(c.id, c.claim) from jobs.claim('{q_xw_s}', 'w', 1, 30) c;
  perform jobs.nack(c.id, c.claim, null, 'fail') from jobs.claim('{q_xw_f}', 'w', 1, 30) c;
  perform from jobs.claim('{q_xw_run}', 'w', 1, 30);
end $$;

select results_eq($$ select moved, remaining from jobs.remove_where('{"name": "xw.job"}', 3) $$,
                  $$ values (3, 1::bigint) $$, 'max 3 of 4 removable jobs: moved 3, remaining 1');
select results_eq($$ select moved, remaining from jobs.remove_where('{"name": "xw.job"}', 3) $$,
                  $$ values (1, 0::bigint) $$, 'the last one: remaining 0 (the running job is not counted)');
select results_eq($$ select moved, remaining from jobs.remove_where('{"name": "xw.job"}', 3) $$,
                  $$ values (0, 0::bigint) $$, 'nothing left');
select results_eq($$ select key, state::text from jobs.job where name like 'xw.%' order by key $$,
                  $$ values ('k', 'ready'), ('run', 'running') $$,
                  'ready, succeeded and failed jobs are deleted; the running one and the unmatched one remain');
select results_eq($$ select moved, remaining from jobs.remove_where('{"name": "xw.job", "state": "running"}') $$,
                  $$ values (0, 0::bigint) $$, 'a running job is never removed, even when asked by state');
select is((select outcome from jobs.enqueue('xw.job', 's1', '{}', '{"queue": "q_xw_s"}')), 'created', 'a removed key can be enqueued afresh');
select results_eq($$ select moved, remaining from jobs.remove_where('{"name": "xw.job", "queue": ["q_xw", "q_xw_s"], "state": "ready"}') $$,
                  $$ values (1, 0::bigint) $$, 'filters combine');

select * from finish();
rollback;
