-- jobs.queue_gauges(), jobs.limit_gauges() and jobs.stats(window_s) (sql/93_metrics.sql):
-- the gauges count live and dead rows per queue by jobs.now(); a limit's gauges sum its
-- groups (no group key shows); stats pins counts, rate and percentiles over a window.
begin;
select plan(21);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.take: sqltests/_helpers.sql)

-- ---------------------------------------------------------------- the queue gauges
do $$ begin
  perform jobs.limit_put('mx_key', '{"scope": "key", "target": "mx.lim", "key": "customer", "concurrency": 1}');
  perform jobs.limit_put('mx_idle', '{"scope": "name", "target": "mx.none", "concurrency": 5}');
  perform jobs.enqueue_many('[
    {"name": "mx.ready", "key": "r1", "queue": "q_mx_a", "run_at": "2029-12-31T23:58:20Z"},
    {"name": "mx.ready", "key": "r2", "queue": "q_mx_a", "run_at": "2029-12-31T23:59:30Z"},
    {"name": "mx.ready", "key": "fut", "queue": "q_mx_a", "delay_s": 600},
    {"name": "mx.run", "key": "x", "queue": "q_mx_a"}, {"name": "mx.park", "key": "x", "queue": "q_mx_a"},
    {"name": "mx.int", "key": "x", "queue": "q_mx_a"}, {"name": "mx.ok", "key": "x", "queue": "q_mx_a"},
    {"name": "mx.dead", "key": "x", "queue": "q_mx_a", "max_attempts": 1},
    {"name": "mx.cancel", "key": "x", "queue": "q_mx_a"},
    {"name": "mx.paused", "key": "x", "queue": "q_mx_b"},
    {"name": "mx.lim", "key": "acme1", "queue": "q_mx_c", "payload": {"customer": "acme-secret"}},
    {"name": "mx.lim", "key": "acme2", "queue": "q_mx_c", "payload": {"customer": "acme-secret"}},
    {"name": "mx.lim", "key": "bolt", "queue": "q_mx_c", "payload": {"customer": "bolt-secret"}},
    {"name": "mx.done", "key": "x", "queue": "q_mx_done"}
  ]');
  perform from test.take('q_mx_a', 'mx.run');
  perform jobs.nack(t.id, t.claim, null, 'park') from test.take('q_mx_a', 'mx.park') t;
  perform jobs.nack(t.id, t.claim, null, 'interrupt') from test.take('q_mx_a', 'mx.int') t;
  perform jobs.ack(t.id, t.claim) from test.take('q_mx_a', 'mx.ok') t;
  perform jobs.nack(t.id, t.claim) from test.take('q_mx_a', 'mx.dead') t;
  -- (ids read first: distributed on Citus, a function per row of a query over the jobs
  -- would run on a shard)
  perform jobs.cancel(x.id)
     from (with x as materialized (select j.id from jobs.job j where j.name = 'mx.cancel')
           select * from x) x;
  perform jobs.ack(t.id, t.claim) from test.take('q_mx_done', 'mx.done') t;
  perform jobs.pause_queue('q_mx_b');
  perform from jobs.claim('{q_mx_c}', 'w', 3, 30);  -- acme1 and bolt run, acme2 waits
end $$;
set local jobs.fake_now = '2030-01-01 00:00:10+00';

select results_eq(
  $$ select queue, paused, ready, scheduled, running, parked, dead, blocked, demand
       from jobs.queue_gauges() where queue like 'q\_mx\_%' $$,
  $$ values ('q_mx_a', false, 3::bigint, 1::bigint, 1::bigint, 1::bigint, 1::bigint, 0::bigint, 4::bigint),
            ('q_mx_b', true,  1::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint),
            ('q_mx_c', false, 1::bigint, 0::bigint, 2::bigint, 0::bigint, 0::bigint, 1::bigint, 2::bigint) $$,
  'per queue: ready (due; interrupted too), scheduled, running, parked, dead, blocked; demand = running + due jobs a worker could take (none while paused); a queue of finished jobs only is not listed');
select results_eq(
  $$ select queue, oldest_ready_s from jobs.queue_gauges() where queue like 'q\_mx\_%' $$,
  $$ values ('q_mx_a', 110::float8), ('q_mx_b', 10::float8), ('q_mx_c', 0::float8) $$,
  'oldest_ready_s by jobs.now(); a job waiting for a slot does not age a queue (q_mx_c: 0)');

set local jobs.fake_now = '2030-01-01 00:10:00+00';
select results_eq(
  $$ select queue, ready, scheduled, demand from jobs.queue_gauges() where queue = 'q_mx_a' $$,
  $$ values ('q_mx_a', 4::bigint, 0::bigint, 5::bigint) $$,
  'a scheduled job becomes ready (and demand) at its run_at');
select is((select oldest_ready_s from jobs.queue_gauges() where queue = 'q_mx_a'), 700::float8,
          'and the age grows with jobs.now()');

select lives_ok($$ select jobs.resume_queue('q_mx_b') $$, 'setup: q_mx_b resumed');
select results_eq(
  $$ select paused, ready, demand from jobs.queue_gauges() where queue = 'q_mx_b' $$,
  $$ values (false, 1::bigint, 1::bigint) $$,
  'a resumed queue''s due jobs count in its demand again');

-- ---------------------------------------------------------------- the limit gauges
select results_eq(
  $$ select limit_name, groups, running, concurrency, waiting, deferred, recent_starts
       from jobs.limit_gauges() where limit_name like 'mx\_%' $$,
  $$ values ('mx_idle', 0::bigint, 0::bigint, 5, 0::bigint, 0::bigint, 0::bigint),
            ('mx_key', 2::bigint, 2::bigint, 1, 1::bigint, 0::bigint, 0::bigint) $$,
  'per limit: its groups summed (2 customers, 2 running, 1 waiting); a limit in no use shows zeros');
select is((select pg_catalog.count(*) from jobs.limit_gauges() g
            where g::text like '%secret%'), 0::bigint,
          'no row of limit_gauges carries a group key (a payload value)');

-- ---------------------------------------------------------------- stats(window_s)
set local jobs.fake_now = '2030-01-01 01:00:00+00';
do $$ begin
  perform jobs.enqueue_many('[
    {"name": "st.s1", "key": "x", "queue": "q_mx_s"}, {"name": "st.s2", "key": "x", "queue": "q_mx_s"},
    {"name": "st.s3", "key": "x", "queue": "q_mx_s"}, {"name": "st.fl", "key": "x", "queue": "q_mx_s"},
    {"name": "st.cx", "key": "x", "queue": "q_mx_s"}, {"name": "st.old", "key": "x", "queue": "q_mx_s"}
  ]');
  perform jobs.ack(t.id, t.claim) from test.take('q_mx_s', 'st.old') t;  -- finished at 01:00:00
end $$;
create temporary table st_claims (name text, id bigint, claim bigint);
set local jobs.fake_now = '2030-01-01 01:00:02+00';
insert into st_claims select 'st.s1', t.id, t.claim from test.take('q_mx_s', 'st.s1') t;
set local jobs.fake_now = '2030-01-01 01:00:04+00';
insert into st_claims select 'st.s2', t.id, t.claim from test.take('q_mx_s', 'st.s2') t;
select lives_ok($$ select jobs.ack(c.id, c.claim) from st_claims c where c.name = 'st.s1' $$,
                'setup: s1 waited 2 s, ran 2 s');
set local jobs.fake_now = '2030-01-01 01:00:10+00';
insert into st_claims select 'st.s3', t.id, t.claim from test.take('q_mx_s', 'st.s3') t;
select lives_ok($$ select jobs.ack(c.id, c.claim) from st_claims c where c.name = 'st.s2' $$,
                'setup: s2 waited 4 s, ran 6 s');
select lives_ok($$ select jobs.nack(t.id, t.claim, null, 'fail') from test.take('q_mx_s', 'st.fl') t $$,
                'setup: fl waited 10 s, failed at once');
set local jobs.fake_now = '2030-01-01 01:00:20+00';
select lives_ok($$ select jobs.ack(c.id, c.claim) from st_claims c where c.name = 'st.s3' $$,
                'setup: s3 waited 10 s, ran 10 s; cx is cancelled, never started');
select lives_ok($$ with x as materialized (select j.id from jobs.job j where j.name = 'st.cx')
                   select jobs.cancel(x.id) from x $$, 'setup: cancel cx');

-- waits [2, 4, 10, 10] (cx never started): p50 7, p95 10; runs [0, 2, 6, 10]: p50 4, p95 9.4
select results_eq(
  $$ select queue, succeeded, failed, dead, cancelled, per_s, wait_p50_s, wait_p95_s,
            run_p50_s, pg_catalog.round(run_p95_s::numeric, 6)::float8
       from jobs.stats(20) where queue = 'q_mx_s' $$,
  $$ values ('q_mx_s', 3::bigint, 1::bigint, 0::bigint, 1::bigint, 0.25::float8,
             7::float8, 10::float8, 4::float8, 9.4::float8) $$,
  'the last 20 s: finished by state, per second, and p50/p95 of enqueue-to-start and of run time; the job finished at the window''s start is out');
select results_eq(
  $$ select succeeded, per_s from jobs.stats(30) where queue = 'q_mx_s' $$,
  $$ values (4::bigint, 0.2::float8) $$,
  'a wider window takes it in');

set local jobs.fake_now = '2030-01-01 02:00:00+00';
select is((select pg_catalog.count(*) from jobs.stats(20) where queue = 'q_mx_s'), 0::bigint,
          'a window in which nothing finished lists no row');

select throws_ok('select jobs.stats(0)', 'SJ001', null, 'a window of 0 s is refused');
select throws_ok('select jobs.stats(-1)', 'SJ001', null, 'a negative window is refused');
select throws_ok($$ select jobs.stats('NaN') $$, 'SJ001', null, 'a NaN window is refused');
select throws_ok($$ select jobs.stats('infinity') $$, 'SJ001', null, 'an infinite window is refused');
select throws_ok('select jobs.stats(null)', 'SJ001', null, 'a null window is refused');

select * from finish();
rollback;
