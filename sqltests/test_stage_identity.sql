-- A staged row's id IS the id of the job it becomes; its spec is published as given
-- (delay_s counts from staging); an ordering key serialises stagers: its lock row in
-- jobs.lock_key ('outbox|<tenant>|<key>', jobs.lock_keys), held to commit; version 2
-- takes no advisory lock (pg_locks would show it to everyone).
begin;
select plan(9);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temporary table staged as
  select id from jobs.stage('si.job', 'a', '{"n": 1}',
    '{"queue": "si_q", "priority": 3, "max_attempts": 4, "delay_s": 60, "tenant": "t",
      "ordering_key": "acct-1", "traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"}');
select is((select run_at from jobs.outbox o, jsonb_to_record(o.spec) as s(run_at timestamptz)),
          '2030-01-01 00:01:00+00'::timestamptz, 'delay_s becomes run_at at stage time');
select is((select ordering_key from jobs.outbox), 'acct-1', 'the ordering key is stored apart');

set local jobs.fake_now = '2030-01-01 00:00:30+00';
select is((select held from jobs.relay(10, 'r1', 30)), 1, 'a relay claims the row');
select is((select published from jobs.relay(10, 'r1', 30)), 1, 'its next call publishes it');
select results_eq(
  $$ select id, name, queue, tenant, key, payload, priority, max_attempts, run_at, state,
            traceparent, created_at from jobs.job $$,
  $$ select s.id, 'si.job', 'si_q', 't', 'a', '{"n": 1}'::jsonb, 3::smallint, 4,
            '2030-01-01 00:01:00+00'::timestamptz, 'ready'::jobs.job_state,
            '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
            '2030-01-01 00:00:30+00'::timestamptz from staged s $$,
  'the job carries the staged id and spec; created when published');
select results_eq($$ select job_id, outcome, published_at from jobs.outbox $$,
                  $$ select s.id, 'created'::text, '2030-01-01 00:00:30+00'::timestamptz from staged s $$,
                  'the row records its job and outcome');
select is((select array_agg(k.key order by k.key) from jobs.lock_key k), array['outbox|t|acct-1'],
          'staging with an ordering key made its (tenant, key) lock row');
-- the row was made in this transaction, so no other one can have locked it: a set xmax
-- is this transaction's row lock, held to commit
select ok((select k.xmax::text <> '0' from jobs.lock_key k where k.key = 'outbox|t|acct-1'),
          'and holds it locked to commit');
select ok(not exists (select 1 from pg_catalog.pg_locks
                       where locktype = 'advisory' and pid = pg_catalog.pg_backend_pid()),
          'no advisory lock is taken');

select * from finish();
rollback;
