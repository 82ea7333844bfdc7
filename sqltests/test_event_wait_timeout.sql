-- A wait's timeout is recorded durably as the step's outcome: once the deadline passed
-- with no matching event, the step stores {"timeout": true}; an event emitted later
-- never changes it, and a replay answers the same. Events after the deadline lose.
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('wait.job', 'k', '{}', '{"queue": "q_to"}') $$, 'setup: a job');
create temp table c1 as select id, claim from jobs.claim('{q_to}', 'w', 1, 30);
select results_eq(format('select parked from jobs.step_wait(%s, %s, %L, %L, 60)',
                         (select id from c1), (select claim from c1), 'w', '[{"event": "go"}]'),
                  $$ values (true) $$, 'the wait parks');
select is((select run_at from jobs.job), '2030-01-01 00:01:00+00'::timestamptz, 'until its deadline');

set local jobs.fake_now = '2030-01-01 00:01:00+00';
create temp table c2 as select id, claim from jobs.claim('{q_to}', 'w', 1, 30);
select is((select count(*)::int from c2), 1, 'the claim wakes it at the deadline');
set local jobs.fake_now = '2030-01-01 00:01:01+00';
select lives_ok($$ select jobs.emit_event('go', '{}') $$, 'an event just after the deadline');
select results_eq(format('select value, parked from jobs.step_wait(%s, %s, %L, %L, 60)',
                         (select id from c2), (select claim from c2), 'w', '[{"event": "go"}]'),
                  $$ values ('{"timeout": true}'::jsonb, false) $$,
                  'the wait resolves as timed out (the deadline of the first call holds)');
select results_eq($$ select kind from jobs.step $$, $$ values ('timeout') $$, 'stored as a timeout step');
select results_eq(format('select value from jobs.step_wait(%s, %s, %L, %L, 60)',
                         (select id from c2), (select claim from c2), 'w', '[{"event": "go"}]'),
                  $$ values ('{"timeout": true}'::jsonb) $$, 'a replay answers the stored timeout');

select * from finish();
rollback;
