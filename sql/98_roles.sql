-- Least-privilege roles (docs/design/roles.md): five NOLOGIN roles a host grants to its
-- login roles. Every function in schema jobs runs as the schema owner (security
-- definer, search_path pinned to ''), nobody but the owner is granted anything on the
-- tables, and EXECUTE is the only gate: granted per role, revoked from PUBLIC.
--
--   sqljobs_producer   puts jobs and events in; awaits the outcome of a job (redacted)
--   sqljobs_worker     runs jobs: claims, settles, steps, events, the enqueues and
--                      stages a run makes, the outbox relay, application locks, its own
--                      row in the worker registry, and the job types it serves (it may
--                      add a job type or widen what it hides, never narrow it)
--   sqljobs_scheduler  the fleet's configuration from code: leads, fires schedules,
--                      writes the declared tasks, limits and job types, and sweeps
--                      retention under the stored policy
--   sqljobs_operator   the operator's verbs and every setting (a member of reader)
--   sqljobs_reader     views and read functions only, redacted
--
-- Runs last (after every function exists), in a fresh install from sql/ and at the end
-- of each revision (`select jobs.install_roles();`), which also takes back from each
-- role what an earlier version granted it and this one does not.
-- `set sqljobs.create_roles = off` (or PGOPTIONS='-c sqljobs.create_roles=off', or
-- `alter database ... set sqljobs.create_roles = off`) skips creating the roles, for
-- hosts that forbid CREATE ROLE: the grants then go only to those of the five roles a
-- DBA made beforehand.
--
-- A function the owner creates later in schema jobs (by hand, outside a revision) is
-- not PUBLIC's either: install_roles() takes EXECUTE from PUBLIC in the owner's default
-- privileges for this database. PostgreSQL cannot do that per schema (a per-schema
-- default privilege only adds to the global one, and the global one grants PUBLIC
-- EXECUTE on every function), so it is the owner's global default: it holds for every
-- function the owner makes in this database, which is why that role is for migrations
-- only (docs/design/roles.md, "Who owns the schema"). A superuser owner is left as it
-- is: its default would also hide every extension and helper a DBA later installs as
-- that superuser; there, a function made outside a revision is PUBLIC's until
-- install_roles() runs again. tests pin that after every install PUBLIC executes only
-- the three functions jobs.job_view needs.

create or replace function jobs.role_grants()
returns table (role_name text, fn regprocedure)
language sql
stable
set search_path = ''
as $$
  select g.role_name, g.fn::pg_catalog.regprocedure
    from (
      -- every role: what a client asks once it connects, and pure helpers
      select r.role_name, f.fn
        from (values ('sqljobs_producer'), ('sqljobs_worker'), ('sqljobs_scheduler'),
                     ('sqljobs_operator'), ('sqljobs_reader')) as r(role_name)
       cross join (values ('jobs.schema_version()'), ('jobs.schema_floor()'),
                          ('jobs.spec_defaults()'), ('jobs.spec_fields()'), ('jobs.now()'),
                          ('jobs.error_codes()'), ('jobs.max_payload_bytes()'),
                          ('jobs.backoff_s(integer,double precision,double precision,text)'),
                          ('jobs.retention_defaults()'), ('jobs.role_grants()'),
                          ('jobs.redact(text,jsonb)')) as f(fn)
      union all
      select g.role_name, g.fn from (values
      -- producer: puts jobs and events in, awaits the outcome of what it put in
      ('sqljobs_producer', 'jobs.enqueue(text,text,jsonb,jsonb)'),
      ('sqljobs_producer', 'jobs.enqueue_many(jsonb)'),
      ('sqljobs_producer', 'jobs.enqueue_batch(jsonb,text[],jsonb)'),
      ('sqljobs_producer', 'jobs.stage(text,text,jsonb,jsonb)'),
      ('sqljobs_producer', 'jobs.stage_many(jsonb)'),
      ('sqljobs_producer', 'jobs.emit_event(text,jsonb)'),
      ('sqljobs_producer', 'jobs.emit_event_v2(text,jsonb,jsonb)'),
      ('sqljobs_producer', 'jobs.watch_outcome(bigint)'),
      ('sqljobs_producer', 'jobs.watch_token(bigint)'),
      -- worker: runs jobs
      ('sqljobs_worker', 'jobs.claim(text[],text,integer,double precision,jsonb)'),
      ('sqljobs_worker', 'jobs.claim_v2(text[],text,integer,double precision,jsonb)'),
      ('sqljobs_worker', 'jobs.recover(text[],integer)'),
      ('sqljobs_worker', 'jobs.claimable_behind(text[],jsonb,text[],text)'),
      ('sqljobs_worker', 'jobs.ack(bigint,bigint,jsonb)'),
      ('sqljobs_worker', 'jobs.ack_many(bigint[],bigint[],jsonb[])'),
      ('sqljobs_worker', 'jobs.nack(bigint,bigint,jsonb,text,double precision)'),
      ('sqljobs_worker', 'jobs.nack_many(bigint[],bigint[],jsonb[],text[],double precision[])'),
      ('sqljobs_worker', 'jobs.heartbeat(bigint,bigint,double precision)'),
      ('sqljobs_worker', 'jobs.heartbeat_many(bigint[],bigint[],double precision)'),
      ('sqljobs_worker', 'jobs.settle_hold(bigint[],bigint[])'),
      ('sqljobs_worker', 'jobs.progress(bigint,bigint,jsonb)'),
      ('sqljobs_worker', 'jobs.step_put(bigint,bigint,text,jsonb,double precision,jsonb)'),
      ('sqljobs_worker', 'jobs.step_sleep(bigint,bigint,text,timestamp with time zone,double precision)'),
      ('sqljobs_worker', 'jobs.step_invoke(bigint,bigint,text[],jsonb,double precision)'),
      ('sqljobs_worker', 'jobs.step_unwound(bigint,bigint)'),
      ('sqljobs_worker', 'jobs.step_wait(bigint,bigint,text,jsonb,double precision,double precision)'),
      ('sqljobs_worker', 'jobs.job_steps(bigint)'),
      ('sqljobs_worker', 'jobs.emit_event(text,jsonb)'),
      ('sqljobs_worker', 'jobs.emit_event_v2(text,jsonb,jsonb)'),
      ('sqljobs_worker', 'jobs.enqueue(text,text,jsonb,jsonb)'),
      ('sqljobs_worker', 'jobs.enqueue_many(jsonb)'),
      ('sqljobs_worker', 'jobs.enqueue_batch(jsonb,text[],jsonb)'),
      ('sqljobs_worker', 'jobs.stage(text,text,jsonb,jsonb)'),
      ('sqljobs_worker', 'jobs.stage_many(jsonb)'),
      ('sqljobs_worker', 'jobs.watch_outcome(bigint)'),
      ('sqljobs_worker', 'jobs.watch_token(bigint)'),
      ('sqljobs_worker', 'jobs.wake_tokens(text[])'),
      ('sqljobs_worker', 'jobs.worker_token(text)'),
      ('sqljobs_worker', 'jobs.fence_run(bigint,bigint)'),
      ('sqljobs_worker', 'jobs.relay(integer,text,double precision)'),
      ('sqljobs_worker', 'jobs.purge_outbox(double precision,integer)'),
      ('sqljobs_worker', 'jobs.lease_acquire(text,text,double precision)'),
      ('sqljobs_worker', 'jobs.lease_renew(text,text,bigint,double precision)'),
      ('sqljobs_worker', 'jobs.lease_release(text,text,bigint)'),
      ('sqljobs_worker', 'jobs.lease_holds(text,bigint)'),
      ('sqljobs_worker', 'jobs.limits()'),
      ('sqljobs_worker', 'jobs.job_types()'),
      ('sqljobs_worker', 'jobs.job_type_declare(text,jsonb)'),
      ('sqljobs_worker', 'jobs.worker_heartbeat(text,text[],text[],integer,double precision,text,integer,jsonb)'),
      ('sqljobs_worker', 'jobs.worker_stop(text)'),
      ('sqljobs_worker', 'jobs.backfill_begin(bigint,bigint,text,text,text,text[],text[],text,bigint,boolean,text)'),
      ('sqljobs_worker', 'jobs.backfill_advance(bigint,bigint,text,text,text,integer,jsonb,bigint)'),
      ('sqljobs_worker', 'jobs.backfill_status(bigint,bigint,text,text,text)'),
      ('sqljobs_worker', 'jobs.backfill_finish(bigint,bigint,text,text,text)'),
      ('sqljobs_worker', 'jobs.webhook_attempt_put(bigint,bigint,text,text,integer,integer,text)'),
      ('sqljobs_worker', 'jobs.webhook_disabled(text)'),
      ('sqljobs_worker', 'jobs.ledger_post(bigint,bigint,text,text,jsonb,text)'),
      ('sqljobs_worker', 'jobs.consumer_cursor(text)'),
      ('sqljobs_worker', 'jobs.consumer_advance(text,bigint,jsonb,integer)'),
      -- scheduler: the fleet's configuration from code, the schedules, retention
      ('sqljobs_scheduler', 'jobs.leader_acquire(text,text,double precision)'),
      ('sqljobs_scheduler', 'jobs.leader_release(text,text,bigint)'),
      ('sqljobs_scheduler', 'jobs.leaders()'),
      ('sqljobs_scheduler', 'jobs.schedule_fire(text,timestamp with time zone[],timestamp with time zone,bigint)'),
      ('sqljobs_scheduler', 'jobs.schedule_put(text,jsonb)'),
      ('sqljobs_scheduler', 'jobs.schedules()'),
      ('sqljobs_scheduler', 'jobs.limit_put(text,jsonb)'),
      ('sqljobs_scheduler', 'jobs.limits()'),
      ('sqljobs_scheduler', 'jobs.job_type_declare(text,jsonb)'),
      ('sqljobs_scheduler', 'jobs.job_types()'),
      ('sqljobs_scheduler', 'jobs.retention_sweep(integer)'),
      -- operator: the operator verbs and settings (it is a member of sqljobs_reader too)
      ('sqljobs_operator', 'jobs.cancel(bigint)'),
      ('sqljobs_operator', 'jobs.requeue(bigint[])'),
      ('sqljobs_operator', 'jobs.recover(text[],integer)'),
      ('sqljobs_operator', 'jobs.promote(bigint)'),
      ('sqljobs_operator', 'jobs.fork(bigint,text)'),
      ('sqljobs_operator', 'jobs.remove(bigint)'),
      ('sqljobs_operator', 'jobs.cancel_where(jsonb,integer)'),
      ('sqljobs_operator', 'jobs.requeue_where(jsonb,integer)'),
      ('sqljobs_operator', 'jobs.promote_where(jsonb,integer)'),
      ('sqljobs_operator', 'jobs.remove_where(jsonb,integer)'),
      ('sqljobs_operator', 'jobs.pause_queue(text)'),
      ('sqljobs_operator', 'jobs.resume_queue(text)'),
      ('sqljobs_operator', 'jobs.job_payload(bigint)'),
      ('sqljobs_operator', 'jobs.schedule_put(text,jsonb)'),
      ('sqljobs_operator', 'jobs.schedule_pause(text)'),
      ('sqljobs_operator', 'jobs.schedule_resume(text)'),
      ('sqljobs_operator', 'jobs.schedule_remove(text)'),
      ('sqljobs_operator', 'jobs.limit_put(text,jsonb)'),
      ('sqljobs_operator', 'jobs.limit_remove(text)'),
      ('sqljobs_operator', 'jobs.job_type_put(text,jsonb)'),
      ('sqljobs_operator', 'jobs.job_type_declare(text,jsonb)'),
      ('sqljobs_operator', 'jobs.job_type_remove(text)'),
      ('sqljobs_operator', 'jobs.retention_put(text,jsonb)'),
      ('sqljobs_operator', 'jobs.retention_remove(text)'),
      ('sqljobs_operator', 'jobs.purge(integer,boolean,jsonb)'),
      ('sqljobs_operator', 'jobs.retention_sweep(integer)'),
      ('sqljobs_operator', 'jobs.purge_outbox(double precision,integer)'),
      ('sqljobs_operator', 'jobs.purge_events(timestamp with time zone,integer)'),
      ('sqljobs_operator', 'jobs.worker_stop(text)'),
      ('sqljobs_operator', 'jobs.watch_outcome(bigint)'),
      ('sqljobs_operator', 'jobs.watch_token(bigint)'),
      ('sqljobs_operator', 'jobs.tenant_bind(text,text)'),
      ('sqljobs_operator', 'jobs.tenant_unbind(text)'),
      ('sqljobs_operator', 'jobs.tenant_bindings()'),
      ('sqljobs_operator', 'jobs.backfill_pause(text,text,text)'),
      ('sqljobs_operator', 'jobs.backfill_resume(text,text,text)'),
      ('sqljobs_operator', 'jobs.backfill_cancel(text,text,text)'),
      ('sqljobs_operator', 'jobs.webhook_disable(text,text,text)'),
      ('sqljobs_operator', 'jobs.webhook_enable(text)'),
      -- reader: views and read functions only (redacted: no raw payload)
      ('sqljobs_reader', 'jobs.queue_stats()'), ('sqljobs_reader', 'jobs.queue_stats_v2()'),
      ('sqljobs_reader', 'jobs.list_jobs(jsonb,bigint,integer)'),
      ('sqljobs_reader', 'jobs.job_detail(bigint)'),
      ('sqljobs_reader', 'jobs.job_steps(bigint)'),
      ('sqljobs_reader', 'jobs.job_forked_from(bigint)'),
      ('sqljobs_reader', 'jobs.job_types()'),
      ('sqljobs_reader', 'jobs.personal_data()'),
      ('sqljobs_reader', 'jobs.workers()'),
      ('sqljobs_reader', 'jobs.unserved_jobs()'),
      ('sqljobs_reader', 'jobs.schedules()'),
      ('sqljobs_reader', 'jobs.leaders()'),
      ('sqljobs_reader', 'jobs.leases()'),
      ('sqljobs_reader', 'jobs.limits()'),
      ('sqljobs_reader', 'jobs.limit_stats()'),
      ('sqljobs_reader', 'jobs.outbox_stats()'),
      ('sqljobs_reader', 'jobs.queue_gauges()'),
      ('sqljobs_reader', 'jobs.limit_gauges()'),
      ('sqljobs_reader', 'jobs.stats(double precision)'),
      ('sqljobs_reader', 'jobs.retention_policy(jsonb)'),
      ('sqljobs_reader', 'jobs.finished_per_minute(integer)'),
      ('sqljobs_reader', 'jobs.finished_by_queue(integer,integer)'),
      ('sqljobs_reader', 'jobs.declared_queues()'),
      ('sqljobs_reader', 'jobs.backfills(text)'),
      ('sqljobs_reader', 'jobs.webhook_disabled(text)'),
      ('sqljobs_reader', 'jobs.webhook_endpoints()'),
      ('sqljobs_reader', 'jobs.webhook_attempts(bigint)'),
      ('sqljobs_reader', 'jobs.ledger_balances(text,text)'),
      ('sqljobs_reader', 'jobs.ledger_posting(text,text,text)'),
      ('sqljobs_reader', 'jobs.subject_audits(integer)'),
      ('sqljobs_reader', 'jobs.consumers()'),
      -- jobs.job_view calls these with its reader's privileges (a view's functions are
      -- checked against its caller), so whoever is granted SELECT on the view needs them;
      -- they compute on their arguments only and read no table (bound_tenant: only the
      -- caller's own binding)
      ('public', 'jobs.redact_payload(jsonb,text[])'),
      ('public', 'jobs.bound_tenant()'),
      ('public', 'jobs.redact_job_output(jsonb,jsonb,text[])')
      ) as g(role_name, fn)
    ) as g
   -- a function another file drops or has not made yet is left out, not an error
   where pg_catalog.to_regprocedure(g.fn) is not null
$$;

comment on function jobs.role_grants() is
  'Which role may execute which function: the whole EXECUTE grant list of the five sqljobs roles, and the three functions jobs.job_view needs granted to public (docs/design/roles.md).';

create or replace function jobs.install_roles()
returns void
language plpgsql
set search_path = ''
as $$
declare
  v_create boolean := coalesce(
    pg_catalog.lower(pg_catalog.current_setting('sqljobs.create_roles', true)), 'on')
    not in ('off', 'false', '0', 'no');
  v_roles  text[] := array['sqljobs_producer', 'sqljobs_worker', 'sqljobs_scheduler',
                           'sqljobs_operator', 'sqljobs_reader'];
  v_role   text;
  v_grant  record;
  v_owner  oid := (select n.nspowner from pg_catalog.pg_namespace n where n.nspname = 'jobs');
begin
  if v_create then
    foreach v_role in array v_roles loop
      if not exists (select from pg_catalog.pg_roles r where r.rolname = v_role) then
        begin
          execute pg_catalog.format('create role %I nologin', v_role);
        exception when duplicate_object or unique_violation then
          null;  -- another database of this cluster made it at the same moment
        end;
      end if;
    end loop;
  end if;

  -- every function runs as the schema owner; EXECUTE is the gate
  for v_grant in
    select p.oid::pg_catalog.regprocedure as fn, p.prosecdef
      from pg_catalog.pg_proc p
     where p.pronamespace = 'jobs'::pg_catalog.regnamespace
  loop
    if not v_grant.prosecdef then
      execute pg_catalog.format('alter function %s security definer', v_grant.fn);
    end if;
  end loop;
  revoke all on all functions in schema jobs from public;
  revoke all on all tables in schema jobs from public;
  revoke all on all sequences in schema jobs from public;
  -- and a function the owner makes later is not PUBLIC's (see the head of this file)
  if not (select r.rolsuper from pg_catalog.pg_roles r where r.oid = v_owner) then
    execute pg_catalog.format(
      'alter default privileges for role %I revoke execute on functions from public',
      pg_catalog.pg_get_userbyid(v_owner));
  end if;

  -- each role gets exactly its list: what an earlier version granted and this one does
  -- not is taken back
  foreach v_role in array v_roles loop
    if exists (select from pg_catalog.pg_roles r where r.rolname = v_role) then
      execute pg_catalog.format('revoke all on all functions in schema jobs from %I', v_role);
      execute pg_catalog.format('grant usage on schema jobs to %I', v_role);
    end if;
  end loop;
  for v_grant in
    select g.role_name, g.fn
      from jobs.role_grants() g
     where g.role_name = 'public'
        or exists (select from pg_catalog.pg_roles r where r.rolname = g.role_name)
  loop
    execute pg_catalog.format('grant execute on function %s to %I', v_grant.fn,
                              v_grant.role_name);
  end loop;
  if exists (select from pg_catalog.pg_roles r where r.rolname = 'sqljobs_reader') then
    grant select on jobs.job_view to sqljobs_reader;
    if exists (select from pg_catalog.pg_roles r where r.rolname = 'sqljobs_operator')
       and not pg_catalog.pg_has_role('sqljobs_operator', 'sqljobs_reader', 'member') then
      grant sqljobs_reader to sqljobs_operator;
    end if;
  end if;
end
$$;

comment on function jobs.install_roles() is
  'Creates the five NOLOGIN roles (unless sqljobs.create_roles = off), makes every jobs function security definer, revokes PUBLIC and gives each role exactly its EXECUTE grants per jobs.role_grants().';

select jobs.install_roles();
