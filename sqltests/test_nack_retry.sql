-- jobs.nack mode retry (the default): the attempt counts; next run_at = now + delay_s,
-- or the job's backoff curve; attempts exhausted -> dead, or failed when dead_letter
-- is off. last_error = the error plus attempt and at.
begin;
select plan(25);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local timezone = 'UTC';  -- last_error.at is compared as JSON text
-- (test.start / test.claim_one / test.job / test.jid / test.claim_of: sqltests/_helpers.sql):
-- each job in its own queue q_retry_<key>; a nack presents the live claim token

-- ---------------------------------------------------------------- backoff (jitter none)
do $$ begin
  perform test.start('retry.job', 'b', '{"queue": "q_retry_b", "max_attempts": 3, "retry_base_s": 10, "retry_cap_s": 100, "retry_jitter": "none"}');
end $$;
select is(jobs.nack(test.jid('retry.job', 'b'), test.claim_of('retry.job', 'b'), '{"kind": "error", "message": "boom"}'),
          'ready'::jobs.job_state, 'retry with attempts left answers ready');
select results_eq(
  $$ select state, attempt, run_at, lease_expires_at, finished_at, result
       from jobs.job where name = 'retry.job' and key = 'b' $$,
  $$ values ('ready'::jobs.job_state, 1, '2030-01-01 00:00:10+00'::timestamptz, null::timestamptz,
             null::timestamptz, null::jsonb) $$,
  'attempt 1 counted; run_at = now + base (10 s); lease cleared; not finished');
select is((test.job('retry.job', 'b')).last_error,
          '{"kind": "error", "message": "boom", "attempt": 1, "at": "2030-01-01T00:00:00+00:00"}'::jsonb,
          'last_error is the error plus attempt and at');
select is((select count(*)::int from jobs.claim('{q_retry_b}', 'w', 1, 30)), 0, 'not claimable before its backoff');

set local jobs.fake_now = '2030-01-01 00:00:10+00';
select is(test.claim_one('q_retry_b') >> 32, 2::bigint, 'claimable once the backoff passed (the second claim token)');
select is(jobs.nack(test.jid('retry.job', 'b'), test.claim_of('retry.job', 'b'), '{"message": "boom 2"}', 'retry'), 'ready'::jobs.job_state,
          'an explicit retry mode works the same');
select results_eq($$ select attempt, run_at from jobs.job where name = 'retry.job' and key = 'b' $$,
                  $$ values (2, '2030-01-01 00:00:30+00'::timestamptz) $$,
                  'after attempt 2 the backoff doubles: run_at = now + 20 s');
select is((test.job('retry.job', 'b')).last_error->>'attempt', '2', 'last_error names attempt 2');

-- the final attempt
set local jobs.fake_now = '2030-01-01 00:00:30+00';
select is(test.claim_one('q_retry_b') >> 32, 3::bigint, 'setup: the final attempt is claimed (the third token)');
set local jobs.fake_now = '2030-01-01 00:00:31+00';
select is(jobs.nack(test.jid('retry.job', 'b'), test.claim_of('retry.job', 'b'), '{"message": "boom 3"}'), 'dead'::jobs.job_state,
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
  perform test.start('retry.job', 'cap', '{"queue": "q_retry_cap", "retry_base_s": 10, "retry_cap_s": 15, "retry_jitter": "none"}');
end $$;
select is(jobs.nack(test.jid('retry.job', 'cap'), test.claim_of('retry.job', 'cap'), null, 'retry', 0.5), 'ready'::jobs.job_state,
          'setup: retry with an explicit delay');
select is((test.job('retry.job', 'cap')).run_at, '2030-01-01 00:00:00.5+00'::timestamptz,
          'an explicit delay_s wins over the backoff: run_at = now + 0.5 s');
set local jobs.fake_now = '2030-01-01 00:00:01+00';
do $$ begin perform test.claim_one('q_retry_cap'); end $$;
select is(jobs.nack(test.jid('retry.job', 'cap'), test.claim_of('retry.job', 'cap')), 'ready'::jobs.job_state, 'setup: retry after attempt 2');
select is((test.job('retry.job', 'cap')).run_at, '2030-01-01 00:00:16+00'::timestamptz,
          'the backoff is capped: 20 s becomes 15 s');
set local jobs.fake_now = '2030-01-01 00:00:16+00';
do $$ begin perform test.claim_one('q_retry_cap'); end $$;
select is(jobs.nack(test.jid('retry.job', 'cap'), test.claim_of('retry.job', 'cap'), null, null, 0), 'ready'::jobs.job_state,
          'a null mode is retry; delay 0 is now');
select is((test.job('retry.job', 'cap')).run_at, jobs.now(), 'run_at = now');
select is((test.job('retry.job', 'cap')).last_error, null, 'with no error given, last_error stays as it was (none)');

-- ---------------------------------------------------------------- full jitter
do $$ begin
  perform test.start('retry.job', 'full', '{"queue": "q_retry_full", "retry_base_s": 60, "retry_jitter": "full"}');
end $$;
select is(jobs.nack(test.jid('retry.job', 'full'), test.claim_of('retry.job', 'full'), '{"message": "x"}'), 'ready'::jobs.job_state, 'setup: retry, full jitter');
select ok((test.job('retry.job', 'full')).run_at between jobs.now() and jobs.now() + interval '60 seconds',
          'with full jitter, run_at is within [now, now + 60 s]');

-- ---------------------------------------------------------------- no dead-letter
do $$ begin
  perform test.start('retry.job', 'nodl', '{"queue": "q_retry_nodl", "max_attempts": 1, "dead_letter": false}');
end $$;
select is(jobs.nack(test.jid('retry.job', 'nodl'), test.claim_of('retry.job', 'nodl'), '{"message": "x"}'), 'failed'::jobs.job_state,
          'with dead_letter off, retry on the final attempt answers failed');
select results_eq($$ select state, finished_at from jobs.job where name = 'retry.job' and key = 'nodl' $$,
                  $$ values ('failed'::jobs.job_state, jobs.now()) $$, 'failed and finished now');

-- ---------------------------------------------------------------- a scalar error
do $$ begin
  perform test.start('retry.job', 'str', '{"queue": "q_retry_str"}');
end $$;
select is(jobs.nack(test.jid('retry.job', 'str'), test.claim_of('retry.job', 'str'), '"connection refused"'), 'ready'::jobs.job_state,
          'setup: retry with a string error');
select is((test.job('retry.job', 'str')).last_error,
          pg_catalog.jsonb_build_object('message', 'connection refused', 'attempt', 1, 'at', jobs.now()),
          'an error that is not an object is stored as its message, with attempt and at');

select * from finish();
rollback;
