-- sqljobs schema version 2 (flow control, and what operating it needs): upgrades
-- version 1 in place. Revision sqljobs_0002. The source of every function below is
-- sql/: new are sql/35_limits.sql (limits; docs/design/limits.md says why it is built
-- this way), 92_introspection.sql (job types, redaction, job_view), 93_metrics.sql
-- (gauges, stats), 95_retention.sql (purge) and 15_tenancy.sql (tenant-bound sessions);
-- the engine's functions changed to honour limits and tenant bindings.
--
-- Locks: jobs.job takes an ACCESS EXCLUSIVE lock for the new columns (no rewrite: their
-- defaults are constants) and the index swap; the new partial indexes cover columns
-- that are empty before this revision, and the rebuilt job_claimable_idx only the
-- claimable rows, so the lock lasts about as long as reading those; job_retention_idx
-- covers the finished rows kept (about a second per million). Workers of
-- version 1 need not drain: they keep calling the same functions (jobs.leader_* are
-- kept as wrappers over the named leases).

-- ---------------------------------------------------------------------------
-- jobs.job: the spec fields of debounce, singleton and throttle, and the engine's
-- slots (the limit groups a running job holds), blocked_on and deferred_by; and the
-- attempt history (attempts: null until an attempt fails, no rewrite).
-- ---------------------------------------------------------------------------
alter table jobs.job
  add column group_key      text,
  add column singleton      boolean not null default false,
  add column debounce_s     double precision,
  add column throttle_n     integer,
  add column throttle_per_s double precision,
  add column slots          text[],
  add column blocked_on     text,
  add column deferred_by    text,
  add column attempts       jsonb;

-- The spec record is rebuilt once, its fields in column order (jobs.define_spec below
-- makes it again, and the functions that read it).
drop type jobs.job_spec;

-- A job waiting for a limit's slot is not claimable.
drop index jobs.job_claimable_idx;
create index job_claimable_idx
  on jobs.job (queue, priority, run_at, id)
  where state in ('ready', 'interrupted') and blocked_on is null;
create index job_blocked_idx
  on jobs.job (blocked_on, priority, run_at, id)
  where blocked_on is not null and state in ('ready', 'interrupted');
create index job_deferred_idx
  on jobs.job (deferred_by)
  where deferred_by is not null and state in ('ready', 'interrupted');
create unique index job_singleton_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where singleton and state in ('ready', 'running', 'parked', 'interrupted');
create unique index job_debounce_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where debounce_s is not null and state = 'ready';
-- Dead jobs per queue (jobs.queue_gauges in sql/93_metrics.sql): unlike the indexes
-- above it holds rows from the start (the dead jobs kept), one more read of the table.
create index job_dead_idx
  on jobs.job (queue)
  where state = 'dead';

-- ---------------------------------------------------------------------------
-- jobs.leader becomes jobs.lease, the named leases (the scheduler's is 'scheduler':
-- a leader's token carries over).
-- ---------------------------------------------------------------------------
alter table jobs.leader rename to lease;
alter table jobs.lease rename column role to name;
alter table jobs.lease rename constraint leader_pkey to lease_pkey;
-- PostgreSQL 18 names NOT NULL constraints too (leader_role_not_null, ...): renamed
-- as a fresh install names them.
do $$
declare
  c record;
begin
  for c in select conname from pg_catalog.pg_constraint
            where conrelid = 'jobs.lease'::regclass and contype = 'n' and conname like 'leader\_%'
  loop
    execute pg_catalog.format('alter table jobs.lease rename constraint %I to %I', c.conname,
      pg_catalog.replace(pg_catalog.replace(c.conname, 'leader_role_', 'lease_name_'),
                         'leader_', 'lease_'));
  end loop;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.limit, jobs.slot and jobs.limit_start (sql/00_schema.sql says what each holds).
-- ---------------------------------------------------------------------------
create table jobs.limit (
  name         text primary key,
  scope        text not null,
  target       text,
  key_path     text[],
  concurrency  integer,
  rate_n       integer,
  rate_per_s   double precision,
  when_busy    text not null default 'wait',
  origin       text not null default 'api',
  updated_at   timestamptz not null
);
create table jobs.slot (
  grp     text not null,
  job_id  bigint not null,
  primary key (grp, job_id)
);
create table jobs.limit_start (
  grp     text primary key,
  starts  timestamptz[] not null
);

-- ---------------------------------------------------------------------------
-- Retention (sql/95_retention.sql): the stored policy, and the index jobs.purge sweeps.
-- ---------------------------------------------------------------------------
create table jobs.retention (
  queue        text primary key,
  succeeded_s  double precision,
  failed_s     double precision,
  dead_s       double precision,
  cancelled_s  double precision,
  awaited_s    double precision,
  events_s     double precision,
  updated_at   timestamptz not null
);
create index job_retention_idx
  on jobs.job (state, finished_at)
  where finished_at is not null;

-- jobs.job_type: job types and the payload paths views redact (sql/92_introspection.sql).
create table jobs.job_type (
  name             text primary key,
  queue            text,
  sensitive_paths  text[] not null default '{}',
  personal_paths   text[] not null default '{}',
  payload_schema   jsonb,
  retry            jsonb,
  timeout_s        double precision,
  origin           text not null default 'api',
  updated_at       timestamptz not null
);

-- jobs.event: the emitter's tenant; jobs.tenant_binding: login roles bound to one tenant
-- (sql/15_tenancy.sql). Both start empty: no lock beyond the brief one of the column.
alter table jobs.event add column tenant text;
-- jobs.worker: the login that registered a row (the only one that renews it while it
-- is live) and its tenant (sql/45_workers.sql); rows of version 1 have neither.
alter table jobs.worker add column login text, add column tenant text;

-- jobs.lock_key: the rows the engine locks where version 1 took advisory locks (sql/
-- 10_errors.sql, jobs.lock_keys); jobs.channel_key: the secret notification payloads are
-- made from (sql/20_enqueue.sql). New and small: no lock on another table.
create table jobs.lock_key (
  key         text primary key,
  created_at  timestamptz not null
);
create table jobs.channel_key (
  key  bytea not null
);
insert into jobs.channel_key (key)
select pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text
                                              || pg_catalog.gen_random_uuid()::text, '-', ''),
                         'hex');
create table jobs.tenant_binding (
  role_name   text primary key,
  tenant      text not null check (tenant <> ''),
  updated_at  timestamptz not null
);
