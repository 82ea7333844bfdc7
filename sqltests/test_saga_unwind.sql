-- Saga bookkeeping: a compensable step marks the job; jobs.step_unwind records the final
-- state and makes the job compensating; lease recovery of a compensating job never
-- buries it; compensations are stored as undo steps (first write wins); and
-- jobs.step_unwound settles the job in the recorded state.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('saga.job', 'k', '{}', '{"queue": "q_saga", "max_attempts": 1}') $$, 'setup: a job with one attempt');
create temp table c1 as select id, claim from jobs.claim('{q_saga}', 'w', 1, 30);
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L, null, %L)', (select id from c1), (select claim from c1),
                       'charge', '{"charge": "ch_1"}', '{"compensable": true}'), 'a compensable step');
select is((select compensable from jobs.job), true, 'marks the job compensable');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L, null, %L)', (select id from c1), (select claim from c1),
                        'x', '1', '{"nope": true}'), 'SJ001', null, 'unknown options are refused');

select is(jobs.step_unwind((select id from c1), (select claim from c1), 'retry', '{"kind": "error", "message": "boom"}'),
          '{"state": "dead", "error": {"kind": "error", "message": "boom"}}'::jsonb,
          'an unwind after the last attempt records dead');
select results_eq($$ select state, compensating from jobs.job $$, $$ values ('running'::jobs.job_state, true) $$,
                  'the job keeps running, now compensating');

-- the worker dies mid-unwind: the lease lapses; the job is not buried
set local jobs.fake_now = '2030-01-01 00:01:00+00';
create temp table c2 as select id, claim, attempt, steps from jobs.claim('{q_saga}', 'w', 1, 30);
select is((select count(*)::int from c2), 1, 'lease recovery sends a compensating job back (claimed again) although its attempts are spent');
select is((select steps->'sqljobs.unwind'->>'state' from c2), 'dead', 'the claim hands back the unwind record');

select is(jobs.step_put((select id from c2), (select claim from c2), 'sqljobs.undo:charge', '{"refund": "re_1"}', null, '{"undo": true}'),
          '{"refund": "re_1"}'::jsonb, 'the compensation is stored');
select is(jobs.step_put((select id from c2), (select claim from c2), 'sqljobs.undo:charge', '{"refund": "re_2"}', null, '{"undo": true}'),
          '{"refund": "re_1"}'::jsonb, 'a repeated compensation answers the first (never repeated)');
select is(jobs.step_unwound((select id from c2), (select claim from c2)), 'dead'::jobs.job_state, 'step_unwound settles it');
select results_eq($$ select state, compensating, last_error->>'message', (last_error->>'compensated')::boolean from jobs.job $$,
                  $$ values ('dead'::jobs.job_state, false, 'boom', true) $$, 'dead, with the error and compensated = true');

select * from finish();
rollback;
