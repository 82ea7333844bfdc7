-- jobs.queue_stats(): one row per queue that has jobs or a pause switch: paused, counts
-- by state, the age in seconds (by jobs.now()) of the oldest runnable job, and how many
-- waiting jobs no live worker declares (unserved).
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.take: sqltests/_helpers.sql)

do $$ begin
  perform jobs.enqueue_many('[
    {"name": "qs.ready", "key": "r1", "queue": "q_qs_a", "run_at": "2029-12-31T23:58:20Z"},
    {"name": "qs.ready", "key": "r2", "queue": "q_qs_a", "run_at": "2029-12-31T23:59:30Z"},
    {"name": "qs.ready", "key": "fut", "queue": "q_qs_a", "delay_s": 600},
    {"name": "qs.run", "key": "x", "queue": "q_qs_a"}, {"name": "qs.park", "key": "x", "queue": "q_qs_a"},
    {"name": "qs.int", "key": "x", "queue": "q_qs_a"}, {"name": "qs.ok", "key": "x", "queue": "q_qs_a"},
    {"name": "qs.fail", "key": "x", "queue": "q_qs_a"},
    {"name": "qs.dead", "key": "x", "queue": "q_qs_a", "max_attempts": 1},
    {"name": "qs.cancel", "key": "x", "queue": "q_qs_a"},
    {"name": "qs.later", "key": "x", "queue": "q_qs_c", "delay_s": 60}
  ]');
  perform from test.take('q_qs_a', 'qs.run');
  perform jobs.nack(t.id, t.claim, null, 'park') from test.take('q_qs_a', 'qs.park') t;
  perform jobs.nack(t.id, t.claim, null, 'interrupt') from test.take('q_qs_a', 'qs.int') t;
  perform jobs.ack(t.id, t.claim) from test.take('q_qs_a', 'qs.ok') t;
  perform jobs.nack(t.id, t.claim, null, 'fail') from test.take('q_qs_a', 'qs.fail') t;
  perform jobs.nack(t.id, t.claim) from test.take('q_qs_a', 'qs.dead') t;
  -- (ids read first: distributed on Citus, a function per row of a query over the jobs
  -- would run on a shard)
  perform jobs.cancel(x.id)
     from (with x as materialized (select j.id from jobs.job j where j.name = 'qs.cancel')
           select * from x) x;
  perform jobs.pause_queue('q_qs_b');
end $$;
set local jobs.fake_now = '2030-01-01 00:00:10+00';

select results_eq(
  $$ select queue, paused, ready, running, parked, interrupted, succeeded, failed, dead, cancelled
       from jobs.queue_stats() where queue like 'q\_qs\_%' $$,
  $$ values ('q_qs_a', false, 3::bigint, 1::bigint, 1::bigint, 1::bigint, 1::bigint, 1::bigint, 1::bigint, 1::bigint),
            ('q_qs_b', true, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint),
            ('q_qs_c', false, 1::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint) $$,
  'counts by state per queue, ordered by queue; a paused queue with no jobs is listed');
select is((select oldest_ready_s from jobs.queue_stats() where queue = 'q_qs_a'), 110::float8,
          'oldest_ready_s: the age of the oldest runnable job by jobs.now() (110 s)');
select is((select oldest_ready_s from jobs.queue_stats() where queue = 'q_qs_c'), 0::float8,
          'a queue whose only ready job is in the future: 0');
select is((select oldest_ready_s from jobs.queue_stats() where queue = 'q_qs_b'), 0::float8, 'an empty queue: 0');

set local jobs.fake_now = '2030-01-01 00:01:40+00';
select is((select oldest_ready_s from jobs.queue_stats() where queue = 'q_qs_a'), 200::float8,
          'the age grows with jobs.now()');
set local jobs.fake_now = '2030-01-01 00:02:00+00';
select is((select oldest_ready_s from jobs.queue_stats() where queue = 'q_qs_c'), 60::float8,
          'a job becomes runnable at its run_at and ages from there');

-- unserved: waiting (ready or interrupted) jobs whose (queue, name) no live worker declares.
select is((select unserved from jobs.queue_stats() where queue = 'q_qs_a'), 4::bigint,
          'with no worker alive, every waiting job of q_qs_a is unserved (3 ready + 1 interrupted)');
select lives_ok($$ select jobs.worker_heartbeat('w-qs', '{q_qs_a}', '{qs.ready}', 4, 60) $$,
                'setup: a live worker declares qs.ready on q_qs_a');
select is((select unserved from jobs.queue_stats() where queue = 'q_qs_a'), 1::bigint,
          'only the interrupted qs.int job is left unserved');

select lives_ok($$ select jobs.pause_queue('q_qs_a') $$, 'setup: pause q_qs_a');
select is((select paused from jobs.queue_stats() where queue = 'q_qs_a'), true, 'the paused flag shows');

-- a queue only a job type declares (no job yet) is listed, with zeros, by the v2 function
do $$ begin perform jobs.job_type_put('qs.declared', '{"queue": "q_qs_declared"}'); end $$;
select results_eq(
  $$ select ready, running, dead, limited from jobs.queue_stats_v2() where queue = 'q_qs_declared' $$,
  $$ values (0::bigint, 0::bigint, 0::bigint, 0::bigint) $$,
  'a declared queue without jobs is listed with zeros');
select * from finish();
rollback;
