-- Job ids carry their bucket (sql/00_schema.sql, jobs.job_id_sql; docs/design/citus.md):
-- id = sequence value << 8 | bucket, the bucket a hash of the tenant ('' counts as
-- none), else of (name, key). Every path that makes an id (enqueue, a batch of specs,
-- a batch of keys under one spec, staging in the outbox) makes it so; a relayed job
-- keeps its staged id; an insert that names no id is refused; the sequence stops with
-- an error before a shifted value would wrap; the id helpers are no role's to call.
begin;
select plan(20);

set local jobs.notify = off;
create function pg_temp.bucket_of(p_name text, p_tenant text, p_key text) returns bigint
language sql immutable as $$
  select (hashtext(coalesce(nullif(p_tenant, ''), p_name || '|' || p_key)) & 255)::bigint
$$;

select is((select id & 255 from jobs.enqueue('ids.job', 'k1', '{}', '{"tenant": "acme"}')),
          pg_temp.bucket_of('ids.job', 'acme', 'k1'), 'enqueue: a tenant''s job carries its tenant''s bucket');
select is((select id >> 8 from jobs.job where key = 'k1'), test.seq(),
          '... above it, the sequence value it drew');
select is((select id & 255 from jobs.enqueue('ids.other', 'k2', '{}', '{"tenant": "acme"}')),
          (select id & 255 from jobs.job where key = 'k1'),
          'every job of a tenant has one bucket, whatever its name and key');
select is((select id & 255 from jobs.enqueue('ids.job', 'k3')),
          pg_temp.bucket_of('ids.job', null, 'k3'), 'a job without a tenant: the bucket of its name and key');
select is((select id & 255 from jobs.enqueue('ids.job', 'k4', '{}', '{"tenant": ""}')),
          pg_temp.bucket_of('ids.job', null, 'k4'),
          'tenant '''' is no tenant (one dedupe namespace, one bucket)');
select ok((select id from jobs.job where key = 'k4') > (select id from jobs.job where key = 'k3'),
          'ids grow with the sequence');

select is((select array_agg(m.id & 255 order by m.ord) from jobs.enqueue_many(
             '[{"name": "ids.many", "key": "m1", "tenant": "t1"},
               {"name": "ids.many", "key": "m2"},
               {"name": "ids.many", "key": "m3", "tenant": "t2"}]') m),
          array[pg_temp.bucket_of('ids.many', 't1', 'm1'), pg_temp.bucket_of('ids.many', null, 'm2'),
                pg_temp.bucket_of('ids.many', 't2', 'm3')],
          'enqueue_many: each job its own bucket');
select is((select array_agg(b.id & 255 order by b.ord)
             from jobs.enqueue_batch('{"name": "ids.batch"}', array['b2', 'b1', 'b3']) b),
          array[pg_temp.bucket_of('ids.batch', null, 'b2'), pg_temp.bucket_of('ids.batch', null, 'b1'),
                pg_temp.bucket_of('ids.batch', null, 'b3')],
          'enqueue_batch: each key its own bucket (in the answer''s order)');
select is((select array_agg(b.id & 255 order by b.ord)
             from jobs.enqueue_batch('{"name": "ids.batch", "tenant": "t3"}', array['c1', 'c2']) b),
          array[pg_temp.bucket_of('ids.batch', 't3', 'c1'), pg_temp.bucket_of('ids.batch', 't3', 'c2')],
          'enqueue_batch under a tenant: the tenant''s bucket');

select is((select id & 255 from jobs.stage('ids.staged', 's1', '{}', '{"tenant": "t4"}')),
          pg_temp.bucket_of('ids.staged', 't4', 's1'), 'stage: the staged row''s id carries the bucket');
do $$ begin
  perform jobs.relay(10, 'relay-ids', 30);  -- claims
  perform jobs.relay(0, 'relay-ids', 30);   -- publishes
end $$;
select is((select id from jobs.job where key = 's1'), (select id from jobs.outbox where key = 's1'),
          'the relayed job keeps its staged id');

select throws_ok($$ insert into jobs.job (name, key, run_at) values ('ids.raw', 'r1', now()) $$,
                 '23502', null, 'an insert that names no id is refused (no id without a bucket)');


-- the least role that enqueues gets the same ids; the helpers are nobody's
set local role sqljobs_producer;
select is((select id & 255 from jobs.enqueue('ids.job', 'p1', '{}', '{"tenant": "acme"}')),
          pg_temp.bucket_of('ids.job', 'acme', 'p1'), 'a producer''s enqueue: the same bucket');
select is((select id & 255 from jobs.stage('ids.staged', 'p2')),
          pg_temp.bucket_of('ids.staged', null, 'p2'), 'a producer''s stage: the same bucket');
select throws_ok($$ select jobs.new_job_id('ids.job', null, 'x') $$, '42501', null,
                 'a producer may not draw ids (jobs.new_job_id)');
select throws_ok($$ select jobs.job_id_sql('a', 'b', 'c') $$, '42501', null,
                 '... nor call jobs.job_id_sql');
reset role;
set local role sqljobs_worker;
select throws_ok($$ select jobs.new_job_id('ids.job', null, 'x') $$, '42501', null,
                 'nor may a worker');
reset role;

-- the last id the sequence may give, then an error (never a negative id). (setval is
-- not undone by the rollback: the sequence is put back where it was below.)
do $$ begin perform pg_catalog.set_config('t.seq', test.seq()::text, true); end $$;
select lives_ok($$ select setval('jobs.job_id_seq', 36028797018963966) $$, 'setup: the sequence near its end');
select is((select id from jobs.enqueue('ids.job', 'last')) >> 8, 36028797018963967::bigint,
          'the last sequence value makes the largest id');
select throws_ok($$ select jobs.enqueue('ids.job', 'past') $$, '2200H', null,
                 'past it, an enqueue fails (sequence exhausted) instead of wrapping');
do $$ begin perform setval('jobs.job_id_seq', current_setting('t.seq')::bigint); end $$;

select * from finish();
rollback;
