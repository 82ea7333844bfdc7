-- jobs.enqueue_batch(spec, keys, payloads): jobs sharing one spec answer exactly as
-- jobs.enqueue_many over the specs they stand for: order, dedupe, stored fields,
-- refusals (the same codes and messages, nothing written), singletons. Its wake-ups:
-- test_wake_callers.sql.
begin;
select plan(34);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
-- (test.jid: sqltests/_helpers.sql)
create function jobs_test.jobs() returns bigint language sql as $$
  select pg_catalog.count(*) from jobs.job
$$;

-- ---------------------------------------------------------------- answers and fields
create temp table b1 as
  select pg_catalog.row_number() over () as pos, r.*
    from jobs.enqueue_batch('{"name": "eb.job", "queue": "q_eb", "priority": 3, "max_attempts": 7}',
                            array['c', 'a', 'b', 'a'],
                            '[{"n": 1}, {"n": 2}, null, {"n": 4}]') r;
select results_eq($$ select pos::int, ord from b1 order by pos $$,
                  $$ values (1, 1), (2, 2), (3, 3), (4, 4) $$,
                  'one answer per key, in input order');
select results_eq($$ select ord, id, outcome from b1 order by ord $$,
                  $$ values (1, test.jid('eb.job', 'c'), 'created'),
                            (2, test.jid('eb.job', 'a'), 'created'),
                            (3, test.jid('eb.job', 'b'), 'created'),
                            (4, test.jid('eb.job', 'a'), 'deduped') $$,
                  'each key answers its job; a key repeated in the batch is deduped');
select results_eq($$ select key, payload, queue, priority::int, max_attempts, state::text
                       from jobs.job where name = 'eb.job' order by key $$,
                  $$ values ('a', '{"n": 2}'::jsonb, 'q_eb', 3, 7, 'ready'),
                            ('b', '{}'::jsonb, 'q_eb', 3, 7, 'ready'),
                            ('c', '{"n": 1}'::jsonb, 'q_eb', 3, 7, 'ready') $$,
                  'the shared fields and each own key and payload are stored; a null payload is {}');
-- inserted, and so given their ids, in byte order of the keys (the lock order insert_jobs
-- takes too), with each payload beside its key
create temp table b1o as
  select r.* from jobs.enqueue_batch('{"name": "eb.ord"}', array['c', 'a', 'B'],
                                     '[{"n": "c"}, {"n": "a"}, {"n": "B"}]') r;
select results_eq($$ select key, payload->>'n' from jobs.job where name = 'eb.ord' order by id $$,
                  $$ values ('B', 'B'), ('a', 'a'), ('c', 'c') $$,
                  'a batch is inserted in the keys'' byte order, each with its own payload');
select is((select pg_catalog.count(distinct created_at)::int from jobs.job where name = 'eb.job'),
          1, 'one enqueue time for the batch');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select is((select run_at from jobs.job where id = (select test.jid('eb.job', 'a'))),
          '2030-01-01 00:00:00+00'::timestamptz, 'runnable now');

-- the same batch through enqueue_many stores the same rows
do $$ begin perform jobs.enqueue_many('[{"name": "em.job", "queue": "q_eb", "priority": 3, "max_attempts": 7, "key": "c", "payload": {"n": 1}},
                           {"name": "em.job", "queue": "q_eb", "priority": 3, "max_attempts": 7, "key": "a", "payload": {"n": 2}},
                           {"name": "em.job", "queue": "q_eb", "priority": 3, "max_attempts": 7, "key": "b"}]');
end $$;
select results_eq(
  $$ select key, payload, queue, priority, max_attempts, retry_base_s, retry_cap_s, retry_jitter,
            dead_letter, timeout_s, run_at, state from jobs.job where name = 'eb.job' order by key $$,
  $$ select key, payload, queue, priority, max_attempts, retry_base_s, retry_cap_s, retry_jitter,
            dead_letter, timeout_s, run_at, state from jobs.job where name = 'em.job' order by key $$,
  'enqueue_batch stores what enqueue_many stores for the same specs');

-- ---------------------------------------------------------------- existing keys
create temp table b2 as
  select * from jobs.enqueue_batch('{"name": "eb.job", "queue": "q_eb"}', array['d', 'a']);
select results_eq($$ select ord, id, outcome from b2 order by ord $$,
                  $$ values (1, test.jid('eb.job', 'd'), 'created'),
                            (2, test.jid('eb.job', 'a'), 'deduped') $$,
                  'a key that has a job answers it, deduped; payloads may be left out');

-- ---------------------------------------------------------------- delayed and tenant
do $$ begin perform jobs.enqueue_batch('{"name": "eb.later", "delay_s": 60, "tenant": "acme"}', array['x']); end $$;
select is((select run_at from jobs.job where name = 'eb.later'),
          '2030-01-01 00:01:00+00'::timestamptz, 'delay_s is read once for the batch');
select is((select tenant from jobs.job where name = 'eb.later'), 'acme', 'so is the tenant');
select results_eq($$ select outcome from jobs.enqueue_batch('{"name": "eb.later", "tenant": "acme"}', array['x']) $$,
                  $$ values ('deduped') $$, 'a key is looked up within its tenant');

-- ---------------------------------------------------------------- singleton group
do $$ begin perform jobs.enqueue_batch('{"name": "eb.single", "singleton": true}', array['s1', 's2']); end $$;
select results_eq($$ select ord, outcome from jobs.enqueue_batch('{"name": "eb.single", "singleton": true}', array['s3']) $$,
                  $$ values (1, 'deduped') $$, 'a singleton group answers its live job');
select is((select pg_catalog.count(*)::int from jobs.job where name = 'eb.single'), 1,
          'one singleton job was made');

-- ---------------------------------------------------------------- empty
select is((select pg_catalog.count(*)::int from jobs.enqueue_batch('{"name": "eb.job"}', '{}')), 0,
          'no keys: no answer');

-- ---------------------------------------------------------------- payloads at the limits
set local jobs.max_payload_bytes = 20;
select results_eq($$ select outcome from jobs.enqueue_batch('{"name": "eb.fit"}', array['f1', 'f2'],
                                                            '[{"a": "0123456789"}, {"b": "0123456789"}]') $$,
                  $$ values ('created'), ('created') $$,
                  'payloads each within the limit are taken, however long their array');
reset jobs.max_payload_bytes;
select lives_ok($$ select jobs.enqueue_batch('{"name": "eb.fit"}', array['f3'],
                                             ('[' || repeat('{"a": ', 99) || '1' || repeat('}', 99)
                                              || ']')::jsonb) $$,
                'a payload nested 99 deep is taken');
-- logged in as the producer: the same check, and its private path is not the producer's
set local role sqljobs_producer;
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job"}', array['k1', 'k2'],
                                              ('[{}, ' || repeat('[', 100) || '1' || repeat(']', 100)
                                               || ']')::jsonb) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec 2: payload must be a JSON object',
                 'as the producer: a payload that is not an object, nested 100 deep');
select throws_ok($$ select jobs.too_deep_item() $$, '42501', null,
                 'as the producer: jobs.too_deep_item is not callable');
reset role;

-- ---------------------------------------------------------------- refusals (nothing written)
create temp table before as select jobs_test.jobs() as n;
select throws_ok($$ select jobs.enqueue_batch('[]', array['k']) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec must be a JSON object', 'a spec that is not an object');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job", "key": "k"}', array['k']) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec must not carry key or payload: pass them as keys and payloads',
                 'a spec carrying a key');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job"}', array['k1', 'k2'], '[{}]') $$, 'SJ001',
                 'sqljobs.invalid_argument: payloads must be a JSON array holding one payload per key (or null)',
                 'fewer payloads than keys');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job", "max_attempts": 0}', array['k1', 'k2']) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec 1: max_attempts must be at least 1',
                 'a bad shared field: enqueue_many''s refusal of the first spec');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job"}', array['k1', '']) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec 2: key is required (the idempotency key)',
                 'an empty key: refused by its position');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job"}', array['k1', null]) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec 2: key is required (the idempotency key)',
                 'a null key: refused by its position');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job"}', array['k1', 'k2'], '[{}, [1]]') $$, 'SJ001',
                 'sqljobs.invalid_argument: spec 2: payload must be a JSON object',
                 'a payload that is not an object');
set local jobs.max_payload_bytes = 20;
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job"}', array['k1', 'k2'],
                                              '[{}, {"big": "0123456789012345678901234567890"}]') $$, 'SJ002',
                 null, 'a payload over the limit');
reset jobs.max_payload_bytes;
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job"}', array['k1', 'k2'],
                                              ('[{}, ' || repeat('{"a": ', 100) || '1' || repeat('}', 100)
                                               || ']')::jsonb) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec 2: payload must be nested less than 100 levels deep',
                 'a payload nested 100 deep');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job", "on_conflict": "error"}', array['zz', 'a']) $$,
                 'SJ003', null, 'on_conflict error: a key that has a job is refused');
-- A spec enqueue_many would refuse in every copy is refused before it is copied once per
-- key (a 45 kB spec nested 5,000 deep times 10,000 keys took a backend's memory until
-- the OOM killer stopped the server; the SQL fuzz test found it): the same refusals.
select throws_ok($$ select jobs.enqueue_batch(('{"a":' || repeat('{"a":', 4999) || '1'
                                               || repeat('}', 5000))::jsonb,
                                              array_fill('q'::text, array[1000])) $$, 'SJ001',
                 'sqljobs.invalid_argument: spec 1: unknown field ''a''',
                 'a deep unknown field, a thousand keys: spec 1''s problem');
select throws_ok($$ select jobs.enqueue_batch(('{"name": "eb.job", "actor": ' || repeat('{"a":', 5000)
                                               || '1' || repeat('}', 5000) || '}')::jsonb,
                                              array_fill('q'::text, array[1000])) $$, 'SJ023',
                 'sqljobs.invalid_actor: spec 1: an actor must be at most 512 bytes as JSON, this one is 35001',
                 'a deep actor, a thousand keys: spec 1''s actor');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job", "actor": ""}', array['k1', '']) $$,
                 'SJ001', 'sqljobs.invalid_argument: spec 2: key is required (the idempotency key)',
                 'a bad actor and a bad key: the key first, as enqueue_many checks them');
select throws_ok($$ select jobs.enqueue_batch('{"name": "eb.job", "actor": ""}', array['k1', 'k2']) $$,
                 'SJ023', 'sqljobs.invalid_actor: spec 1: an actor must not be empty',
                 'a bad actor: spec 1''s, as enqueue_many names it');
select is(jobs_test.jobs(), (select n from before), 'no refused call wrote a job');

-- ---------------------------------------------------------------- debounce goes through enqueue_many
select results_eq($$ select outcome from jobs.enqueue_batch('{"name": "eb.deb", "debounce_s": 5}', array['d1', 'd2']) $$,
                  $$ values ('created'), ('debounced') $$,
                  'debounced specs collapse as enqueue_many collapses them');

select * from finish();
rollback;
