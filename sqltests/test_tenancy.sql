-- Tenancy (sql/15_tenancy.sql, docs/design/tenancy.md): a login role bound to tenant
-- acme, holding all five sqljobs roles, acts only within acme.
-- Every function a bound session might use to reach tenant globex's job is tried and
-- refused with tenant_refused (SJ018) (version 2: ack_many, nack_many, heartbeat,
-- heartbeat_many and progress too, which answered false before); every fleet-wide
-- function is refused (version 2: limits() and job_types() too); nothing changes.
-- The bound roles are not superusers, so their sessions run on the real clock
-- (jobs.fake_now is the superuser's: SJ019 for them).
begin;
select plan(94);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.notify = off;

create role tenancy_acme login;
create role tenancy_globex login;
create role tenancy_free login;                 -- bound to nothing
create role tenancy_team nologin;               -- bound; tenancy_member is its member
create role tenancy_member login in role tenancy_team;
grant sqljobs_producer, sqljobs_worker, sqljobs_scheduler, sqljobs_operator, sqljobs_reader
   to tenancy_acme, tenancy_globex, tenancy_free, tenancy_member;

-- globex's job G (claimed by an unbound worker under claim token t.gc), an untenanted
-- job N, and globex's parked waiter W on event 'paid'
do $$ begin perform pg_catalog.set_config('t.g', (select e.id from jobs.enqueue('t.job', 'k1', '{"n": 1}',
         '{"queue": "t", "tenant": "globex"}') e)::text, true); end $$;
do $$ begin perform pg_catalog.set_config('t.n', (select e.id from jobs.enqueue('t.job', 'n1', '{}',
         '{"queue": "t"}') e)::text, true); end $$;
do $$ begin perform pg_catalog.set_config('t.gc', (select c.claim from jobs.claim(array['t'], 'w-root', 1) c)::text,
                                          true); end $$;
-- (settings read first, in a scalar subquery: distributed on Citus, a query over the jobs
-- runs on a shard, where the setting does not exist)
select is((select j.claim from jobs.job j where j.id = (select current_setting('t.g')::bigint)),
          current_setting('t.gc')::bigint,
          'setup: the unbound worker claims globex''s job (G), under claim t.gc');
do $$ begin perform pg_catalog.set_config('t.w', (select e.id from jobs.enqueue('t.wait', 'w-g', '{}',
         '{"queue": "w", "tenant": "globex"}') e)::text, true); end $$;
select ok((select s.parked from jobs.claim(array['w'], 'w-root', 1) c
            cross join lateral jobs.step_wait(c.id, c.claim, 'paid', '[{"event": "paid"}]') s),
          'setup: globex''s job waits for event paid');

select ok(jobs.tenant_bind('tenancy_acme', 'acme'), 'tenant_bind creates a binding');
select ok(jobs.tenant_bind('tenancy_globex', 'x'), 'setup: globex bound');
select ok(not jobs.tenant_bind('tenancy_globex', 'globex'), 'tenant_bind changes a binding');
select ok(jobs.tenant_bind('tenancy_team', 'team'), 'a group role can be bound');
select throws_ok($$ select jobs.tenant_bind('postgres', 'acme') $$, 'SJ001', null,
                 'a superuser is never bound');
select throws_ok($$ select jobs.tenant_bind('no_such_role_here', 'acme') $$, 'SJ001', null,
                 'tenant_bind refuses an unknown role');
select is(jobs.bound_tenant(), null, 'the superuser stays unbound while bindings exist');

-- ===========================================================================
set local jobs.fake_now = '';  -- (the test clock is the superuser's)
set local session authorization tenancy_acme;
select is(jobs.bound_tenant(), 'acme', 'the login role is bound to acme');

-- enqueue: stamped with the tenant; another tenant refused; the key namespace is per tenant
select is((select e.outcome from jobs.enqueue('t.job', 'k1', '{"n": 2}', '{"queue": "t"}') e),
          'created', 'enqueue of globex''s key k1 creates acme''s own job');
do $$ begin perform pg_catalog.set_config('t.a', (select v.id from jobs.job_view v where v.key = 'k1')::text, true); end $$;
select is((select v.tenant from jobs.job_view v where v.key = 'k1'), 'acme', 'enqueue stamps the bound tenant');
select lives_ok($$ select jobs.enqueue('t.job', 'k2', '{}', '{"queue": "t", "tenant": "acme"}') $$,
                'enqueue naming its own tenant');
select throws_ok($$ select jobs.enqueue('t.job', 'k3', '{}', '{"queue": "t", "tenant": "globex"}') $$,
                 'SJ018', null, 'enqueue into globex');
select throws_ok($$ select jobs.enqueue_many('[{"name": "t.job", "key": "k4", "queue": "t"},
                                               {"name": "t.job", "key": "k5", "tenant": "globex"}]') $$,
                 'SJ018', null, 'enqueue_many with one spec of globex');
select throws_ok($$ select jobs.stage('t.job', 'k6', '{}', '{"tenant": "globex"}') $$,
                 'SJ018', null, 'stage into globex');
select throws_ok($$ select jobs.stage_many('[{"name": "t.job", "key": "k7", "tenant": "globex"}]') $$,
                 'SJ018', null, 'stage_many into globex');
select lives_ok($$ select jobs.stage('t.job', 'k8', '{}', '{"queue": "t"}') $$, 'stage');

-- claim takes acme's jobs only
select is((select pg_catalog.array_agg(c.tenant order by c.id) from jobs.claim(array['t'], 'w-acme', 10) c),
          array['acme', 'acme'], 'claim returns acme''s two jobs, not N or globex''s');

-- every fenced call on globex's running job G, under its real claim token
select throws_ok($$ select jobs.ack_many(array[current_setting('t.g')::bigint], array[current_setting('t.gc')::bigint]) $$,
                 'SJ018', null, 'ack_many of G (version 2: refused, not answered ok = false)');
select throws_ok($$ select jobs.ack(current_setting('t.g')::bigint, current_setting('t.gc')::bigint) $$,
                 'SJ018', null, 'ack of G');
select throws_ok($$ select jobs.nack_many(array[current_setting('t.g')::bigint], array[current_setting('t.gc')::bigint]) $$,
                 'SJ018', null, 'nack_many of G (version 2: refused)');
select throws_ok($$ select jobs.nack(current_setting('t.g')::bigint, current_setting('t.gc')::bigint,
                                     '{"kind": "x", "message": "y"}') $$,
                 'SJ018', null, 'nack of G');
select throws_ok($$ select jobs.heartbeat(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, 30) $$,
                 'SJ018', null, 'heartbeat of G (version 2: refused, not false)');
select throws_ok($$ select jobs.heartbeat_many(array[current_setting('t.g')::bigint],
                                               array[current_setting('t.gc')::bigint], 30) $$,
                 'SJ018', null, 'heartbeat_many of G (version 2: refused)');
select throws_ok($$ select jobs.settle_hold(array[current_setting('t.g')::bigint],
                                            array[current_setting('t.gc')::bigint]) $$,
                 'SJ018', null, 'settle_hold of G (a tenant cannot keep recovery off another''s job)');
select throws_ok($$ select jobs.progress(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, '{"p": 1}') $$,
                 'SJ018', null, 'progress of G (version 2: refused, not false)');
select throws_ok($$ select jobs.ack_many(array[current_setting('t.a')::bigint, current_setting('t.g')::bigint],
                                         array[0, current_setting('t.gc')::bigint]) $$,
                 'SJ018', null, 'ack_many naming G beside acme''s own job: the whole batch is refused');
select throws_ok($$ select jobs.step_put(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, 's', '1') $$,
                 'SJ018', null, 'step_put on G');
select throws_ok($$ select jobs.step_sleep(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, 's',
                                           '2031-01-01') $$,
                 'SJ018', null, 'step_sleep on G');
select throws_ok($$ select jobs.step_invoke(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, array['c'],
                                            '[{"name": "t.c"}]') $$,
                 'SJ018', null, 'step_invoke on G');
select throws_ok($$ select jobs.step_wait(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, 's',
                                          '[{"event": "e"}]') $$,
                 'SJ018', null, 'step_wait on G');
select throws_ok($$ select jobs.step_unwound(current_setting('t.g')::bigint, current_setting('t.gc')::bigint) $$,
                 'SJ018', null, 'step_unwound on G');
select throws_ok($$ select jobs.watch_token(current_setting('t.g')::bigint) $$, 'SJ018', null, 'watch_token of G');

-- operator verbs and reads of G
select throws_ok($$ select jobs.cancel(current_setting('t.g')::bigint) $$, 'SJ018', null, 'cancel G');
select throws_ok($$ select jobs.requeue(array[current_setting('t.g')::bigint]) $$, 'SJ018', null, 'requeue G');
select throws_ok($$ select jobs.promote(current_setting('t.g')::bigint) $$, 'SJ018', null, 'promote G');
select throws_ok($$ select jobs.remove(current_setting('t.g')::bigint) $$, 'SJ018', null, 'remove G');
select throws_ok($$ select jobs.remove(current_setting('t.n')::bigint) $$, 'SJ018', null,
                 'remove N (untenanted: no tenant''s job)');
select throws_ok($$ select jobs.job_payload(current_setting('t.g')::bigint) $$, 'SJ018', null, 'job_payload of G');
select throws_ok($$ select jobs.job_detail(current_setting('t.g')::bigint) $$, 'SJ018', null, 'job_detail of G');
select throws_ok($$ select jobs.job_steps(current_setting('t.g')::bigint) $$, 'SJ018', null, 'job_steps of G');
select throws_ok($$ select jobs.watch_outcome(current_setting('t.g')::bigint) $$, 'SJ018', null, 'watch_outcome of G');
select throws_ok($$ select jobs.cancel_where('{"tenant": "globex"}') $$, 'SJ018', null, 'cancel_where of globex');
select throws_ok($$ select jobs.requeue_where('{"tenant": ["globex"]}') $$, 'SJ018', null, 'requeue_where of globex');
select throws_ok($$ select jobs.promote_where('{"tenant": "globex"}') $$, 'SJ018', null, 'promote_where of globex');
select throws_ok($$ select jobs.remove_where('{"tenant": "globex"}') $$, 'SJ018', null, 'remove_where of globex');
select throws_ok($$ select jobs.list_jobs('{"tenant": "globex"}') $$, 'SJ018', null, 'list_jobs of globex');
select is((select pg_catalog.array_agg(distinct l.tenant) from jobs.list_jobs('{}') l), array['acme'],
          'list_jobs lists acme''s jobs only');
select is((select pg_catalog.count(*)::int from jobs.job_view v where v.tenant is distinct from 'acme'), 0,
          'jobs.job_view shows acme''s jobs only');
select is((select w.moved::int from jobs.remove_where('{"queue": "t", "state": "ready"}') w), 0,
          'remove_where by queue: matches none of N or globex''s');

-- an event acme emits wakes acme's waiters only
select lives_ok($$ select jobs.emit_event('paid', '{}') $$, 'emit_event');

-- the functions that act on every tenant refuse a bound session
select throws_ok('select jobs.' || f, 'SJ018', null, 'fleet-wide: jobs.' || f)
  from (values ('relay(10, ''w'', 30)'), ('schedule_put(''s'', ''{}'')'),
               ('schedule_fire(''s'', array[now()], now(), 1)'), ('schedules()'),
               ('lease_acquire(''l'', ''h'', 30)'), ('leader_acquire(''scheduler'', ''h'', 30)'),
               ('limit_put(''l'', ''{}'')'), ('job_type_put(''t.job'', ''{}'')'),
               ('retention_put(''*'', ''{}'')'), ('purge(10, false, ''{}'')'),
               ('pause_queue(''t'')'), ('queue_stats()'), ('stats(300)'), ('workers()'),
               ('tenant_bind(''tenancy_acme'', ''globex'')'), ('tenant_unbind(''tenancy_acme'')'),
               ('job_type_declare(''t.job'', ''{}'')'), ('retention_sweep(10)'), ('leases()'))
       as v(f);
-- version 2: a tenant's limit or job type names others' (sql/35_limits.sql, 92_introspection.sql)
select throws_ok($$ select jobs.limits() $$, 'SJ018', null, 'fleet-wide (version 2): jobs.limits()');
select throws_ok($$ select jobs.job_types() $$, 'SJ018', null, 'fleet-wide (version 2): jobs.job_types()');
select lives_ok($$ select jobs.worker_heartbeat('w-acme', array['t'], array['t.job'], 1, 30, 'h', 1, '{}') $$,
                'worker_heartbeat');

-- neither SET ROLE nor the setting escapes the binding
set local role sqljobs_operator;
select is(jobs.bound_tenant(), 'acme', 'SET ROLE keeps the binding (session_user stays)');
reset role;
set local sqljobs.tenant = 'globex';
select throws_ok($$ select jobs.bound_tenant() $$, 'SJ018', null, 'sqljobs.tenant cannot name another tenant');
set local sqljobs.tenant = 'acme';
select is(jobs.bound_tenant(), 'acme', 'sqljobs.tenant may repeat the role''s tenant');
set local sqljobs.tenant = '';

-- ===========================================================================
reset session authorization;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
select results_eq($$ select j.state::text, j.claim, j.progress, j.lease_expires_at from jobs.job j
                      where j.id = (select current_setting('t.g')::bigint) $$,
                  $$ values ('running', current_setting('t.gc')::bigint, null::jsonb,
                             '2030-01-01 00:00:30+00'::timestamptz) $$,
                  'G is still running under its claim, no progress, its lease unmoved');
select is((select pg_catalog.count(*)::int from jobs.step s
            where s.job_id = (select current_setting('t.g')::bigint)),
          0, 'G has no step');
select is((select pg_catalog.count(*)::int from jobs.job j where j.key in ('k3', 'k4', 'k5', 'k6', 'k7')), 0,
          'no refused enqueue wrote a job');
select is((select pg_catalog.count(*)::int from jobs.outbox o where o.key in ('k6', 'k7')), 0,
          'no refused stage wrote a row');
select is((select j.state::text from jobs.job j
            where j.id = (select current_setting('t.w')::bigint)),
          'parked',
          'acme''s event left globex''s waiter parked');
select is((select pg_catalog.count(*)::int from jobs.tenant_binding), 3, 'the bindings are as they were');
select is((select o.tenant from jobs.outbox o where o.key = 'k8'), 'acme', 'stage stamps the bound tenant');
select is((select e.tenant from jobs.event e order by e.id desc limit 1), 'acme', 'the event carries acme');

-- a child of a tenant's job is of its tenant, even when an unbound worker invokes it
select throws_ok($$ select jobs.step_invoke(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, array['other'],
                                            '[{"name": "t.child", "tenant": "acme"}]') $$,
                 'SJ018', null, 'a child naming another tenant than its parent''s');
select is((select i.parked from jobs.step_invoke(current_setting('t.g')::bigint, current_setting('t.gc')::bigint, array['child'],
                                                  '[{"name": "t.child", "queue": "c"}]') i), true,
          'setup: G invokes a child');
select is((select c.tenant from jobs.job c
            where c.parent_id = (select current_setting('t.g')::bigint)),
          'globex',
          'the child inherits its parent''s tenant');

-- globex's waiter, run again, does not see acme's event
select lives_ok($$ select jobs.promote(current_setting('t.w')::bigint) $$, 'setup: promote the waiter');
select ok((select s.parked from jobs.claim(array['w'], 'w-root', 1) c
            cross join lateral jobs.step_wait(c.id, c.claim, 'paid', '[{"event": "paid"}]') s),
          'globex''s wait does not see acme''s event: it parks again');

-- the session setting binds an unbound role
set local jobs.fake_now = '';
set local session authorization tenancy_free;
select is(jobs.bound_tenant(), null, 'an unbound role');
set local sqljobs.tenant = 'globex';
select is(jobs.bound_tenant(), 'globex', 'sqljobs.tenant binds its session');
select is((select pg_catalog.count(*)::int from jobs.job_view v), 3, 'and it sees globex''s jobs (G, W, the child)');
set local sqljobs.tenant = '';

-- a member of a bound group role is bound
set local session authorization tenancy_member;
select is(jobs.bound_tenant(), 'team', 'a member of a bound role is bound to its tenant');
reset session authorization;

select * from finish();
rollback;
