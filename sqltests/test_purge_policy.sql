-- The stored retention policy (jobs.retention_put / retention_remove / retention_policy)
-- and the refusals: invalid_retention (SJ014) for a bad age or batch, unknown_retention_key
-- (SJ015) for a key that is not a final state, awaited or events. A refused call
-- changes nothing. '' names no queue (invalid_argument SJ001; null is '*'). And
-- jobs.retention_sweep, the scheduler's batch: jobs.purge under the stored policy.
begin;
select plan(27);

set local jobs.fake_now = '2030-01-01 00:00:00+00';

-- ---------------------------------------------------------------- the stored policy
select results_eq($$ select queue, succeeded_s, dead_s, events_s
                       from jobs.retention_put(null, '{"succeeded": 3600, "events": 86400}') $$,
                  $$ values ('*', 3600::float8, null::float8, 86400::float8) $$,
                  'queue null is ''*'', every queue''s default; keys not given stay null (inherit)');
select results_eq($$ select queue, succeeded_s, dead_s from jobs.retention_put('*', '{"dead": "forever"}') $$,
                  $$ values ('*', 3600::float8, 'Infinity'::float8) $$,
                  'a second put keeps the keys it does not name; "forever" is Infinity');
select lives_ok($$ select * from jobs.retention_put('mail', '{"succeeded": 60, "awaited": 120}') $$,
                'a queue override');
select results_eq($$ select queue, succeeded_s, failed_s, dead_s, cancelled_s, awaited_s, events_s
                       from jobs.retention_policy() $$,
                  $$ values ('*', 3600::float8, 2592000::float8, 'Infinity'::float8, 604800::float8, 3600::float8, 86400::float8),
                            ('mail', 60, 2592000, 'Infinity', 604800, 120, 86400) $$,
                  'retention_policy resolves: the queue, then ''*'', then the built-in defaults');
select results_eq($$ select queue, succeeded_s from jobs.retention_policy('{"succeeded": 10, "queues": {"new": {"failed": 5}}}') $$,
                  $$ values ('*', 10::float8), ('mail', 60), ('new', 10) $$,
                  'with a call policy: its top level under each queue''s own, its queues listed');
select results_eq($$ select queue, succeeded_s from jobs.retention_put('mail', '{"succeeded": null}') $$,
                  $$ values ('mail', null::float8) $$, 'JSON null: inherit again');
select is(jobs.retention_remove('mail'), true, 'remove a queue''s row');
select is(jobs.retention_remove('mail'), false, 'a second remove answers false');
select is(jobs.retention_remove(null), true, 'removing ''*'' brings back the built-in defaults');
select is((select succeeded_s from jobs.retention_policy()), 86400::float8, '...which are read again');

-- ---------------------------------------------------------------- refusals
select throws_ok($$ select * from jobs.purge(0) $$, 'SJ014', null, 'a batch of 0: invalid_retention');
select throws_ok($$ select * from jobs.purge(100001) $$, 'SJ014', null, 'a batch above 100000: invalid_retention');
select throws_ok($$ select * from jobs.purge(null) $$, 'SJ014', null, 'no batch: invalid_retention');
select throws_ok($$ select * from jobs.purge(10, false, '{"succeeded": -1}') $$, 'SJ014', null,
                 'a negative age: invalid_retention');
select throws_ok($$ select * from jobs.purge(10, false, '{"dead": "30d"}') $$, 'SJ014', null,
                 'an age that is not a number: invalid_retention');
select throws_ok($$ select * from jobs.purge(10, false, '{"done": 60}') $$, 'SJ015', null,
                 'an unknown state name: unknown_retention_key');
select throws_ok($$ select * from jobs.purge(10, false, '{"queues": {"mail": {"ready": 60}}}') $$, 'SJ015', null,
                 'a live state in a queue override: unknown_retention_key');
select throws_ok($$ select * from jobs.retention_put('mail', '{"events": 60}') $$, 'SJ014', null,
                 'events have no queue: set on ''*'' only');
select throws_ok($$ select * from jobs.purge(10, false, '{"queues": {"mail": {"events": 60}}}') $$, 'SJ014', null,
                 '...nor in a call''s queue override');
select throws_ok($$ select * from jobs.retention_put('mail', '{"queues": {}}') $$, 'SJ015', null,
                 'a stored row takes no queues key');
select throws_ok($$ select * from jobs.retention_put('', '{"succeeded": 60}') $$, 'SJ001', null,
                 'retention_put(''''): invalid_argument ('''' is not another way to write ''*'')');
select throws_ok($$ select jobs.retention_remove('') $$, 'SJ001', null, 'retention_remove(''''): invalid_argument');
select is((select count(*)::int from jobs.retention), 0, 'the refused calls stored nothing');

-- ---------------------------------------------------------------- retention_sweep
select lives_ok($$ select test.finish('pp.job', 'old', '{}', 'succeeded'), test.finish('pp.job', 'kept', '{}', 'failed') $$,
                'setup: a succeeded and a failed job...');
select lives_ok($$ select * from jobs.retention_put(null, '{"succeeded": 60}') $$,
                '...and a stored policy that keeps succeeded jobs 60 s');
set local jobs.fake_now = '2030-01-01 00:02:00+00';
select results_eq($$ select what, deleted from jobs.retention_sweep(10) order by what $$,
                  $$ values ('event', 0::bigint), ('job', 1::bigint), ('outbox', 0::bigint) $$,
                  'two minutes on, retention_sweep deletes the succeeded job under the stored policy');
select ok(test.jid('pp.job', 'old') is null and test.jid('pp.job', 'kept') is not null,
          'the failed job stays (30 days by default)');

select * from finish();
rollback;
