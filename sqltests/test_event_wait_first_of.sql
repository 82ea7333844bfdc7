-- A wait for the first of several events: specs name several events, each with its own
-- match; the first matching one (by emit order) resolves the wait and says which it was.
begin;
select plan(7);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('wait.job', 'k', '{}', '{"queue": "q_any"}') $$, 'setup: a job');
create temp table c1 as select id, claim from jobs.claim('{q_any}', 'w', 1, 30);
select results_eq(format('select parked from jobs.step_wait(%s, %s, %L, %L)',
                         (select id from c1), (select claim from c1), 'decision',
                         '[{"event": "approved", "match": {"doc": 7}}, {"event": "rejected", "match": {"doc": 7}}]'),
                  $$ values (true) $$, 'it parks waiting for approved or rejected of doc 7');
select lives_ok($$ select jobs.emit_event('approved', '{"doc": 8}') $$, 'an approval of another doc');
select is((select state from jobs.job), 'parked'::jobs.job_state, 'does not wake it');
select lives_ok($$ select jobs.emit_event('rejected', '{"doc": 7, "why": "typo"}') $$, 'a rejection of doc 7');
create temp table c2 as select id, claim from jobs.claim('{q_any}', 'w', 1, 30);
select results_eq(format('select value->>''event'', value->''payload''->>''why'' from jobs.step_wait(%s, %s, %L, %L)',
                         (select id from c2), (select claim from c2), 'decision',
                         '[{"event": "approved", "match": {"doc": 7}}, {"event": "rejected", "match": {"doc": 7}}]'),
                  $$ values ('rejected', 'typo') $$, 'wakes it, and the wait answers which event came');

select throws_ok($$ select * from jobs.step_wait(1, 1, $q$x$q$, $q$[]$q$) $$, $q$SJ001$q$, null, $q$an empty spec list is refused$q$);
select * from finish();
rollback;
