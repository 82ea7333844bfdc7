-- jobs.worker_heartbeat / worker_stop / workers / unserved_jobs: the workers registry.
begin;
select plan(26);

select has_table('jobs', 'worker', 'jobs.worker exists');
select has_function('jobs', 'worker_heartbeat',
  array['text', 'text[]', 'text[]', 'integer', 'double precision', 'text', 'integer', 'jsonb']);
select has_function('jobs', 'worker_stop', array['text']);
select has_function('jobs', 'workers', '{}'::name[]);
select has_function('jobs', 'unserved_jobs', '{}'::name[]);

set local jobs.fake_now = '2030-01-01 00:00:00+00';

-- ---------------------------------------------------------------- register
select is(jobs.worker_heartbeat('wt-1', array['qa', 'qb'], array['job.x'], 4, 30, 'host1', 42),
          '2030-01-01 00:00:30+00'::timestamptz, 'the first heartbeat answers now + ttl_s');
select is((select count(*)::int from jobs.workers() where id = 'wt-1'), 1,
          'a registered worker is listed as live');
select is((select started_at from jobs.worker where id = 'wt-1'),
          '2030-01-01 00:00:00+00'::timestamptz, 'started_at is the first heartbeat');
select is((select queues from jobs.workers() where id = 'wt-1'), array['qa', 'qb'],
          'its queues are recorded');

-- ---------------------------------------------------------------- refresh
set local jobs.fake_now = '2030-01-01 00:00:20+00';
select is(jobs.worker_heartbeat('wt-1', array['qa'], array['job.x', 'job.y'], 8, 30, 'host1', 42),
          '2030-01-01 00:00:50+00'::timestamptz, 'a later heartbeat extends expires_at');
select is((select started_at from jobs.worker where id = 'wt-1'),
          '2030-01-01 00:00:00+00'::timestamptz, 'a heartbeat keeps started_at');
select is((select concurrency from jobs.worker where id = 'wt-1'), 8,
          'a heartbeat updates what the worker serves');
select is((select count(*)::int from jobs.worker where id = 'wt-1'), 1, 'the upsert writes one row');

-- ---------------------------------------------------------------- running count
select is((select outcome from jobs.enqueue('job.x', 'k1', '{}', '{"queue": "qa"}')), 'created', 'job.x enqueued in qa');
select is((select count(*)::int from jobs.claim(array['qa'], 'wt-1', 1, 30)), 1, 'a job is claimed');
select is((select running from jobs.workers() where id = 'wt-1'), 1::bigint,
          'workers() counts the jobs the worker holds');

-- ---------------------------------------------------------------- unserved
select is((select count(*)::int from (
  select jobs.enqueue('job.z', 'k2', '{}', '{"queue": "qa"}')
  union all select jobs.enqueue('job.x', 'k3', '{}', '{"queue": "qc"}')
  union all select jobs.enqueue('job.y', 'k4', '{}', '{"queue": "qa"}')) e), 3,
  'three more jobs are enqueued');
select results_eq(
  $$ select queue, name, waiting from jobs.unserved_jobs() where queue in ('qa', 'qc') $$,
  $$ values ('qa'::text, 'job.z'::text, 1::bigint), ('qc', 'job.x', 1) $$,
  'unserved_jobs lists waiting jobs whose queue and name no live worker serves');

-- ---------------------------------------------------------------- expiry
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select is((select count(*)::int from jobs.workers()), 0, 'an expired worker is not listed');
select is((select count(*)::int from jobs.unserved_jobs() where name = 'job.y'), 1,
          'the jobs of an expired worker are unserved');
set local jobs.fake_now = '2030-01-01 02:00:00+00';
select lives_ok($$ select jobs.worker_heartbeat('wt-2', array['qa'], array[]::text[], 1) $$,
                'another worker heartbeats');
select is((select count(*)::int from jobs.worker where id = 'wt-1'), 0,
          'a worker expired for over an hour is forgotten');

-- ---------------------------------------------------------------- stop
select ok(jobs.worker_stop('wt-2'), 'worker_stop removes a registered worker');
select ok(not jobs.worker_stop('wt-2'), 'a second worker_stop answers false');

-- ---------------------------------------------------------------- bad input
select throws_ok($$ select jobs.worker_heartbeat('wt-3', array[]::text[], array['a'], 1) $$,
                 'SJ001', null, 'no queue is refused with invalid_argument');
select throws_ok($$ select jobs.worker_heartbeat('wt-3', array['qa'], array['a'], 0) $$,
                 'SJ001', null, 'concurrency 0 is refused with invalid_argument');

select * from finish();
rollback;
