-- jobs.enqueue_many / jobs.enqueue: every invalid spec is refused with invalid_argument
-- (SJ001) before the first write.
begin;
select plan(52);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
-- The sequence behind job ids is not transactional: a refused call that reached its
-- INSERT would have moved it even though the error rolled the rows back.
create function jobs_test.seq() returns bigint language sql as $$
  select s.last_value from jobs.job_id_seq s
$$;
-- Refused: a batch of one valid spec followed by the given invalid one.
create function jobs_test.refused(p_bad jsonb) returns text language sql as $$
  select pg_catalog.format('select * from jobs.enqueue_many(%L::jsonb)',
    pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('name', 'v.ok', 'key', 'fine'), p_bad))
$$;
create function jobs_test.bad(p_fields jsonb) returns text language sql as $$
  select jobs_test.refused('{"name": "v.bad", "key": "k"}'::jsonb || p_fields)
$$;

select lives_ok($$ select jobs.enqueue('v.warmup', 'w') $$, 'setup: draw an id');
create temp table seq0 as select jobs_test.seq() as v;

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

select is(jobs_test.seq(), (select v from seq0), 'no refused batch drew an id');
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
select is(jobs_test.seq(), (select v from seq0), 'no refused enqueue drew an id');

select * from finish();
rollback;
