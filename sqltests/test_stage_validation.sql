-- jobs.stage / jobs.stage_many refuse bad input with a coded error and write nothing.
begin;
select plan(13);

select throws_ok($$ select jobs.stage_many('{"name": "x"}') $$, 'SJ001', null,
                 'specs must be an array');
select throws_ok($$ select jobs.stage('sv.job', 'k', '{}', '{"on_conflict": "error"}') $$,
                 'SJ001', null, 'on_conflict is refused: stage always dedupes');
select throws_ok($$ select jobs.stage('sv.job', 'k', '{}', '{"ordering_key": 7}') $$,
                 'SJ001', null, 'an ordering_key that is not a string is refused');
select throws_ok($$ select jobs.stage('sv.job', 'k', '{}', '{"ordering_key": ""}') $$,
                 'SJ001', null, 'an empty ordering_key is refused');
select throws_ok(format('select jobs.stage(%L, %L, %L, %L)', 'sv.job', 'k', '{}',
                        jsonb_build_object('ordering_key', repeat('o', 1001))),
                 'SJ001', null, 'an ordering_key over 1000 bytes is refused');
select throws_ok($$ select jobs.stage('sv.job', '', '{}') $$, 'SJ001', null,
                 'the idempotency key is required');
select throws_ok($$ select jobs.stage('sv.job', 'k', '{}', '{"run_at": "infinity"}') $$, 'SJ001', null,
                 'a run_at past 2200 (infinity) is refused');
select throws_ok(format('select jobs.stage(%L, %L, %L)', 'sv.job', 'k', repeat('{"a": ', 150) || '1' || repeat('}', 150)),
                 'SJ001', null, 'a payload nested 150 levels deep is refused');
select throws_ok(format('select jobs.stage(%L, %L)', repeat('n', 10000), 'k'), 'SJ001', null,
                 'a 10,000-byte name is refused');
select throws_ok($$ select jobs.stage_many('[{"name": "sv.job", "key": "ok"},
                                             {"name": "sv.job", "key": "k", "bogus": 1}]') $$,
                 'SJ001', null, 'an unknown field anywhere refuses the whole batch');
select throws_ok($$ select jobs.stage('sv.job', 'k', '{}', '{"key": "other"}') $$, 'SJ001', null,
                 'options must not carry name, key or payload');
set local jobs.max_payload_bytes = 10;
select throws_ok($$ select jobs.stage('sv.job', 'k', '{"long": "xxxxxxxxxxxxxxxx"}') $$,
                 'SJ002', null, 'a payload over the limit is payload_too_large');
select is((select count(*)::int from jobs.outbox), 0, 'nothing was staged');

select * from finish();
rollback;
