-- jobs.claim: each claim moves the claim token (never reset), counts the attempt, sets
-- the lease to now + lease_s, records the worker and the start; answers the job's fields.
begin;
select plan(17);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.job() returns jobs.job language sql as $$
  select j from jobs.job j where j.name = 'token.job' and j.key = 'k'
$$;

create temp table e as
  select * from jobs.enqueue('token.job', 'k', '{"x": 1}', '{"queue": "q_token", "tenant": "t1",
    "priority": 4, "max_attempts": 3, "timeout_s": 9, "traceparent": "00-abc-def-01"}');

create temp table c1 as select * from jobs.claim('{q_token}', 'worker-1', 1, 12.5);
select results_eq(
  $$ select id, name, queue, tenant, key, payload, priority, attempt, max_attempts, claim,
            lease_expires_at, timeout_s, progress, traceparent, created_at from c1 $$,
  $$ values ((select id from e), 'token.job', 'q_token', 't1', 'k', '{"x": 1}'::jsonb, 4::smallint,
             1, 3, 1::bigint, '2030-01-01 00:00:12.5+00'::timestamptz, 9::float8, null::jsonb,
             '00-abc-def-01', '2030-01-01 00:00:00+00'::timestamptz) $$,
  'claim answers the job with attempt 1, claim token 1 and lease = now + lease_s');
select is((jobs_test.job()).state, 'running'::jobs.job_state, 'the job is running');
select is((jobs_test.job()).worker, 'worker-1', 'the worker is recorded');
select is((jobs_test.job()).started_at, '2030-01-01 00:00:00+00'::timestamptz, 'started_at is jobs.now()');
select is((jobs_test.job()).lease_expires_at, '2030-01-01 00:00:12.5+00'::timestamptz,
          'the row holds the same lease expiry');

-- lapse and reclaim
set local jobs.fake_now = '2030-01-01 00:00:12.5+00';
select is((select count(*)::int from jobs.claim('{q_token}', 'worker-2', 1, 30)), 0,
          'a lease is held up to its expiry instant');
set local jobs.fake_now = '2030-01-01 00:01:00+00';
create temp table c2 as select * from jobs.claim('{q_token}', 'worker-2', 1, 30);
select results_eq($$ select id, claim, attempt from c2 $$,
                  $$ select id, 2::bigint, 2 from e $$,
                  'after the lease lapsed, the next claim takes it with claim token 2, attempt 2');
select is((jobs_test.job()).worker, 'worker-2', 'the new worker is recorded');
select is((jobs_test.job()).started_at, '2030-01-01 00:01:00+00'::timestamptz, 'started_at moves');
select is((jobs_test.job()).lease_expires_at, '2030-01-01 00:01:30+00'::timestamptz, 'the lease is renewed');
select is(jobs.heartbeat((select id from e), 1, 30), false, 'the first claim token no longer holds');

-- interrupt (uncounted) and reclaim: the token still moves
select is(jobs.nack((select id from e), 2, null, 'interrupt'), 'interrupted'::jobs.job_state,
          'setup: the run is interrupted');
create temp table c3 as select * from jobs.claim('{q_token}', 'worker-3', 1, 30);
select results_eq($$ select claim, attempt from c3 $$, $$ values (3::bigint, 2) $$,
                  'an interrupted job is claimed again with claim token 3 and the same attempt');

-- a requeue resets the attempt, never the claim token
select is(jobs.nack((select id from e), 3, '{"message": "x"}', 'fail'), 'failed'::jobs.job_state,
          'setup: the job fails');
select lives_ok($$ select jobs.requeue(array[(select id from e)]) $$, 'setup: the job is requeued');
create temp table c4 as select * from jobs.claim('{q_token}', 'worker-4', 1, 30);
select results_eq($$ select claim, attempt from c4 $$, $$ values (4::bigint, 1) $$,
                  'after a requeue: claim token 4, attempt 1');
select is((jobs_test.job()).claim, 4::bigint, 'the row holds the latest token');

select * from finish();
rollback;
