-- Saga bookkeeping, decided in SQL: a compensable step marks the job; a nack that would
-- end it (retries exhausted, or fail) starts its unwind instead: the final state is
-- recorded and the job keeps running under its claim, compensating; a nack that leaves
-- attempts does not; lease recovery of a compensating job never buries it, and of a
-- compensable job on its last attempt starts the unwind; compensations are stored as
-- undo steps (first write wins); jobs.step_unwound settles the job in the recorded state.
begin;
select plan(20);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('saga.job', 'k', '{}', '{"queue": "q_saga", "max_attempts": 2, "retry_jitter": "none"}') $$,
                'setup: a job with two attempts');
create temp table c1 as select id, claim from jobs.claim('{q_saga}', 'w', 1, 30);
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L, null, %L)', (select id from c1), (select claim from c1),
                       'charge', '{"charge": "ch_1"}', '{"compensable": true}'), 'a compensable step');
select is((select compensable from jobs.job), true, 'marks the job compensable');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L, null, %L)', (select id from c1), (select claim from c1),
                        'x', '1', '{"nope": true}'), 'SJ001', null, 'unknown options are refused');

-- a failure with attempts left is an ordinary retry
select results_eq(format($$ select ok, state from jobs.nack_many(array[%s], array[%s], array['{"kind": "error", "message": "first"}'::jsonb]) $$,
                         (select id from c1), (select claim from c1)),
                  $$ values (true, 'ready'::jobs.job_state) $$, 'a nack with an attempt left retries (ready)');
select is((select compensating from jobs.job), false, 'and does not unwind');

-- the last attempt fails: the nack starts the unwind
set local jobs.fake_now = '2030-01-01 00:00:10+00';
create temp table c2 as select id, claim from jobs.claim('{q_saga}', 'w', 1, 30);
select results_eq(format($$ select ok, state from jobs.nack_many(array[%s], array[%s], array['{"kind": "error", "message": "boom"}'::jsonb]) $$,
                         (select id from c2), (select claim from c2)),
                  $$ values (true, 'running'::jobs.job_state) $$,
                  'the nack that would bury it answers running: the unwind has begun');
select results_eq($$ select state, compensating, claim = (select claim from c2), lease_expires_at is not null from jobs.job $$,
                  $$ values ('running'::jobs.job_state, true, true, true) $$,
                  'the job keeps running under the same claim and lease, compensating');
select is((select value from jobs.step where name = 'sqljobs.unwind'),
          '{"state": "dead", "error": {"kind": "error", "message": "boom"}}'::jsonb,
          'the unwind records dead (retries exhausted) and the error');

-- the worker dies mid-unwind: the lease lapses; the job is not buried
set local jobs.fake_now = '2030-01-01 00:01:00+00';
create temp table c3 as select id, claim, attempt, steps from jobs.claim('{q_saga}', 'w', 1, 30);
select is((select count(*)::int from c3), 1, 'lease recovery sends a compensating job back (claimed again) although its attempts are spent');
select is((select steps->'sqljobs.unwind'->>'state' from c3), 'dead', 'the claim hands back the unwind record');

select is(jobs.step_put((select id from c3), (select claim from c3), 'charge', '{"refund": "re_1"}', null, '{"undo": true}'),
          '{"refund": "re_1"}'::jsonb, 'the compensation is stored');
select is((select kind from jobs.step where name = 'sqljobs.undo:charge'), 'undo', 'as step sqljobs.undo:charge');
select is(jobs.step_put((select id from c3), (select claim from c3), 'charge', '{"refund": "re_2"}', null, '{"undo": true}'),
          '{"refund": "re_1"}'::jsonb, 'a repeated compensation answers the first (never repeated)');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c3), (select claim from c3),
                        'sqljobs.undo:charge', '1'), 'SJ011', null, 'a caller cannot write the runtime''s own names');
select is(jobs.step_unwound((select id from c3), (select claim from c3)), 'dead'::jobs.job_state, 'step_unwound settles it');
select results_eq($$ select state, compensating, last_error->>'message', (last_error->>'compensated')::boolean from jobs.job $$,
                  $$ values ('dead'::jobs.job_state, false, 'boom', true) $$, 'dead, with the error and compensated = true');

-- a compensable job whose lease lapses on its last attempt starts its unwind in the claim
select lives_ok($$ select * from jobs.enqueue('saga.job', 'k2', '{}', '{"queue": "q_saga", "max_attempts": 1, "dead_letter": false}') $$,
                'setup: a second job, one attempt, no dead-letter');
create temp table c4 as select id, claim from jobs.claim('{q_saga}', 'w', 1, 30);
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L, null, %L)', (select id from c4), (select claim from c4),
                       'book', '1', '{"compensable": true}'), 'setup: a compensable step');
set local jobs.fake_now = '2030-01-01 00:02:00+00';
select is((select steps->'sqljobs.unwind'->>'state' from jobs.claim('{q_saga}', 'w', 1, 30)), 'failed',
          'lease recovery starts its unwind (failed: no dead-letter) and hands it to the next claim');

select * from finish();
rollback;
