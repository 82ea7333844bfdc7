-- jobs.enqueue: the defaults a new job gets, the fields a spec sets, and run_at from
-- delay_s / run_at under jobs.now().
begin;
select plan(24);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.job: sqltests/_helpers.sql)

-- ---------------------------------------------------------------- defaults
create temp table d as select * from jobs.enqueue('def.job', 'plain');
select results_eq(
  $$ select queue, tenant, payload, priority, state, attempt, max_attempts
       from jobs.job where id = (select id from d) $$,
  $$ values ('default', null::text, '{}'::jsonb, 0::smallint, 'ready'::jobs.job_state, 0, 25) $$,
  'defaults: queue default, no tenant, payload {}, priority 0, ready, attempt 0, max_attempts 25');
select results_eq(
  $$ select retry_base_s, retry_cap_s, retry_jitter, dead_letter, timeout_s
       from jobs.job where id = (select id from d) $$,
  $$ values (1::float8, 3600::float8, 'full', true, null::float8) $$,
  'defaults: backoff base 1 s, cap 3600 s, jitter full, dead_letter on, no timeout');
select results_eq(
  $$ select claim, lease_expires_at, worker, progress, last_error, result, traceparent,
            started_at, finished_at
       from jobs.job where id = (select id from d) $$,
  $$ values (0::bigint, null::timestamptz, null::text, null::jsonb, null::jsonb, null::jsonb,
             null::text, null::timestamptz, null::timestamptz) $$,
  'a new job has claim 0 and no lease, worker, progress, error, result or start');
select is((test.job('def.job', 'plain')).run_at, '2030-01-01 00:00:00+00'::timestamptz,
          'run_at defaults to jobs.now()');
select is((test.job('def.job', 'plain')).created_at, '2030-01-01 00:00:00+00'::timestamptz,
          'created_at is jobs.now()');
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "def.job", "key": "null-payload", "payload": null}]') $$,
                'setup: a spec with payload null');
select is((test.job('def.job', 'null-payload')).payload, '{}'::jsonb, 'a null payload is stored as {}');

-- ---------------------------------------------------------------- every field stored
select lives_ok($$
  select * from jobs.enqueue('def.job', 'full', '{"order": 42, "lines": [1, 2]}', '{
    "queue": "q_def", "tenant": "acme", "priority": -7, "max_attempts": 3,
    "retry_base_s": 2.5, "retry_cap_s": 60, "retry_jitter": "equal", "dead_letter": false,
    "timeout_s": 12.5, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "on_conflict": "error"}') $$, 'a spec may set every field');
select results_eq(
  $$ select queue, tenant, payload, priority, max_attempts from jobs.job
      where name = 'def.job' and key = 'full' $$,
  $$ values ('q_def', 'acme', '{"order": 42, "lines": [1, 2]}'::jsonb, -7::smallint, 3) $$,
  'queue, tenant, payload, priority and max_attempts are stored');
select results_eq(
  $$ select retry_base_s, retry_cap_s, retry_jitter, dead_letter, timeout_s, traceparent
       from jobs.job where name = 'def.job' and key = 'full' $$,
  $$ values (2.5::float8, 60::float8, 'equal', false, 12.5::float8,
             '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') $$,
  'the retry policy, timeout and traceparent are stored');
select is((select retry_jitter from jobs.job where name = 'def.job' and key = 'full'), 'equal',
          'retry_jitter equal is accepted');
select lives_ok($$ select * from jobs.enqueue('def.job', 'jn', '{}', '{"retry_jitter": "none"}') $$,
                'retry_jitter none is accepted');
create temp table more as
  select * from jobs.enqueue_many('[{"name": "def.job", "key": "pmax", "priority": 32767},
                                    {"name": "def.job", "key": "pmin", "priority": -32768},
                                    {"name": "def.job", "key": "once", "max_attempts": 1}]');
select throws_ok($$ select * from jobs.enqueue('def.job', 'bigbase', '{}', '{"retry_base_s": 7200}') $$,
                 'SJ001', 'sqljobs.invalid_argument: spec 1: retry_cap_s must be at least retry_base_s',
                 'a base above the default cap of 3600 s needs a cap of its own');
select is((test.job('def.job', 'pmax')).priority, 32767::smallint, 'priority 32767 is accepted');
select is((test.job('def.job', 'pmin')).priority, (-32768)::smallint, 'priority -32768 is accepted');
select is((test.job('def.job', 'once')).max_attempts, 1, 'max_attempts 1 is accepted');

-- ---------------------------------------------------------------- run_at
select lives_ok($$ select * from jobs.enqueue('def.job', 'delay', '{}', '{"delay_s": 90}') $$,
                'setup: delay_s 90');
select is((test.job('def.job', 'delay')).run_at, '2030-01-01 00:01:30+00'::timestamptz,
          'delay_s sets run_at = jobs.now() + delay_s');
select lives_ok($$ select * from jobs.enqueue('def.job', 'delay-frac', '{}', '{"delay_s": 0.25}') $$,
                'setup: delay_s 0.25');
select is((test.job('def.job', 'delay-frac')).run_at, '2030-01-01 00:00:00.25+00'::timestamptz,
          'fractional seconds are kept');
select lives_ok($$ select * from jobs.enqueue('def.job', 'delay0', '{}', '{"delay_s": 0}') $$,
                'setup: delay_s 0');
select is((test.job('def.job', 'delay0')).run_at, jobs.now(), 'delay_s 0 is now');
select lives_ok($$ select * from jobs.enqueue('def.job', 'at', '{}', '{"run_at": "2030-06-01T12:00:00+02:00"}') $$,
                'setup: an explicit run_at');
select is((test.job('def.job', 'at')).run_at, '2030-06-01 10:00:00+00'::timestamptz, 'run_at is stored as given');

select * from finish();
rollback;
