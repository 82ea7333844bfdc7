-- jobs.nack mode retry (the default): the attempt counts; next run_at = now + delay_s,
-- or the job's backoff curve; attempts exhausted -> dead, or failed when dead_letter
-- is off. last_error = the error plus attempt and at.
begin;
select plan(25);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local timezone = 'UTC';  -- last_error.at is compared as JSON text
create schema jobs_test;
create function jobs_test.job(p_key text) returns jobs.job language sql as $$
  select j from jobs.job j where j.name = 'retry.job' and j.key = p_key
$$;
-- claim p_key from its own queue (it must be runnable); answers the claim token
create function jobs_test.claim(p_key text) returns bigint language plpgsql as $$
declare v_claim bigint;
begin
  select c.claim into strict v_claim from jobs.claim(array['q_retry_' || p_key], 'w', 1, 30) c;
  return v_claim;
end $$;
create function jobs_test.add(p_key text, p_options jsonb) returns void language sql as $$
  select from jobs.enqueue('retry.job', p_key, '{}',
                           p_options || pg_catalog.jsonb_build_object('queue', 'q_retry_' || p_key))
$$;

-- ---------------------------------------------------------------- backoff (jitter none)
do $$ begin
  perform jobs_test.add('b', '{"max_attempts": 3, "retry_base_s": 10, "retry_cap_s": 100, "retry_jitter": "none"}');
  perform jobs_test.claim('b');
end $$;
select is(jobs.nack((jobs_test.job('b')).id, 1, '{"kind": "error", "message": "boom"}'),
          'ready'::jobs.job_state, 'retry with attempts left answers ready');
select results_eq(
  $$ select state, attempt, run_at, lease_expires_at, finished_at, result
       from jobs.job where name = 'retry.job' and key = 'b' $$,
  $$ values ('ready'::jobs.job_state, 1, '2030-01-01 00:00:10+00'::timestamptz, null::timestamptz,
             null::timestamptz, null::jsonb) $$,
  'attempt 1 counted; run_at = now + base (10 s); lease cleared; not finished');
select is((jobs_test.job('b')).last_error,
          '{"kind": "error", "message": "boom", "attempt": 1, "at": "2030-01-01T00:00:00+00:00"}'::jsonb,
          'last_error is the error plus attempt and at');
select is((select count(*)::int from jobs.claim('{q_retry_b}', 'w', 1, 30)), 0, 'not claimable before its backoff');

set local jobs.fake_now = '2030-01-01 00:00:10+00';
select is(jobs_test.claim('b'), 2::bigint, 'claimable once the backoff passed (claim 2)');
select is(jobs.nack((jobs_test.job('b')).id, 2, '{"message": "boom 2"}', 'retry'), 'ready'::jobs.job_state,
          'an explicit retry mode works the same');
select results_eq($$ select attempt, run_at from jobs.job where name = 'retry.job' and key = 'b' $$,
                  $$ values (2, '2030-01-01 00:00:30+00'::timestamptz) $$,
                  'after attempt 2 the backoff doubles: run_at = now + 20 s');
select is((jobs_test.job('b')).last_error->>'attempt', '2', 'last_error names attempt 2');

-- the final attempt
set local jobs.fake_now = '2030-01-01 00:00:30+00';
select is(jobs_test.claim('b'), 3::bigint, 'setup: the final attempt is claimed');
set local jobs.fake_now = '2030-01-01 00:00:31+00';
select is(jobs.nack((jobs_test.job('b')).id, 3, '{"message": "boom 3"}'), 'dead'::jobs.job_state,
          'retry on the final attempt answers dead');
select results_eq(
  $$ select state, attempt, finished_at, lease_expires_at, last_error->>'message', (last_error->>'attempt')::int
       from jobs.job where name = 'retry.job' and key = 'b' $$,
  $$ values ('dead'::jobs.job_state, 3, '2030-01-01 00:00:31+00'::timestamptz, null::timestamptz, 'boom 3', 3) $$,
  'dead-lettered: finished now, with the last error');
select is((select count(*)::int from jobs.claim('{q_retry_b}', 'w', 1, 30)), 0, 'a dead job is never claimed');

-- ---------------------------------------------------------------- cap, explicit delay
set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform jobs_test.add('cap', '{"retry_base_s": 10, "retry_cap_s": 15, "retry_jitter": "none"}');
  perform jobs_test.claim('cap');
end $$;
select is(jobs.nack((jobs_test.job('cap')).id, 1, null, 'retry', 0.5), 'ready'::jobs.job_state,
          'setup: retry with an explicit delay');
select is((jobs_test.job('cap')).run_at, '2030-01-01 00:00:00.5+00'::timestamptz,
          'an explicit delay_s wins over the backoff: run_at = now + 0.5 s');
set local jobs.fake_now = '2030-01-01 00:00:01+00';
do $$ begin perform jobs_test.claim('cap'); end $$;
select is(jobs.nack((jobs_test.job('cap')).id, 2), 'ready'::jobs.job_state, 'setup: retry after attempt 2');
select is((jobs_test.job('cap')).run_at, '2030-01-01 00:00:16+00'::timestamptz,
          'the backoff is capped: 20 s becomes 15 s');
set local jobs.fake_now = '2030-01-01 00:00:16+00';
do $$ begin perform jobs_test.claim('cap'); end $$;
select is(jobs.nack((jobs_test.job('cap')).id, 3, null, null, 0), 'ready'::jobs.job_state,
          'a null mode is retry; delay 0 is now');
select is((jobs_test.job('cap')).run_at, jobs.now(), 'run_at = now');
select is((jobs_test.job('cap')).last_error, null, 'with no error given, last_error stays as it was (none)');

-- ---------------------------------------------------------------- full jitter
do $$ begin
  perform jobs_test.add('full', '{"retry_base_s": 60, "retry_jitter": "full"}');
  perform jobs_test.claim('full');
end $$;
select is(jobs.nack((jobs_test.job('full')).id, 1, '{"message": "x"}'), 'ready'::jobs.job_state, 'setup: retry, full jitter');
select ok((jobs_test.job('full')).run_at between jobs.now() and jobs.now() + interval '60 seconds',
          'with full jitter, run_at is within [now, now + 60 s]');

-- ---------------------------------------------------------------- no dead-letter
do $$ begin
  perform jobs_test.add('nodl', '{"max_attempts": 1, "dead_letter": false}');
  perform jobs_test.claim('nodl');
end $$;
select is(jobs.nack((jobs_test.job('nodl')).id, 1, '{"message": "x"}'), 'failed'::jobs.job_state,
          'with dead_letter off, retry on the final attempt answers failed');
select results_eq($$ select state, finished_at from jobs.job where name = 'retry.job' and key = 'nodl' $$,
                  $$ values ('failed'::jobs.job_state, jobs.now()) $$, 'failed and finished now');

-- ---------------------------------------------------------------- a scalar error
do $$ begin
  perform jobs_test.add('str', '{}');
  perform jobs_test.claim('str');
end $$;
select is(jobs.nack((jobs_test.job('str')).id, 1, '"connection refused"'), 'ready'::jobs.job_state,
          'setup: retry with a string error');
select is((jobs_test.job('str')).last_error,
          pg_catalog.jsonb_build_object('message', 'connection refused', 'attempt', 1, 'at', jobs.now()),
          'an error that is not an object is stored as its message, with attempt and at');

select * from finish();
rollback;
