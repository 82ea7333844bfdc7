-- jobs.nack modes other than retry: fail (terminal), park (suspended, not an attempt),
-- shed (back to ready, not an attempt), interrupt (interrupted, not an attempt).
begin;
select plan(20);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.job / test.jid / test.claim_of: sqltests/_helpers.sql): each job in
-- its own queue q_modes_<key>, claimed (attempt 1); a nack presents its live claim token

do $$ begin
  perform test.start('modes.job', 'fail', '{"queue": "q_modes_fail", "max_attempts": 5}');
  perform test.start('modes.job', 'park', '{"queue": "q_modes_park"}');
  perform test.start('modes.job', 'parkinf', '{"queue": "q_modes_parkinf"}');
  perform test.start('modes.job', 'shed', '{"queue": "q_modes_shed"}');
  perform test.start('modes.job', 'sheddelay', '{"queue": "q_modes_sheddelay"}');
  perform test.start('modes.job', 'int', '{"queue": "q_modes_int"}');
  perform test.start('modes.job', 'last', '{"queue": "q_modes_last", "max_attempts": 1}');
end $$;
set local jobs.fake_now = '2030-01-01 00:00:05+00';

-- ---------------------------------------------------------------- fail
select is(jobs.nack(test.jid('modes.job', 'fail'), test.claim_of('modes.job', 'fail'), '{"message": "bad input"}', 'fail'), 'failed'::jobs.job_state,
          'fail answers failed, attempts left or not');
select results_eq(
  $$ select state, attempt, finished_at, lease_expires_at, last_error->>'message', (last_error->>'attempt')::int
       from jobs.job where name = 'modes.job' and key = 'fail' $$,
  $$ values ('failed'::jobs.job_state, 1, '2030-01-01 00:00:05+00'::timestamptz, null::timestamptz, 'bad input', 1) $$,
  'failed: terminal now, finished, with the error and its attempt');

-- ---------------------------------------------------------------- park
select is(jobs.nack(test.jid('modes.job', 'park'), test.claim_of('modes.job', 'park'), null, 'park', 120), 'parked'::jobs.job_state,
          'park answers parked');
select results_eq(
  $$ select state, attempt, run_at, finished_at, lease_expires_at from jobs.job where name = 'modes.job' and key = 'park' $$,
  $$ values ('parked'::jobs.job_state, 0, '2030-01-01 00:02:05+00'::timestamptz, null::timestamptz, null::timestamptz) $$,
  'parked: wakes at now + delay_s; the attempt is handed back (not an attempt)');
select is(jobs.nack(test.jid('modes.job', 'parkinf'), test.claim_of('modes.job', 'parkinf'), null, 'park'), 'parked'::jobs.job_state,
          'park with no delay');
select is((test.job('modes.job', 'parkinf')).run_at, 'infinity'::timestamptz, 'parked with no delay wakes never (run_at infinity)');
select is((test.job('modes.job', 'parkinf')).attempt, 0, 'and is not an attempt either');

-- ---------------------------------------------------------------- shed
select is(jobs.nack(test.jid('modes.job', 'shed'), test.claim_of('modes.job', 'shed'), null, 'shed'), 'ready'::jobs.job_state, 'shed answers ready');
select results_eq(
  $$ select state, attempt, run_at, finished_at, lease_expires_at from jobs.job where name = 'modes.job' and key = 'shed' $$,
  $$ values ('ready'::jobs.job_state, 0, '2030-01-01 00:00:05+00'::timestamptz, null::timestamptz, null::timestamptz) $$,
  'shed: ready now, the attempt handed back');
select is(jobs.nack(test.jid('modes.job', 'sheddelay'), test.claim_of('modes.job', 'sheddelay'), '{"kind": "rate_limited"}', 'shed', 7), 'ready'::jobs.job_state,
          'shed with a delay');
select results_eq($$ select run_at, attempt, last_error->>'kind' from jobs.job where name = 'modes.job' and key = 'sheddelay' $$,
                  $$ values ('2030-01-01 00:00:12+00'::timestamptz, 0, 'rate_limited') $$,
                  'shed with a delay: run_at = now + delay_s, uncounted, the error kept');

-- ---------------------------------------------------------------- interrupt
select is(jobs.nack(test.jid('modes.job', 'int'), test.claim_of('modes.job', 'int'), '{"kind": "drain"}', 'interrupt'), 'interrupted'::jobs.job_state,
          'interrupt answers interrupted');
select results_eq(
  $$ select state, attempt, run_at, finished_at, lease_expires_at from jobs.job where name = 'modes.job' and key = 'int' $$,
  $$ values ('interrupted'::jobs.job_state, 0, '2030-01-01 00:00:00+00'::timestamptz, null::timestamptz, null::timestamptz) $$,
  'interrupted: runnable at once in its old place (run_at kept), the attempt handed back');

-- ---------------------------------------------------------------- on the final attempt
-- uncounted modes never exhaust a job: park/shed/interrupt on the last attempt keep it live
select is(jobs.nack(test.jid('modes.job', 'last'), test.claim_of('modes.job', 'last'), null, 'shed'), 'ready'::jobs.job_state,
          'shed on the final attempt answers ready, not dead');
select is((select c.attempt from jobs.claim('{q_modes_last}', 'w', 1, 30) c), 1,
          'claimed again, it is on attempt 1 of 1 again');
select is(jobs.nack(test.jid('modes.job', 'last'), test.claim_of('modes.job', 'last'), null, 'interrupt'), 'interrupted'::jobs.job_state,
          'interrupt on the final attempt answers interrupted');
do $$ begin perform from jobs.claim('{q_modes_last}', 'w', 1, 30); end $$;
select is(jobs.nack(test.jid('modes.job', 'last'), test.claim_of('modes.job', 'last'), null, 'park', 1), 'parked'::jobs.job_state,
          'park on the final attempt answers parked');
select is((test.job('modes.job', 'last')).attempt, 0, 'the final attempt is still unspent');

-- ---------------------------------------------------------------- uncounted runs pile up no attempts
select results_eq(
  $$ select key, attempt from jobs.job where name = 'modes.job' and state in ('ready', 'parked', 'interrupted') order by key $$,
  $$ values ('int', 0), ('last', 0), ('park', 0), ('parkinf', 0), ('shed', 0), ('sheddelay', 0) $$,
  'every uncounted nack left its job at attempt 0');
select is((select count(*)::int from jobs.job where name = 'modes.job' and finished_at is not null), 1,
          'only fail finished a job');

select * from finish();
rollback;
