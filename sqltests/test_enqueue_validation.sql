-- jobs.enqueue_many / jobs.enqueue: every invalid spec is refused with invalid_argument
-- (SJ001) before the first write.
begin;
select plan(88);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
-- The sequence behind job ids is not transactional: a refused call that reached its
-- INSERT would have moved it even though the error rolled the rows back (test.seq,
-- test.error_of: sqltests/_helpers.sql).
-- Refused: a batch of one valid spec followed by the given invalid one.
create function jobs_test.refused(p_bad jsonb) returns text language sql as $$
  select pg_catalog.format('select * from jobs.enqueue_many(%L::jsonb)',
    pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('name', 'v.ok', 'key', 'fine'), p_bad))
$$;
create function jobs_test.bad(p_fields jsonb) returns text language sql as $$
  select jobs_test.refused('{"name": "v.bad", "key": "k"}'::jsonb || p_fields)
$$;

select lives_ok($$ select jobs.enqueue('v.warmup', 'w') $$, 'setup: draw an id');
create temp table seq0 as select test.seq() as v;

-- ---------------------------------------------------------------- shape
select throws_ok($$ select * from jobs.enqueue_many('{"name": "v", "key": "k"}') $$, 'SJ001', null,
                 'specs that are an object, not an array, are refused');
select throws_ok($$ select * from jobs.enqueue_many('"specs"') $$, 'SJ001', null,
                 'specs that are a string are refused');
select throws_ok($$ select * from jobs.enqueue_many(null) $$, 'SJ001', null, 'null specs are refused');
select throws_ok(jobs_test.refused('1'), 'SJ001', null, 'a spec that is a number is refused');
select throws_ok(jobs_test.refused('[{"name": "v", "key": "k"}]'), 'SJ001', null,
                 'a spec that is an array is refused');
select throws_ok(jobs_test.refused('null'), 'SJ001', null, 'a spec that is JSON null is refused');
select throws_ok(jobs_test.bad('{"colour": "red"}'), 'SJ001', null, 'an unknown field is refused');
select throws_ok(jobs_test.bad('{"Name": "x"}'), 'SJ001', null, 'field names are case-sensitive');

-- ---------------------------------------------------------------- required
select throws_ok(jobs_test.refused('{"key": "k"}'), 'SJ001', null, 'a missing name is refused');
select throws_ok(jobs_test.bad('{"name": ""}'), 'SJ001', null, 'an empty name is refused');
select throws_ok(jobs_test.bad('{"name": null}'), 'SJ001', null, 'a null name is refused');
select throws_ok(jobs_test.refused('{"name": "v"}'), 'SJ001', null,
                 'a missing key is refused (the idempotency key is required)');
select throws_ok(jobs_test.bad('{"key": ""}'), 'SJ001', null, 'an empty key is refused');
select throws_ok(jobs_test.bad('{"key": null}'), 'SJ001', null, 'a null key is refused');
select throws_ok(jobs_test.bad('{"queue": ""}'), 'SJ001', null, 'an empty queue is refused');

-- ---------------------------------------------------------------- wrong types
select throws_ok(jobs_test.bad('{"priority": "high"}'), 'SJ001', null, 'priority as a word is refused');
select throws_ok(jobs_test.bad('{"priority": 1.5}'), 'SJ001', null, 'a fractional priority is refused');
select throws_ok(jobs_test.bad('{"max_attempts": "many"}'), 'SJ001', null,
                 'max_attempts as a word is refused');
select throws_ok(jobs_test.bad('{"run_at": "soon"}'), 'SJ001', null, 'an unparsable run_at is refused');
select throws_ok(jobs_test.bad('{"delay_s": "later"}'), 'SJ001', null, 'delay_s as a word is refused');
select throws_ok(jobs_test.bad('{"timeout_s": [1]}'), 'SJ001', null, 'timeout_s as an array is refused');
select throws_ok(jobs_test.bad('{"dead_letter": "maybe"}'), 'SJ001', null,
                 'dead_letter that is not a boolean is refused');
select throws_ok(jobs_test.bad('{"name": {"type": "x"}}'), 'SJ001', null, 'a name that is an object is refused');
select throws_ok(jobs_test.bad('{"key": ["a", "b"]}'), 'SJ001', null, 'a key that is an array is refused');
select throws_ok(jobs_test.bad('{"queue": 7}'), 'SJ001', null, 'a queue that is a number is refused');
select throws_ok(jobs_test.bad('{"tenant": true}'), 'SJ001', null, 'a tenant that is a boolean is refused');

-- ---------------------------------------------------------------- ranges
select throws_ok(jobs_test.bad('{"priority": 32768}'), 'SJ001', null, 'priority above 32767 is refused');
select throws_ok(jobs_test.bad('{"priority": -32769}'), 'SJ001', null, 'priority below -32768 is refused');
select throws_ok(jobs_test.bad('{"max_attempts": 0}'), 'SJ001', null, 'max_attempts 0 is refused');
select throws_ok(jobs_test.bad('{"max_attempts": -3}'), 'SJ001', null, 'negative max_attempts is refused');
select throws_ok(jobs_test.bad('{"retry_base_s": 0}'), 'SJ001', null, 'retry_base_s 0 is refused');
select throws_ok(jobs_test.bad('{"retry_base_s": 10, "retry_cap_s": 5}'), 'SJ001', null,
                 'retry_cap_s below retry_base_s is refused');
select throws_ok(jobs_test.bad('{"retry_jitter": "linear"}'), 'SJ001', null,
                 'a jitter mode other than none | full | equal is refused');
select throws_ok(jobs_test.bad('{"timeout_s": 0}'), 'SJ001', null, 'timeout_s 0 is refused');
select throws_ok(jobs_test.bad('{"timeout_s": -1}'), 'SJ001', null, 'a negative timeout_s is refused');
select throws_ok(jobs_test.bad('{"delay_s": -0.5}'), 'SJ001', null, 'a negative delay_s is refused');
select throws_ok(jobs_test.bad('{"delay_s": 5, "run_at": "2030-01-02T00:00:00Z"}'), 'SJ001', null,
                 'run_at and delay_s together are refused');
select throws_ok(jobs_test.bad('{"on_conflict": "ignore"}'), 'SJ001', null,
                 'on_conflict other than return | error is refused');
-- JSON has no NaN or Infinity, but a string casts to one
select throws_ok(jobs_test.bad('{"delay_s": "NaN"}'), 'SJ001', null, 'delay_s NaN is refused');
select throws_ok(jobs_test.bad('{"delay_s": "Infinity"}'), 'SJ001', null, 'an infinite delay_s is refused');
select throws_ok(jobs_test.bad('{"retry_base_s": "NaN", "retry_cap_s": "NaN"}'), 'SJ001', null,
                 'a NaN backoff (which no retry could compute) is refused');
select throws_ok(jobs_test.bad('{"timeout_s": "NaN"}'), 'SJ001', null, 'timeout_s NaN is refused');

-- ---------------------------------------------------------------- bounds (docs/reference/sql.md, "Limits")
select throws_ok(jobs_test.bad(jsonb_build_object('name', repeat('n', 201))), 'SJ001', null,
                 'a name over 200 bytes is refused');
select throws_ok(jobs_test.bad(jsonb_build_object('name', repeat('é', 101))), 'SJ001', null,
                 'the bound counts bytes: 101 two-byte characters are over 200');
select throws_ok(jobs_test.bad(jsonb_build_object('key', repeat('k', 1001))), 'SJ001', null,
                 'a key over 1000 bytes is refused');
select throws_ok(jobs_test.bad(jsonb_build_object('queue', repeat('q', 201))), 'SJ001', null,
                 'a queue over 200 bytes is refused');
select throws_ok(jobs_test.bad(jsonb_build_object('tenant', repeat('t', 201))), 'SJ001', null,
                 'a tenant over 200 bytes is refused');
select throws_ok(jobs_test.bad(jsonb_build_object('group_key', repeat('g', 1001), 'singleton', true)), 'SJ001', null,
                 'a group_key over 1000 bytes is refused');
select throws_ok(jobs_test.bad(jsonb_build_object('traceparent', repeat('0', 257))), 'SJ001', null,
                 'a traceparent over 256 bytes is refused');
select throws_ok(jobs_test.bad(jsonb_build_object('payload', (repeat('{"a": ', 100) || '1' || repeat('}', 100))::jsonb)),
                 'SJ001', null, 'a payload nested 100 levels deep is refused');
select throws_ok(jobs_test.bad('{"run_at": "infinity"}'), 'SJ001', null, 'run_at infinity is refused');
select throws_ok(jobs_test.bad('{"run_at": "-infinity"}'), 'SJ001', null, 'run_at -infinity is refused');
select throws_ok(jobs_test.bad('{"run_at": "1969-12-31T23:59:59Z"}'), 'SJ001', null, 'a run_at before 1970 is refused');
select throws_ok(jobs_test.bad('{"run_at": "2200-01-01T00:00:01Z"}'), 'SJ001', null, 'a run_at after 2200 is refused');
select throws_ok(jobs_test.bad('{"delay_s": 3.3e9}'), 'SJ001', null, 'a delay_s over 3.2e9 s is refused');
select throws_ok(jobs_test.bad('{"timeout_s": 1.1e9}'), 'SJ001', null, 'a timeout_s over 1e9 s is refused');
select throws_ok(jobs_test.bad('{"retry_base_s": 1e308, "retry_cap_s": 1e308}'), 'SJ001', null,
                 'a retry_base_s over 1e9 s is refused');
select throws_ok(jobs_test.bad('{"retry_cap_s": 1.1e9}'), 'SJ001', null, 'a retry_cap_s over 1e9 s is refused');
select throws_ok(jobs_test.bad('{"debounce_s": 1.1e9, "singleton": true, "group_key": "g"}'), 'SJ001', null,
                 'a debounce_s over 1e9 s is refused');
select throws_ok(jobs_test.bad('{"throttle_n": 1, "throttle_per_s": 1.1e9, "group_key": "g"}'), 'SJ001', null,
                 'a throttle_per_s over 1e9 s is refused');
select is(jobs.spec_problem(jsonb_build_array(jsonb_build_object(
            'name', repeat('n', 200), 'key', repeat('k', 1000), 'queue', repeat('q', 200),
            'tenant', repeat('t', 200), 'traceparent', repeat('0', 256),
            'payload', (repeat('{"a": ', 99) || '1' || repeat('}', 99))::jsonb,
            'run_at', '2199-12-31T23:59:59Z', 'timeout_s', 1e9, 'retry_base_s', 1e9, 'retry_cap_s', 1e9))),
          null, 'every bound is inclusive: values at it are accepted');

select is(test.seq(), (select v from seq0), 'no refused batch drew an id');
select is((select count(*)::int from jobs.job where name in ('v.ok', 'v.bad')), 0,
          'no refused batch wrote a row');

-- ---------------------------------------------------------------- jobs.enqueue
select throws_ok($$ select * from jobs.enqueue(null, 'k') $$, 'SJ001', null, 'enqueue: a null name is refused');
select throws_ok($$ select * from jobs.enqueue('v.bad', null) $$, 'SJ001', null, 'enqueue: a null key is refused');
select throws_ok($$ select * from jobs.enqueue('v.bad', '') $$, 'SJ001', null, 'enqueue: an empty key is refused');
select throws_ok($$ select * from jobs.enqueue('v.bad', 'k', '{}', '[]') $$, 'SJ001', null,
                 'enqueue: options that are not an object are refused');
select throws_ok($$ select * from jobs.enqueue('v.bad', 'k', '{}', null) $$, 'SJ001', null,
                 'enqueue: null options are refused');
select throws_ok($$ select * from jobs.enqueue('v.bad', 'k', '{}', '{"key": "other"}') $$, 'SJ001', null,
                 'enqueue: options carrying key are refused');
select is(test.seq(), (select v from seq0), 'no refused enqueue drew an id');

-- ---------------------------------------------------------------- messages
select is(jobs.spec_problem('[{"name": "v", "key": "k", "zeta": 1, "alpha": 2}]'),
          'spec 1: unknown field ''zeta''', 'the unknown field named is the first in jsonb key order');
select is(jobs.spec_problem('[{"name": "v", "key": 5, "queue": 7}]'),
          'spec 1: ''key'' must be a string', 'so is the text field that is not a string');
select is(jobs.spec_problem('[{"name": "v", "key": "k", "max_attempts": 0}, {"name": "v", "key": "k2", "priority": "x"}]'),
          'spec 1: max_attempts must be at least 1',
          'the first spec with a problem is reported: a value problem before a later spec''s bad type');
select is(jobs.spec_problem('[{"name": "v", "key": "k", "priority": "x"}, {"name": "v", "key": "k2", "colour": 1}]'),
          'spec 1: ''priority'' must be a whole number between -32768 and 32767',
          'a bad type before a later spec''s unknown field');
select is(jobs.spec_problem('[{"name": "v", "key": "k", "colour": 1, "priority": "x"}]'),
          'spec 1: unknown field ''colour''', 'within a spec, an unknown field before a bad type');
select is(jobs.spec_problem('[{"name": "v", "key": "k", "priority": 99999}]'),
          'spec 1: ''priority'' must be a whole number between -32768 and 32767',
          'a range the column''s type sets is its JSON type''s rule');
select is(jobs.spec_problem('[{"name": "v", "key": "k", "run_at": "2030-01-02 03:04:05+02"}, {"name": "v", "key": "k2", "run_at": "2030-01-02T03:04:05Z"}]'),
          null, 'times read as timestamptz reads them');
-- every spec the refusal tests above use, alone and second in a batch: the same message
create temp table bad_specs as
  select '{"name": "v.bad", "key": "k"}'::jsonb || f.v as spec
    from (values ('{"colour": "red"}'::jsonb), ('{"Name": "x"}'), ('{"name": ""}'), ('{"name": null}'),
                 ('{"key": ""}'), ('{"key": null}'), ('{"queue": ""}'), ('{"priority": "high"}'),
                 ('{"priority": 1.5}'), ('{"max_attempts": "many"}'), ('{"run_at": "soon"}'),
                 ('{"delay_s": "later"}'), ('{"timeout_s": [1]}'), ('{"dead_letter": "maybe"}'),
                 ('{"name": {"type": "x"}}'), ('{"key": ["a", "b"]}'), ('{"queue": 7}'), ('{"tenant": true}'),
                 ('{"priority": 32768}'), ('{"max_attempts": 0}'), ('{"retry_base_s": 0}'),
                 ('{"retry_base_s": 10, "retry_cap_s": 5}'), ('{"retry_jitter": "linear"}'),
                 ('{"timeout_s": 0}'), ('{"delay_s": -0.5}'), ('{"delay_s": 5, "run_at": "2030-01-02T00:00:00Z"}'),
                 ('{"on_conflict": "ignore"}'), ('{"delay_s": "NaN"}'), ('{"retry_base_s": "NaN", "retry_cap_s": "NaN"}'),
                 ('{"traceparent": 1, "colour": 2}')) f(v)
  union all select s.v from (values ('1'::jsonb), ('null'), ('[]'), ('{"key": "k"}'), ('{"name": "v"}')) s(v);
select is((select count(*)::int from bad_specs where jobs.spec_problem(pg_catalog.jsonb_build_array(spec)) is null), 0,
          'setup: every spec of bad_specs is refused alone');
select is_empty(
  $$ select b.spec from bad_specs b
      where jobs.spec_problem(pg_catalog.jsonb_build_array(b.spec))
            is distinct from pg_catalog.replace(
              jobs.spec_problem(pg_catalog.jsonb_build_array('{"name": "v.ok", "key": "ok"}'::jsonb, b.spec)),
              'spec 2: ', 'spec 1: ') $$,
  'a spec alone and the same spec second in a batch are refused with the same message');

-- jobs.enqueue without options builds its row from its arguments: it refuses, answers and
-- stores exactly as enqueue_many given the spec one_spec would make
set local jobs.max_payload_bytes = 12;
create temp table lean as
  select n.v as name, k.v as key, p.v as payload
    from (values (null::text), (''), ('v.lean')) n(v),
         (values (null::text), (''), ('k')) k(v),
         (values (null::jsonb), ('{}'), ('null'), ('"a string of 16"'), ('"ten chars!"'), ('[1, 2, 3]'),
                 ('{"a": "b", "c": 1}')) p(v);
select is_empty(
  $$ select l.* from lean l
      where test.error_of(pg_catalog.format('select * from jobs.enqueue(%L, %L, %L)', l.name, l.key, l.payload))
            is distinct from
            test.error_of(pg_catalog.format('select * from jobs.enqueue_many(%L)',
              jobs.one_spec(l.name, l.key, l.payload, '{}'))) $$,
  'enqueue and enqueue_many refuse each (name, key, payload) alike: the same code and message');
select is(test.error_of($$ select * from jobs.enqueue(null, null, '"a string of 16"') $$),
          'SJ001 sqljobs.invalid_argument: spec 1: name is required',
          'a name problem is reported before a key or payload problem');
select is(test.error_of($$ select * from jobs.enqueue('v.lean', 'k', '"a string of 16"') $$),
          'SJ001 sqljobs.invalid_argument: spec 1: payload must be a JSON object',
          'a string payload is refused (not an object) before it is measured');
reset jobs.max_payload_bytes;
select lives_ok($$ select * from jobs.enqueue('v.lean', 'row-a', '{"x": [1, 2]}') $$, 'setup: a job through enqueue');
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "v.lean", "key": "row-b", "payload": {"x": [1, 2]}}]') $$,
                'setup: the same job through enqueue_many');
select results_eq(
  $$ select name, queue, tenant, payload, priority, run_at, state, attempt, max_attempts, retry_base_s,
            retry_cap_s, retry_jitter, dead_letter, timeout_s, claim, traceparent, created_at
       from jobs.job where name = 'v.lean' and key = 'row-a' $$,
  $$ select name, queue, tenant, payload, priority, run_at, state, attempt, max_attempts, retry_base_s,
            retry_cap_s, retry_jitter, dead_letter, timeout_s, claim, traceparent, created_at
       from jobs.job where name = 'v.lean' and key = 'row-b' $$,
  'both store the same row');
select results_eq(
  $$ select outcome from jobs.enqueue('v.lean', 'row-b', '{}') $$,
  $$ values ('deduped') $$,
  'enqueue answers a key enqueue_many took as deduped');
create temp table nul as select * from jobs.enqueue('v.lean', 'nul', 'null');
select results_eq(
  $$ select j.id, j.payload from jobs.job j where j.name = 'v.lean' and j.key = 'nul' $$,
  $$ select n.id, '{}'::jsonb from nul n where n.outcome = 'created' $$,
  'a JSON null payload is stored as {}');

select * from finish();
rollback;
