-- jobs.claim: argument refusals. No queue -> queues_required (SJ005); a missing worker,
-- limit outside 1..1000, lease_s <= 0 or a bad option -> invalid_argument (SJ001).
-- A refused claim changes nothing.
begin;
select plan(21);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('guard.job', 'k', '{}', '{"queue": "q_guard"}') $$,
                'setup: one ready job');

select throws_ok($$ select * from jobs.claim('{}'::text[], 'w') $$, 'SJ005', null,
                 'an empty queue list is refused with queues_required');
select throws_ok($$ select * from jobs.claim(null::text[], 'w') $$, 'SJ005', null,
                 'a null queue list is refused with queues_required');
select throws_ok($$ select * from jobs.claim('{q_guard}', null) $$, 'SJ001', null, 'a null worker is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', '') $$, 'SJ001', null, 'an empty worker is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 0) $$, 'SJ001', null, 'limit 0 is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', -1) $$, 'SJ001', null, 'a negative limit is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1001) $$, 'SJ001', null, 'limit 1001 is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', null) $$, 'SJ001', null, 'a null limit is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1, 0) $$, 'SJ001', null, 'lease_s 0 is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1, -5) $$, 'SJ001', null,
                 'a negative lease_s is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1, null) $$, 'SJ001', null,
                 'a null lease_s is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1, 30, '{"nmes": ["guard.job"]}') $$,
                 'SJ001', null, 'an unknown option is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1, 30, '{"names": "guard.job"}') $$,
                 'SJ001', null, 'options.names that is not an array is refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1, 30, '[]') $$, 'SJ001', null,
                 'options that are not an object are refused');
select throws_ok($$ select * from jobs.claim('{q_guard}', 'w', 1, 30, null) $$, 'SJ001', null,
                 'null options are refused');

select results_eq($$ select state, attempt, claim, worker from jobs.job where name = 'guard.job' $$,
                  $$ values ('ready'::jobs.job_state, 0, 0::bigint, null::text) $$,
                  'the refused claims changed nothing');

select lives_ok($$ select * from jobs.claim('{q_guard}', 'w', 1000, 0.001) $$,
                'limit 1000 and a tiny positive lease are accepted');
select is((select count(*)::int from jobs.claim('{q_guard_empty}', 'w', 1)), 0,
          'a queue with no jobs answers no rows (not an error)');
select is((select count(*)::int from jobs.claim('{q_guard_empty, q_guard}', 'w', 1)), 0,
          'a queue whose only job is running answers no rows');
select is((select state from jobs.job where name = 'guard.job'), 'running'::jobs.job_state,
          'the accepted claim took the job');

select * from finish();
rollback;
