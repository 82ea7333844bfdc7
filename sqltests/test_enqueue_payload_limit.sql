-- jobs.enqueue / enqueue_many: a payload larger than jobs.max_payload_bytes (bytes of
-- its jsonb text) is refused with payload_too_large (SJ002) before the first write.
-- The limit is 1 MiB, or what `alter role/database ... set jobs.max_payload_bytes`
-- configured; a session setting may only LOWER it (sql/10_errors.sql).
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.max_payload_bytes = 100;
create schema jobs_test;
-- (test.seq: sqltests/_helpers.sql)
-- a payload whose jsonb text is exactly p_bytes bytes: {"s": "xxx..."}
create function jobs_test.payload(p_bytes integer) returns jsonb language sql as $$
  select pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', p_bytes - 9))
$$;

select is(jobs.max_payload_bytes(), 100, 'the limit follows a session setting jobs.max_payload_bytes that lowers it');
select is(pg_catalog.octet_length(jobs_test.payload(100)::text), 100, 'setup: a payload of 100 bytes');

select lives_ok($$ select * from jobs.enqueue('pl.job', 'at-limit', jobs_test.payload(100)) $$,
                'a payload of exactly the limit is accepted');
create temp table seq0 as select test.seq() as v;
select throws_ok($$ select * from jobs.enqueue('pl.job', 'over', jobs_test.payload(101)) $$,
                 'SJ002', null, 'a payload one byte over the limit is refused with payload_too_large');
select throws_ok(
  $$ select * from jobs.enqueue_many(pg_catalog.jsonb_build_array(
       pg_catalog.jsonb_build_object('name', 'pl.job', 'key', 'small', 'payload', jobs_test.payload(20)),
       pg_catalog.jsonb_build_object('name', 'pl.job', 'key', 'big', 'payload', jobs_test.payload(500)))) $$,
  'SJ002', null, 'one large payload refuses the whole batch');
select is(test.seq(), (select v from seq0), 'the refusals came before the insert (no id drawn)');
select is((select pg_catalog.array_agg(key order by key) from jobs.job where name = 'pl.job'),
          array['at-limit'], 'only the accepted job was written');

-- a byte is a byte: 'é' is two bytes in UTF-8
select throws_ok(
  $$ select * from jobs.enqueue('pl.job', 'utf8', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('é', 50))) $$,
  'SJ002', null, 'the limit counts bytes, not characters');

set local jobs.max_payload_bytes = '';
select is(jobs.max_payload_bytes(), 1048576, 'unset, the limit is 1 MiB');
set local jobs.max_payload_bytes = 10000000;
select is(jobs.max_payload_bytes(), 1048576,
          'a session setting above 1 MiB does not raise it (a session may only lower the limit)');
select throws_ok($$ select * from jobs.enqueue('pl.job', 'raised', jobs_test.payload(1048577)) $$,
                 'SJ002', null, 'so a payload over 1 MiB is still refused');
set local jobs.max_payload_bytes = 'lots';
select throws_ok($$ select jobs.max_payload_bytes() $$, 'SJ001', null,
                 'a setting that is not a whole number of bytes is refused (invalid_argument)');

select * from finish();
rollback;
