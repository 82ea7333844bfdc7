-- jobs.enqueue: created vs deduped in the idempotency namespace
-- (name, coalesce(tenant, ''), key); on_conflict = 'error' raises duplicate_job (SJ003).
begin;
select plan(27);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.jid: sqltests/_helpers.sql)

-- ---------------------------------------------------------------- live job
create temp table r1 as
  select * from jobs.enqueue('dedup.a', 'k1', '{"n": 1}', '{"queue": "q_dedup", "priority": 3}');
select is((select outcome from r1), 'created', 'the first enqueue of a key is created');
select is((select id from r1), test.jid('dedup.a', 'k1'), 'it answers the id of the new row');

create temp table r2 as
  select * from jobs.enqueue('dedup.a', 'k1', '{"n": 2}', '{"queue": "q_other", "priority": 9}');
select is((select outcome from r2), 'deduped', 'a second enqueue of a live key is deduped');
select is((select id from r2), (select id from r1), 'deduped answers the existing id');
select is((select count(*)::int from jobs.job where name = 'dedup.a'), 1, 'no second row is written');
select is((select payload from jobs.job where id = (select id from r1)), '{"n": 1}'::jsonb,
          'the existing job keeps its payload');
select is((select queue || '/' || priority from jobs.job where id = (select id from r1)), 'q_dedup/3',
          'the existing job keeps its queue and priority');

select results_eq(
  $$ select outcome from jobs.enqueue('dedup.a', 'k1', '{}', '{"on_conflict": "return"}') $$,
  $$ values ('deduped') $$,
  'on_conflict = return is the default behaviour: deduped');

-- ---------------------------------------------------------------- finished jobs
-- succeeded through the API: claim and ack
create temp table c1 as select * from jobs.claim('{q_dedup}', 'w', 1, 30);
select lives_ok($$ select jobs.ack((select id from c1), (select claim from c1), '"done"') $$,
                'setup: the job succeeds');
select results_eq(
  $$ select id, outcome from jobs.enqueue('dedup.a', 'k1', '{"n": 3}') $$,
  $$ select id, 'deduped' from r1 $$,
  'a key whose job succeeded is deduped to that job');
select is((select state from jobs.job where id = (select id from r1)), 'succeeded'::jobs.job_state,
          'the finished job is not revived');

create temp table r3 as select * from jobs.enqueue('dedup.c', 'kc', '{}', '{"queue": "q_dedup_c"}');
select lives_ok($$ select jobs.cancel((select id from r3)) $$, 'setup: a job is cancelled');
select results_eq(
  $$ select id, outcome from jobs.enqueue('dedup.c', 'kc') $$,
  $$ select id, 'deduped' from r3 $$,
  'a key whose job was cancelled is deduped to that job');

-- ---------------------------------------------------------------- namespace
create temp table t_null as select * from jobs.enqueue('dedup.t', 'kt', '{}', '{"tenant": null}');
select is((select outcome from t_null), 'created', 'tenant null: created');
select results_eq(
  $$ select id, outcome from jobs.enqueue('dedup.t', 'kt', '{}', '{"tenant": ""}') $$,
  $$ select id, 'deduped' from t_null $$,
  'tenant '''' shares the namespace of tenant null: deduped to the same job');
create temp table t_acme as select * from jobs.enqueue('dedup.t', 'kt', '{}', '{"tenant": "acme"}');
select is((select outcome from t_acme), 'created', 'the same name and key under a tenant: a new job');
select isnt((select id from t_acme), (select id from t_null), 'with its own id');
select results_eq(
  $$ select id, outcome from jobs.enqueue('dedup.t', 'kt', '{}', '{"tenant": "acme"}') $$,
  $$ select id, 'deduped' from t_acme $$,
  'the same tenant again is deduped');
select is((select outcome from jobs.enqueue('dedup.t', 'kt', '{}', '{"tenant": "globex"}')), 'created',
          'another tenant is another job');
create temp table n2 as select * from jobs.enqueue('dedup.t2', 'kt');
select is((select outcome from n2), 'created', 'the same key under another name: a new job');
select isnt((select id from n2), (select id from t_null), 'with its own id');
select is((select count(*)::int from jobs.job where key = 'kt'), 4,
          'four jobs share the key kt in four namespaces');

-- ---------------------------------------------------------------- on_conflict = 'error'
select throws_ok(
  $$ select * from jobs.enqueue('dedup.t', 'kt', '{}', '{"on_conflict": "error"}') $$,
  'SJ003', null, 'on_conflict = error on an existing live key raises duplicate_job');
select throws_ok(
  $$ select * from jobs.enqueue('dedup.a', 'k1', '{"n": 4}', '{"on_conflict": "error"}') $$,
  'SJ003', null, 'on_conflict = error on a key whose job succeeded raises duplicate_job');
select is((select payload from jobs.job where id = (select id from r1)), '{"n": 1}'::jsonb,
          'the refused enqueue changed nothing');
select is((select count(*)::int from jobs.job where name = 'dedup.a'), 1, 'and wrote no row');
select is((select outcome from jobs.enqueue('dedup.a', 'k-new', '{}', '{"on_conflict": "error"}')),
          'created', 'on_conflict = error with a new key creates the job');

select * from finish();
rollback;
