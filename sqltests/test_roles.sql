-- Least-privilege roles (sql/98_roles.sql, docs/design/roles.md): as each of the five
-- NOLOGIN roles, the calls it is given pass, and every other function and every table
-- is refused by PostgreSQL's permission check (42501). Version 2 split the fleet's
-- configuration (leadership, schedules, limits, job types, retention) from the worker
-- into sqljobs_scheduler.
begin;
select plan(68 + 5 * (select pg_catalog.count(*)::int from pg_catalog.pg_class c
                       where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('r', 'S')));

set local jobs.fake_now = '2030-01-01 00:00:00+00';

-- the producer puts a job in and reads its outcome, and nothing else
set local role sqljobs_producer;
select lives_ok($$ select pg_catalog.set_config('roles_test.id',
                    (select e.id from jobs.enqueue('roles.send', 'r-1', '{"n": 1}', '{"queue": "roles"}') e)::text, true) $$,
                'producer: jobs.enqueue');
select lives_ok($$ select jobs.enqueue_many('[{"name": "roles.send", "key": "r-2", "queue": "roles"}]') $$,
                'producer: jobs.enqueue_many');
select lives_ok($$ select jobs.stage('roles.send', 'r-3', '{}', '{"queue": "roles"}') $$, 'producer: jobs.stage');
select lives_ok($$ select jobs.emit_event('roles.ping', '{}') $$, 'producer: jobs.emit_event');
select lives_ok($$ select jobs.schema_version() $$, 'producer: jobs.schema_version');
select lives_ok($$ select jobs.watch_token(pg_catalog.current_setting('roles_test.id')::bigint) $$,
                'producer: jobs.watch_token');
select throws_ok($$ select jobs.wake_tokens(array['roles']) $$, '42501', null, 'producer cannot ask the queues'' wake tokens');
select throws_ok($$ select jobs.claim(array['roles'], 'w', 1) $$, '42501', null, 'producer cannot claim');
select throws_ok($$ select jobs.settle_hold(array[1]::bigint[], array[1]::bigint[]) $$, '42501', null,
                 'producer cannot hold settle keys');
select throws_ok($$ select jobs.cancel(1) $$, '42501', null, 'producer cannot cancel');
select throws_ok($$ select jobs.queue_stats() $$, '42501', null, 'producer cannot read queue_stats');
select throws_ok($$ select jobs.job_payload(1) $$, '42501', null, 'producer cannot read a payload');
select throws_ok($$ select 1 from jobs.job_view $$, '42501', null, 'producer cannot read jobs.job_view');
select throws_ok($$ select jobs.install_roles() $$, '42501', null, 'producer cannot re-run the grants');
select throws_ok($$ select jobs.insert_jobs('[]', null, null) $$, '42501', null, 'producer cannot call an internal helper');

-- the worker claims, settles and steps; it cannot operate
set local role sqljobs_worker;
select lives_ok($$ select pg_catalog.set_config('roles_test.claim',
                    (select c.claim from jobs.claim(array['roles'], 'w-1', 1) c
                      where c.id = pg_catalog.current_setting('roles_test.id')::bigint)::text, true) $$,
                'worker: jobs.claim');
select lives_ok($$ select jobs.step_put(pg_catalog.current_setting('roles_test.id')::bigint,
                                        pg_catalog.current_setting('roles_test.claim')::bigint, 'one', '1') $$,
                'worker: jobs.step_put');
select lives_ok($$ select jobs.settle_hold(array[pg_catalog.current_setting('roles_test.id')::bigint],
                                           array[pg_catalog.current_setting('roles_test.claim')::bigint]) $$,
                'worker: jobs.settle_hold');
select lives_ok($$ select jobs.ack(pg_catalog.current_setting('roles_test.id')::bigint,
                                   pg_catalog.current_setting('roles_test.claim')::bigint, '{"ok": true}') $$,
                'worker: jobs.ack');
select lives_ok($$ select jobs.worker_heartbeat('w-1', array['roles'], array['roles.send'], 1, 30, 'h', 1, '{}') $$,
                'worker: jobs.worker_heartbeat');
select lives_ok($$ select jobs.job_type_declare('roles.send', '{"sensitive": ["card"]}') $$,
                'worker: jobs.job_type_declare (the job types it serves)');
select lives_ok($$ select jobs.wake_tokens(array['roles']) $$, 'worker: jobs.wake_tokens');
select lives_ok($$ select jobs.watch_token(pg_catalog.current_setting('roles_test.id')::bigint) $$,
                'worker: jobs.watch_token');
select throws_ok($$ select jobs.cancel(1) $$, '42501', null, 'worker cannot cancel');
select throws_ok($$ select jobs.remove_where('{}') $$, '42501', null, 'worker cannot remove');
select throws_ok($$ select 1 from jobs.job_view $$, '42501', null, 'worker cannot read jobs.job_view');
select throws_ok($$ select jobs.job_type_put('roles.send', '{}') $$, '42501', null,
                 'worker cannot put a job type (it would narrow redaction)');
select throws_ok($$ select jobs.limit_put('roles_lim', '{"scope": "queue", "target": "roles", "concurrency": 1}') $$,
                 '42501', null, 'worker cannot put a limit');
select throws_ok($$ select jobs.limit_remove('roles_lim') $$, '42501', null, 'worker cannot remove a limit');
select throws_ok($$ select jobs.schedule_put('roles.s', '{"job": "roles.send", "cron": "* * * * *"}') $$,
                 '42501', null, 'worker cannot put a schedule');
select throws_ok($$ select jobs.leader_acquire('scheduler', 'w-1', 30) $$, '42501', null,
                 'worker cannot lead the scheduler');
select throws_ok($$ select jobs.purge(10, true, null) $$, '42501', null, 'worker cannot purge');
select throws_ok($$ select jobs.limit_stats() $$, '42501', null, 'worker cannot read limit_stats');

-- the scheduler configures the fleet from code, leads and sweeps; it runs no job
set local role sqljobs_scheduler;
select lives_ok($$ select jobs.leader_acquire('scheduler', 's-1', 30) $$, 'scheduler: jobs.leader_acquire');
select lives_ok($$ select jobs.leaders() $$, 'scheduler: jobs.leaders');
select lives_ok($$ select jobs.schedule_put('roles.s', '{"job": "roles.send", "cron": "0 3 * * *"}') $$,
                'scheduler: jobs.schedule_put');
select lives_ok($$ select jobs.schedules() $$, 'scheduler: jobs.schedules');
select lives_ok($$ select jobs.limit_put('roles_lim', '{"scope": "queue", "target": "roles_other", "concurrency": 1}') $$,
                'scheduler: jobs.limit_put');
select lives_ok($$ select jobs.job_type_declare('roles.other', '{}') $$, 'scheduler: jobs.job_type_declare');
select lives_ok($$ select jobs.retention_sweep(10) $$, 'scheduler: jobs.retention_sweep');
select throws_ok($$ select jobs.claim(array['roles'], 'w', 1) $$, '42501', null, 'scheduler cannot claim');
select throws_ok($$ select jobs.enqueue('roles.send', 'r-9') $$, '42501', null, 'scheduler cannot enqueue');
select throws_ok($$ select jobs.purge(10, false, '{"succeeded_s": 0}') $$, '42501', null,
                 'scheduler cannot purge by ages of its own');
select throws_ok($$ select jobs.job_type_put('roles.send', '{}') $$, '42501', null, 'scheduler cannot put a job type');
select throws_ok($$ select jobs.schedule_remove('roles.s') $$, '42501', null, 'scheduler cannot remove a schedule');
select throws_ok($$ select jobs.limit_remove('roles_lim') $$, '42501', null, 'scheduler cannot remove a limit');

-- the producer reads the outcome of its job
set local role sqljobs_producer;
select is((select w.state::text from jobs.watch_outcome(pg_catalog.current_setting('roles_test.id')::bigint) w),
          'succeeded', 'producer: jobs.watch_outcome');

-- the reader reads views and read functions only
set local role sqljobs_reader;
select lives_ok($$ select jobs.queue_stats() $$, 'reader: jobs.queue_stats');
select is((select pg_catalog.count(*)::int from jobs.job_view v where v.queue = 'roles'), 2,
          'reader: jobs.job_view (redaction functions included)');
select lives_ok($$ select jobs.list_jobs('{}', null, 10) $$, 'reader: jobs.list_jobs');
select lives_ok($$ select jobs.stats(300) $$, 'reader: jobs.stats');
select throws_ok($$ select jobs.enqueue('roles.send', 'r-9') $$, '42501', null, 'reader cannot enqueue');
select throws_ok($$ select jobs.job_payload(1) $$, '42501', null, 'reader cannot read a raw payload');
select throws_ok($$ select jobs.cancel(1) $$, '42501', null, 'reader cannot cancel');

-- the operator operates, and reads as a reader
set local role sqljobs_operator;
select lives_ok($$ select jobs.cancel((select v.id from jobs.job_view v where v.key = 'r-2')) $$, 'operator: jobs.cancel');
select lives_ok($$ select jobs.pause_queue('roles') $$, 'operator: jobs.pause_queue');
select lives_ok($$ select jobs.list_jobs('{}', null, 10) $$, 'operator reads as a reader: jobs.list_jobs');
select throws_ok($$ select jobs.claim(array['roles'], 'w', 1) $$, '42501', null, 'operator cannot claim');
select throws_ok($$ select jobs.enqueue('roles.send', 'r-9') $$, '42501', null, 'operator cannot enqueue');
reset role;

-- every table and sequence, as every role: refused
select throws_ok(pg_catalog.format('select 1 from %s limit 1', c.oid::regclass), '42501', null,
                 r.role || ' cannot read ' || c.oid::regclass::text)
  from pg_catalog.pg_class c,
       (values ('sqljobs_producer'), ('sqljobs_worker'), ('sqljobs_scheduler'), ('sqljobs_operator'),
               ('sqljobs_reader')) r(role)
 where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('r', 'S')
   and pg_catalog.set_config('role', r.role, true) is not null
 order by r.role, 1;
reset role;

-- the catalog: what each role may execute is exactly its grant list, and PUBLIC nothing
select is_empty($$
  select r.role, p.oid::regprocedure::text
    from pg_catalog.pg_proc p,
         (values ('sqljobs_producer'), ('sqljobs_worker'), ('sqljobs_scheduler'), ('sqljobs_operator'),
                 ('sqljobs_reader')) r(role)
   where p.pronamespace = 'jobs'::regnamespace
     and pg_catalog.has_function_privilege(r.role, p.oid, 'execute')
  except
  select g.role_name, g.fn::text from jobs.role_grants() g
  except
  select 'sqljobs_operator', g.fn::text from jobs.role_grants() g where g.role_name = 'sqljobs_reader'
  except
  select r.role, g.fn::text
    from jobs.role_grants() g,
         (values ('sqljobs_producer'), ('sqljobs_worker'), ('sqljobs_scheduler'), ('sqljobs_operator'),
                 ('sqljobs_reader')) r(role)
   where g.role_name = 'public' $$,
  'no role may execute a function beyond its grant list');
select is_empty($$
  select g.role_name, g.fn::text from jobs.role_grants() g
   where g.role_name <> 'public' and not pg_catalog.has_function_privilege(g.role_name, g.fn, 'execute') $$,
  'every role may execute each function of its grant list');
select is((select pg_catalog.array_agg(distinct g.role_name order by g.role_name) from jobs.role_grants() g),
          array['public', 'sqljobs_operator', 'sqljobs_producer', 'sqljobs_reader', 'sqljobs_scheduler', 'sqljobs_worker'],
          'the grant list names the five roles (and public)');
select is_empty($$
  select p.oid::regprocedure from pg_catalog.pg_proc p
   where p.pronamespace = 'jobs'::regnamespace
     and (p.proacl is null  -- the default ACL: PUBLIC executes
          or exists (select from pg_catalog.aclexplode(p.proacl) a where a.grantee = 0))
  except
  select g.fn from jobs.role_grants() g where g.role_name = 'public' $$,
  'PUBLIC executes no function but the three jobs.job_view calls (redaction, bound_tenant)');
select is_empty($$
  select p.oid::regprocedure from pg_catalog.pg_proc p
   where p.pronamespace = 'jobs'::regnamespace
     and (not p.prosecdef or not 'search_path=""' = any (coalesce(p.proconfig, '{}'))) $$,
  'every function is security definer with search_path pinned');

-- sqljobs.create_roles = off: a missing role is not made, and the grants still run
alter role sqljobs_reader rename to sqljobs_reader_roles_test;
set local sqljobs.create_roles = off;
select lives_ok($$ select jobs.install_roles() $$, 'create_roles = off: the grants run');
select ok(not exists (select from pg_catalog.pg_roles where rolname = 'sqljobs_reader'),
          'create_roles = off: the missing role is not created');
set local sqljobs.create_roles = on;
select lives_ok($$ select jobs.install_roles() $$, 'run again with roles on: idempotent');
select ok(pg_catalog.has_function_privilege('sqljobs_reader', 'jobs.queue_stats()', 'execute'),
          'create_roles on: the missing role is created and granted');

select * from finish();
rollback;
