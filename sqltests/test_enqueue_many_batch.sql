-- jobs.enqueue_many: one (ord, id, outcome) per spec in input order; keys repeated in
-- the batch (first created, rest deduped); a refusal anywhere writes nothing.
begin;
select plan(30);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.jid, test.seq: sqltests/_helpers.sql). The sequence behind job ids is not
-- transactional: a refused call that reached its INSERT would have moved it even though
-- the error rolled the rows back.

-- ---------------------------------------------------------------- input order
-- keys out of sort order, so the (name, tenant, key)-ordered insert differs from input
create temp table b1 as
  select pg_catalog.row_number() over () as pos, r.*
    from jobs.enqueue_many('[{"name": "batch.job", "key": "c"},
                             {"name": "batch.job", "key": "a", "queue": "q_batch_2"},
                             {"name": "batch.job", "key": "b"}]') r;
select results_eq($$ select pos::int, ord from b1 order by pos $$,
                  $$ values (1, 1), (2, 2), (3, 3) $$,
                  'one answer per spec, returned in input order');
select results_eq($$ select ord, id, outcome from b1 order by ord $$,
                  $$ values (1, test.jid('batch.job', 'c'), 'created'), (2, test.jid('batch.job', 'a'), 'created'),
                            (3, test.jid('batch.job', 'b'), 'created') $$,
                  'each ord answers the id of its own spec, created');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select is((select queue from jobs.job where id = (select test.jid('batch.job', 'a'))),
          'q_batch_2',
          'each spec''s own fields are stored');

-- ---------------------------------------------------------------- mixed created / deduped
create temp table b2 as
  select * from jobs.enqueue_many('[{"name": "batch.job", "key": "d"},
                                    {"name": "batch.job", "key": "a"},
                                    {"name": "batch.job", "key": "e"}]');
select results_eq($$ select ord, id, outcome from b2 order by ord $$,
                  $$ values (1, test.jid('batch.job', 'd'), 'created'), (2, test.jid('batch.job', 'a'), 'deduped'),
                            (3, test.jid('batch.job', 'e'), 'created') $$,
                  'an existing key in a batch is deduped, the new ones created');

-- ---------------------------------------------------------------- key repeated in the batch
create temp table b3 as
  select * from jobs.enqueue_many('[{"name": "batch.job", "key": "r", "payload": {"n": 1}},
                                    {"name": "batch.job", "key": "s"},
                                    {"name": "batch.job", "key": "r", "payload": {"n": 3}},
                                    {"name": "batch.job", "key": "r", "payload": {"n": 4}}]');
select results_eq($$ select ord, outcome from b3 order by ord $$,
                  $$ values (1, 'created'), (2, 'created'), (3, 'deduped'), (4, 'deduped') $$,
                  'a key repeated in one batch: the first spec is created, the repeats deduped');
select is((select count(distinct id)::int from b3 where ord in (1, 3, 4)), 1,
          'the repeats answer the same id');
select is((select id from b3 where ord = 1), test.jid('batch.job', 'r'), 'which is the one row with that key');
select is((select payload from jobs.job where id = (select test.jid('batch.job', 'r'))),
          '{"n": 1}'::jsonb,
          'the stored job is the first spec''s');

-- A larger batch that must really be sorted: keys k40..k01 descending, with key 'dup'
-- repeated at ords 5, 17, 23, 38 carrying different payloads.
create temp table b4 as
  select * from jobs.enqueue_many((
    select pg_catalog.jsonb_agg(
             case when g in (5, 17, 23, 38)
                  then pg_catalog.jsonb_build_object('name', 'batch.job', 'key', 'dup',
                                                     'payload', pg_catalog.jsonb_build_object('ord', g))
                  else pg_catalog.jsonb_build_object('name', 'batch.job',
                                                     'key', 'k' || pg_catalog.lpad((41 - g)::text, 2, '0'))
             end order by g)
      from pg_catalog.generate_series(1, 40) g));
select is((select payload from jobs.job where id = (select test.jid('batch.job', 'dup'))),
          '{"ord": 5}'::jsonb,
          'in a sorted batch too, the stored job is the first spec''s');
select results_eq($$ select ord, outcome from b4 where ord in (5, 17, 23, 38) order by ord $$,
                  $$ values (5, 'created'), (17, 'deduped'), (23, 'deduped'), (38, 'deduped') $$,
                  'and the first spec is the one answered created');

-- the null / '' tenant namespace inside one batch
select results_eq(
  $$ select ord, outcome from jobs.enqueue_many('[{"name": "batch.job", "key": "t", "tenant": null},
                                                  {"name": "batch.job", "key": "t", "tenant": ""},
                                                  {"name": "batch.job", "key": "t", "tenant": "x"}]')
      order by ord $$,
  $$ values (1, 'created'), (2, 'deduped'), (3, 'created') $$,
  'in a batch, tenant '''' repeats tenant null; tenant x is another job');

-- ---------------------------------------------------------------- insert order
-- Rows are inserted, and so draw their ids, in (name, tenant, key) byte order: the lock
-- order that makes two batches sharing keys wait for each other instead of deadlocking,
-- the same whatever the database's collation (under en_US, 'B' would sort after 'a').
select results_eq(
  $$ select key from jobs.job where id in (select id from b4) order by id $$,
  $$ select key from jobs.job where id in (select id from b4) order by key collate "C" $$,
  'a batch of one name and tenant is inserted in key order');
create temp table b9 as
  select * from jobs.enqueue_many('[{"name": "batch.ord.b", "key": "k2"},
                                    {"name": "batch.ord.a", "key": "k3", "tenant": "t"},
                                    {"name": "batch.ord.a", "key": "k1"},
                                    {"name": "batch.ord.b", "key": "k1", "tenant": "u"},
                                    {"name": "batch.ord.a", "key": "a", "tenant": "t"},
                                    {"name": "batch.ord.a", "key": "B", "tenant": "t"},
                                    {"name": "batch.ord.a", "key": "k2", "tenant": "t"},
                                    {"name": "batch.ord.a", "key": "k0", "tenant": ""}]');
select results_eq(
  $$ select j.name, coalesce(j.tenant, ''), j.key from jobs.job j where j.id in (select id from b9) order by j.id $$,
  $$ select j.name, coalesce(j.tenant, ''), j.key from jobs.job j where j.id in (select id from b9)
      order by j.name collate "C", coalesce(j.tenant, '') collate "C", j.key collate "C" $$,
  'a batch of several names and tenants is inserted in (name, tenant, key) order');

-- ---------------------------------------------------------------- one spec
select results_eq(
  $$ select ord, id, outcome from jobs.enqueue_many('[{"name": "batch.job", "key": "a"}]') $$,
  $$ values (1, test.jid('batch.job', 'a'), 'deduped') $$,
  'a one-spec batch of an existing key answers that job, deduped');
select throws_ok(
  $$ select * from jobs.enqueue_many('[{"name": "batch.job", "key": "a", "on_conflict": "error"}]') $$,
  'SJ003', 'sqljobs.duplicate_job: spec 1: job ' || test.jid('batch.job', 'a') || ' already exists for key ''a''',
  'a strict one-spec batch of an existing key is refused, naming the job');

-- ---------------------------------------------------------------- empty and large batches
select is((select count(*)::int from jobs.enqueue_many('[]')), 0, 'an empty batch answers nothing');

create temp table big as
  select pg_catalog.row_number() over () as pos, r.*
    from jobs.enqueue_many((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'name', 'batch.big', 'key', 'b' || (1001 - g), 'queue', 'q_batch_big') order by g)
        from pg_catalog.generate_series(1, 1000) g)) r;
select is((select count(*)::int from big where outcome = 'created'), 1000,
          'a batch of 1,000 specs creates 1,000 jobs');
select is((select count(*)::int from big where pos = ord), 1000, 'answered in input order');
select is((select count(*)::int from big b join jobs.job j on j.id = b.id
            where j.key = 'b' || (1001 - b.ord)), 1000, 'each ord answers its own spec''s id');

-- ---------------------------------------------------------------- refusals write nothing
create temp table seq0 as select test.seq() as v;
select throws_ok(
  $$ select * from jobs.enqueue_many('[{"name": "batch.job", "key": "new1"},
                                       {"name": "batch.job", "key": "a", "on_conflict": "error"}]') $$,
  'SJ003', null, 'on_conflict = error meeting an existing key refuses the whole batch');
select is(test.jid('batch.job', 'new1'), null, 'the valid spec of the refused batch was not written');
select is(test.seq(), (select v from seq0), 'the refusal came before the insert (no id drawn)');
select throws_ok(
  $$ select * from jobs.enqueue_many('[{"name": "batch.job", "key": "new2"},
                                       {"name": "batch.job", "key": "new3", "priority": 99999}]') $$,
  'SJ001', null, 'one invalid spec refuses the whole batch');
select is(test.jid('batch.job', 'new2'), null, 'its valid spec was not written');
select is(test.seq(), (select v from seq0), 'no id was drawn');
select throws_ok(
  $$ select * from jobs.enqueue_many('[{"name": "batch.job", "key": "new4"},
                                       {"name": "batch.job", "key": "new4", "on_conflict": "error"}]') $$,
  'SJ003', null, 'on_conflict = error on a key an earlier spec of the same batch takes refuses the batch');
select is(test.jid('batch.job', 'new4'), null, 'and writes nothing');
select is(test.seq(), (select v from seq0), 'no id was drawn');
select is((select count(*)::int from jobs.job where name = 'batch.job'),
          (select count(distinct id)::int from (select id from b1 union all select id from b2
                                                union all select id from b3 union all select id from b4) x) + 2,
          'only the accepted batches wrote rows');
select results_eq(
  $$ select ord, outcome from jobs.enqueue_many('[{"name": "batch.job", "key": "new5", "on_conflict": "error"},
                                                  {"name": "batch.job", "key": "new5"}]') order by ord $$,
  $$ values (1, 'created'), (2, 'deduped') $$,
  'a strict spec that comes first takes its key; a later lenient repeat is deduped');

select * from finish();
rollback;
