-- jobs.enqueue / enqueue_many: a payload larger than jobs.max_payload_bytes (bytes of
-- its jsonb text) is refused with payload_too_large (SJ002) before the first write.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.max_payload_bytes = 100;
create schema jobs_test;
create function jobs_test.seq() returns bigint language sql as $$
  select s.last_value from jobs.job_id_seq s
$$;
-- a payload whose jsonb text is exactly p_bytes bytes: {"s": "xxx..."}
create function jobs_test.payload(p_bytes integer) returns jsonb language sql as $$
  select pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', p_bytes - 9))
$$;

select is(jobs.max_payload_bytes(), 100, 'the limit follows the setting jobs.max_payload_bytes');
select is(pg_catalog.octet_length(jobs_test.payload(100)::text), 100, 'setup: a payload of 100 bytes');

select lives_ok($$ select * from jobs.enqueue('pl.job', 'at-limit', jobs_test.payload(100)) $$,
                'a payload of exactly the limit is accepted');
create temp table seq0 as select jobs_test.seq() as v;
select throws_ok($$ select * from jobs.enqueue('pl.job', 'over', jobs_test.payload(101)) $$,
                 'SJ002', null, 'a payload one byte over the limit is refused with payload_too_large');
select throws_ok(
  $$ select * from jobs.enqueue_many(pg_catalog.jsonb_build_array(
       pg_catalog.jsonb_build_object('name', 'pl.job', 'key', 'small', 'payload', jobs_test.payload(20)),
       pg_catalog.jsonb_build_object('name', 'pl.job', 'key', 'big', 'payload', jobs_test.payload(500)))) $$,
  'SJ002', null, 'one large payload refuses the whole batch');
select is(jobs_test.seq(), (select v from seq0), 'the refusals came before the insert (no id drawn)');
select is((select pg_catalog.array_agg(key order by key) from jobs.job where name = 'pl.job'),
          array['at-limit'], 'only the accepted job was written');

-- a byte is a byte: 'é' is two bytes in UTF-8
select throws_ok(
  $$ select * from jobs.enqueue('pl.job', 'utf8', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('é', 50))) $$,
  'SJ002', null, 'the limit counts bytes, not characters');

set local jobs.max_payload_bytes = '';
select is(jobs.max_payload_bytes(), 1048576, 'unset, the limit is 1 MiB');

select * from finish();
rollback;
