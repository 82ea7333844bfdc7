-- Cursor semantics: a wait sees a matching event emitted after the job's FIRST claim even
-- when it came before the wait was registered; never one emitted before the job started;
-- and a job consumes each event once (a second wait takes the next one).
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('wait.job', 'k', '{}', '{"queue": "q_cur"}') $$, 'setup: a job');
select lives_ok($$ select jobs.emit_event('ping', '{"n": 0}') $$, 'an event before the job started');

set local jobs.fake_now = '2030-01-01 00:00:10+00';
create temp table c1 as select id, claim from jobs.claim('{q_cur}', 'w', 1, 30);
select is((select first_started_at from jobs.job), '2030-01-01 00:00:10+00'::timestamptz, 'the first claim is the cursor');

set local jobs.fake_now = '2030-01-01 00:00:11+00';
select lives_ok($$ select jobs.emit_event('ping', '{"n": 1}') $$, 'an event in the gap: after the start, before the wait');
select lives_ok($$ select jobs.emit_event('ping', '{"n": 2}') $$, 'and another');

set local jobs.fake_now = '2030-01-01 00:00:12+00';
select results_eq(format('select value->''payload'', parked from jobs.step_wait(%s, %s, %L, %L)',
                         (select id from c1), (select claim from c1), 'w1', '[{"event": "ping"}]'),
                  $$ values ('{"n": 1}'::jsonb, false) $$,
                  'the wait resolves at once with the first event since the start (not the one before)');
select results_eq(format('select value->''payload'', parked from jobs.step_wait(%s, %s, %L, %L)',
                         (select id from c1), (select claim from c1), 'w2', '[{"event": "ping"}]'),
                  $$ values ('{"n": 2}'::jsonb, false) $$,
                  'a second wait of the job takes the next event (each consumed once)');
select results_eq(format('select parked from jobs.step_wait(%s, %s, %L, %L)',
                         (select id from c1), (select claim from c1), 'w3', '[{"event": "ping"}]'),
                  $$ values (true) $$, 'a third wait finds none left and parks');

select * from finish();
rollback;
