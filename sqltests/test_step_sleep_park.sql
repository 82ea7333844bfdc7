-- jobs.step_sleep stores the wake-up time once (database clock), parks the job until
-- then in the same call (not an attempt, lease released), and answers parked = false
-- once the time has passed; jobs.claim wakes the job when its time comes.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('sleep.job', 'k1', '{}', '{"queue": "q_sleep"}') $$,
                'setup: a job');
create temp table c1 as select id, claim, attempt from jobs.claim('{q_sleep}', 'w', 1, 30);

select results_eq(format('select wake_at, parked from jobs.step_sleep(%s, %s, %L, null, 60)',
                         (select id from c1), (select claim from c1), 'nap'),
                  $$ values ('2030-01-01 00:01:00+00'::timestamptz, true) $$,
                  'the first call stores now + 60 s and parks');
select results_eq($$ select state, run_at, attempt, lease_expires_at from jobs.job $$,
                  $$ values ('parked'::jobs.job_state, '2030-01-01 00:01:00+00'::timestamptz, 0, null::timestamptz) $$,
                  'the job is parked until then, the attempt not counted, the lease released');
select throws_ok(format('select * from jobs.step_sleep(%s, %s, %L, null, 60)',
                        (select id from c1), (select claim from c1), 'nap'),
                 'SJ004', null, 'a parked run cannot call again under its old claim');

set local jobs.fake_now = '2030-01-01 00:00:59+00';
select is((select count(*)::int from jobs.claim('{q_sleep}', 'w', 1, 30)), 0, 'not claimed before its time');

set local jobs.fake_now = '2030-01-01 00:01:00+00';
create temp table c2 as select id, claim, attempt, steps from jobs.claim('{q_sleep}', 'w', 1, 30);
select is((select attempt from c2), 1, 'claimed at its time, still the first attempt');
select is((select steps->'nap'->>'until' from c2)::timestamptz, '2030-01-01 00:01:00+00'::timestamptz,
          'the claim answers the stored wake-up time');
select results_eq(format('select wake_at, parked from jobs.step_sleep(%s, %s, %L, null, 60)',
                         (select id from c2), (select claim from c2), 'nap'),
                  $$ values ('2030-01-01 00:01:00+00'::timestamptz, false) $$,
                  'a replayed sleep whose time passed does not park (the stored time wins over the new delay)');
select is((select state from jobs.job), 'running'::jobs.job_state, 'the job keeps running');

select throws_ok(format('select * from jobs.step_sleep(%s, %s, %L)', (select id from c2), (select claim from c2), 'x'),
                 'SJ001', null, 'a sleep needs a time or a delay');
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c2), (select claim from c2), 'r', '1'), 'setup: a run step');
select throws_ok(format('select * from jobs.step_sleep(%s, %s, %L, null, 1)', (select id from c2), (select claim from c2), 'r'),
                 'SJ001', null, 'a stored run step is not a sleep');

select * from finish();
rollback;
