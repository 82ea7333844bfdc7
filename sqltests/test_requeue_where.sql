-- jobs.requeue_where(filter, max): moves at most max matching failed, dead or cancelled
-- jobs to ready (attempt 0, run now); succeeded and live jobs are never moved;
-- remaining = what a second call would still move.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform jobs.enqueue_many('[
    {"name": "rw.job", "key": "f1", "queue": "q_rw_f"}, {"name": "rw.job", "key": "f2", "queue": "q_rw_f"},
    {"name": "rw.job", "key": "d1", "queue": "q_rw_d", "max_attempts": 1},
    {"name": "rw.job", "key": "c1", "queue": "q_rw_c"},
    {"name": "rw.job", "key": "s1", "queue": "q_rw_s"},
    {"name": "rw.job", "key": "r1", "queue": "q_rw_r"}
  ]');
  perform jobs.nack(c.id, c.claim, null, 'fail') from jobs.claim('{q_rw_f}', 'w', 2, 30) c;
  perform jobs.nack(c.id, c.claim) from jobs.claim('{q_rw_d}', 'w', 1, 30) c;
  -- (ids read first: distributed on Citus, a function per row of a query over the jobs
  -- would run on a shard)
  perform jobs.cancel(x.id)
     from (with x as materialized (select j.id from jobs.job j
                                      where j.name = 'rw.job' and j.key = 'c1')
           select * from x) x;
  perform jobs.ack(c.id, c.claim) from jobs.claim('{q_rw_s}', 'w', 1, 30) c;
end $$;
set local jobs.fake_now = '2030-01-01 00:10:00+00';

select results_eq($$ select key, state::text from jobs.job where name = 'rw.job' order by key $$,
                  $$ values ('c1', 'cancelled'), ('d1', 'dead'), ('f1', 'failed'), ('f2', 'failed'),
                            ('r1', 'ready'), ('s1', 'succeeded') $$, 'setup');
select results_eq($$ select moved, remaining from jobs.requeue_where('{"name": "rw.job"}', 3) $$,
                  $$ values (3, 1::bigint) $$, 'max 3 of 4: moved 3, remaining 1');
select results_eq($$ select moved, remaining from jobs.requeue_where('{"name": "rw.job"}', 3) $$,
                  $$ values (1, 0::bigint) $$, 'the last one: remaining 0');
select results_eq($$ select moved, remaining from jobs.requeue_where('{"name": "rw.job"}', 3) $$,
                  $$ values (0, 0::bigint) $$, 'nothing left');
select results_eq(
  $$ select key, state::text, attempt, run_at, finished_at from jobs.job where name = 'rw.job' order by key $$,
  $$ values ('c1', 'ready', 0, '2030-01-01 00:10:00+00'::timestamptz, null::timestamptz),
            ('d1', 'ready', 0, '2030-01-01 00:10:00+00'::timestamptz, null::timestamptz),
            ('f1', 'ready', 0, '2030-01-01 00:10:00+00'::timestamptz, null::timestamptz),
            ('f2', 'ready', 0, '2030-01-01 00:10:00+00'::timestamptz, null::timestamptz),
            ('r1', 'ready', 0, '2030-01-01 00:00:00+00'::timestamptz, null::timestamptz),
            ('s1', 'succeeded', 1, '2030-01-01 00:00:00+00'::timestamptz, '2030-01-01 00:00:00+00'::timestamptz) $$,
  'failed, dead and cancelled jobs are ready at attempt 0, now; the ready and succeeded ones untouched');

-- filters
do $$ begin
  perform jobs.nack(c.id, c.claim, null, 'fail') from jobs.claim('{q_rw_f,q_rw_d,q_rw_c}', 'w', 10, 30) c;
end $$;
select results_eq($$ select moved, remaining from jobs.requeue_where('{"name": "rw.job", "queue": "q_rw_f"}') $$,
                  $$ values (2, 0::bigint) $$, 'a queue filter moves only that queue');
select results_eq($$ select moved, remaining from jobs.requeue_where('{"name": "rw.job", "state": "succeeded"}') $$,
                  $$ values (0, 0::bigint) $$, 'a succeeded job is never requeued, even when asked by state');
select results_eq($$ select moved, remaining from jobs.requeue_where('{"name": "rw.job", "state": ["failed", "ready"]}', 1) $$,
                  $$ values (1, 1::bigint) $$, 'a state filter narrows it; remaining counts what is left');
select is((select count(*)::int from jobs.job where name = 'rw.job' and state = 'failed'), 1, 'one failed job is left');

select * from finish();
rollback;
