-- The payload rule and the nack error shape, at every entry point.
-- A payload is a JSON object; JSON null or an absent payload is {}. Anything else is
-- refused with invalid_argument (SJ001) 'spec N: payload must be a JSON object' by
-- enqueue, enqueue_many, stage, stage_many, step_invoke and schedule definitions alike.
-- A nack's error object must have string kind and message when it gives them.
begin;
select plan(21);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.error_of: sqltests/_helpers.sql)

select is(test.error_of($$ select * from jobs.enqueue('pc.job', 'k1', '[1, 2]') $$),
          'SJ001 sqljobs.invalid_argument: spec 1: payload must be a JSON object',
          'enqueue refuses an array payload');
select is(test.error_of($$ select * from jobs.enqueue('pc.job', 'k1', '"text"') $$),
          'SJ001 sqljobs.invalid_argument: spec 1: payload must be a JSON object',
          'enqueue refuses a string payload');
select is(test.error_of($$ select * from jobs.enqueue('pc.job', 'k1', '3') $$),
          'SJ001 sqljobs.invalid_argument: spec 1: payload must be a JSON object',
          'enqueue refuses a number payload');
select is(test.error_of($$ select * from jobs.enqueue_many(
            '[{"name": "pc.job", "key": "k1"}, {"name": "pc.job", "key": "k2", "payload": true}]') $$),
          'SJ001 sqljobs.invalid_argument: spec 2: payload must be a JSON object',
          'enqueue_many names the spec whose payload is not an object');
select is(test.error_of($$ select * from jobs.stage('pc.job', 'k1', '[]') $$),
          'SJ001 sqljobs.invalid_argument: spec 1: payload must be a JSON object',
          'stage refuses it');
select is(test.error_of($$ select * from jobs.stage_many('[{"name": "pc.job", "key": "k1", "payload": [1]}]') $$),
          'SJ001 sqljobs.invalid_argument: spec 1: payload must be a JSON object',
          'stage_many refuses it');
select is(test.error_of($$ select jobs.schedule_put('pc.sched', '{"job": "pc.job", "cron": "* * * * *", "payload": [1]}') $$),
          'SJ001 sqljobs.invalid_argument: schedule pc.sched: spec 1: payload must be a JSON object',
          'a schedule definition refuses it');
select is((select count(*)::int from jobs.job where name = 'pc.job') + (select count(*)::int from jobs.outbox)
          + (select count(*)::int from jobs.schedule where name = 'pc.sched'), 0,
          'the refused calls stored nothing');

select lives_ok($$ select * from jobs.enqueue('pc.job', 'n1', null) $$, 'a null payload is taken');
select lives_ok($$ select * from jobs.enqueue('pc.job', 'n2', 'null') $$, 'a JSON null payload is taken');
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "pc.job", "key": "n3", "payload": null}, {"name": "pc.job", "key": "n4"}]') $$,
                'null and absent payloads in a batch are taken');
select results_eq($$ select key, payload from jobs.job where name = 'pc.job' order by key $$,
                  $$ values ('n1', '{}'::jsonb), ('n2', '{}'), ('n3', '{}'), ('n4', '{}') $$,
                  'each is stored as {}');

-- enqueue_many answers in input order, not in the (name, tenant, key) order it inserts in
create temp table many as
  select * from jobs.enqueue_many('[{"name": "pc.z", "key": "b"}, {"name": "pc.a", "key": "z"},
                                    {"name": "pc.z", "key": "a"}, {"name": "pc.z", "key": "b", "payload": {"other": 1}}]');
select results_eq($$ select m.ord, j.name || '/' || j.key, m.outcome from many m join jobs.job j on j.id = m.id
                     order by m.ord $$,
                  $$ values (1, 'pc.z/b', 'created'), (2, 'pc.a/z', 'created'), (3, 'pc.z/a', 'created'),
                            (4, 'pc.z/b', 'deduped') $$,
                  'enqueue_many answers each spec at its input position (a repeated key: deduped, payload ignored)');
select is((select payload from jobs.job where name = 'pc.z' and key = 'b'), '{}'::jsonb,
          'the deduped spec''s different payload was not stored');

-- step_invoke: a child spec with a non-object payload is refused, the parent stays running
select lives_ok($$ select * from jobs.enqueue('pc.parent', 'p', '{}', '{"queue": "q_pc"}') $$, 'setup: a parent');
create temp table c1 as select id, claim from jobs.claim('{q_pc}', 'w', 1, 30);
select is(test.error_of(format($$ select * from jobs.step_invoke(%s, %s, '{a}', '[{"name": "pc.child", "payload": [1]}]') $$,
                                    (select id from c1), (select claim from c1))),
          'SJ001 sqljobs.invalid_argument: spec 1: payload must be a JSON object',
          'step_invoke refuses a child payload that is not an object');

-- nack: kind and message, when given, are strings
select is(test.error_of(format($$ select jobs.nack(%s, %s, '{"kind": 5, "message": "m"}') $$,
                                    (select id from c1), (select claim from c1))),
          'SJ001 sqljobs.invalid_argument: error 1: kind must be a JSON string, got number'
          || ' (send {"kind": "...", "message": "...", "detail": ...}, see docs/howto-other-languages.md)',
          'nack refuses a kind that is not a string');
select is(test.error_of(format($$ select * from jobs.nack_many(array[%s, %s], array[%s, 1]::bigint[],
                                         array['{"kind": "error"}', '{"message": {"text": "m"}}']::jsonb[]) $$,
                                    (select id from c1), (select id from c1), (select claim from c1))),
          'SJ001 sqljobs.invalid_argument: error 2: message must be a JSON string, got object'
          || ' (send {"kind": "...", "message": "...", "detail": ...}, see docs/howto-other-languages.md)',
          'nack_many names the error whose message is not a string, and refuses the batch');
select results_eq($$ select state::text, last_error from jobs.job where id = (select id from c1) $$,
                  $$ values ('running', null::jsonb) $$, 'the refused nacks changed nothing');
select is(jobs.nack((select id from c1), (select claim from c1),
                    '{"kind": "error", "message": "m", "detail": {"line": 3}}', 'fail')::text,
          'failed', 'a well-formed error is taken');
select is((select last_error - 'at' from jobs.job where id = (select id from c1)),
          '{"kind": "error", "message": "m", "detail": {"line": 3}, "attempt": 1}'::jsonb,
          'and stored with attempt and at');

select * from finish();
rollback;
