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

-- ===========================================================================
-- Generated from sql/ by `make revision`: every function, view, trigger and comment
-- that differs from the previous schema version, as sql/ writes it. Do not edit
-- below this line: edit sql/ and run `make revision` again.
-- ===========================================================================

-- === sql/00_schema.sql ===

comment on table jobs.lease is 'Private: named leases; use jobs.lease_acquire / renew / release.';

comment on table jobs.limit is 'Private: concurrency and rate limits; use jobs.limit_put / limit_remove / limits().';

comment on table jobs.slot is 'Private: the limit groups running jobs hold (sql/35_limits.sql).';

comment on table jobs.limit_start is 'Private: recent starts of rate-limited groups (sql/35_limits.sql).';

comment on table jobs.job_type is 'Private: job types and their redaction; use jobs.job_type_put / job_types().';

comment on table jobs.retention is
  'Private: the retention policy of jobs.purge; use jobs.retention_put / retention_remove / retention_policy.';

comment on table jobs.lock_key is 'Private: the keys the engine locks rows of (sql/10_errors.sql).';

comment on table jobs.channel_key is 'Private: the secret notification payloads are made from.';

comment on table jobs.tenant_binding is
  'Private: roles bound to a tenant; use jobs.tenant_bind / tenant_unbind / tenant_bindings.';

-- ---------------------------------------------------------------------------
-- Clock. Every function reads time through jobs.now(). The test clock: a session may
-- set `jobs.fake_now` to run the engine at another time (pgTAP, where now() is frozen
-- for the whole transaction, and test suites), but only a superuser's session or one
-- whose login role is (a member of) the owner of schema jobs: for any other caller the
-- setting would move every lease, rate window and run_at it touches, so the call is
-- refused (setting_refused, SJ019) and nothing changes (docs/design/roles.md).
-- ---------------------------------------------------------------------------
-- PL/pgSQL, not SQL: a SQL function with a SET clause is parsed and planned again in
-- every transaction that calls it (about 35 us against 6 us, on the enqueue path).
create or replace function jobs.now()
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
declare
  v_fake text := nullif(pg_catalog.current_setting('jobs.fake_now', true), '');
begin
  if v_fake is null then
    return pg_catalog.now();
  end if;
  if not coalesce((select r.rolsuper or pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')
                     from pg_catalog.pg_roles r, pg_catalog.pg_namespace n
                    where r.rolname = session_user and n.nspname = 'jobs'), false) then
    raise exception using errcode = 'SJ019',
      message = pg_catalog.format('sqljobs.setting_refused: jobs.fake_now is the test clock, '
                                  'which role %s may not set', session_user),
      hint = 'unset it (reset jobs.fake_now); only the schema owner or a superuser moves the clock';
  end if;
  return v_fake::timestamptz;
end
$$;

comment on function jobs.now() is
  'Current time: now(), or the test clock jobs.fake_now for the schema owner or a superuser (SJ019 for any other role).';

-- ---------------------------------------------------------------------------
-- Fencing tokens: a job's claim token (sql/30_claim.sql) and a named lease's token
-- (sql/35_limits.sql). Each new token is greater than the one before it (its high bits
-- count them, so a guarded resource may keep the highest it saw) and unguessable (its
-- low 32 bits are random, from the server's strong generator): a fenced call's token
-- is the proof that its caller holds the job or the lease, which no other caller can
-- forge and which no error message or view prints.
--   new token = ((old >> 32) + 1) << 32 | 32 random bits
-- ---------------------------------------------------------------------------
create or replace function jobs.random32()
returns bigint
language sql
volatile
set search_path = ''
as $$ select ('x' || pg_catalog.substr(pg_catalog.gen_random_uuid()::text, 1, 8))::bit(32)::bigint $$;

comment on function jobs.random32() is
  '32 random bits from the strong generator (gen_random_uuid), the low half of a fencing token.';

-- ---------------------------------------------------------------------------
-- Version. Bump with each schema change that ships a new Alembic revision; the
-- client refuses to run against an older schema (sqljobs/_version.py).
-- ---------------------------------------------------------------------------
create or replace function jobs.schema_version()
returns integer
language sql
immutable
set search_path = ''
as $$ select 2 $$;

-- The oldest client schema version this schema still serves: a client built for an
-- older one is refused at start (what it calls may be gone). Raised only by a release
-- that drops what older clients call (migrations/versions/RETIRED); 1 while every
-- function of version 1 stands (docs/design/schema-upgrades.md).
create or replace function jobs.schema_floor()
returns integer
language sql
immutable
set search_path = ''
as $$ select 1 $$;

comment on function jobs.schema_floor() is
  'The oldest client schema version this schema serves; older clients are refused at start.';

-- === sql/10_errors.sql ===

create or replace function jobs.error_codes()
returns table (sqlstate text, name text, meaning text)
language sql
immutable
set search_path = ''
as $$
  values
    ('SJ001', 'invalid_argument',    'an argument is missing, malformed or out of range'),
    ('SJ002', 'payload_too_large',   'a payload is larger than jobs.max_payload_bytes()'),
    ('SJ003', 'duplicate_job',       'on_conflict = ''error'' and the key already has a job'),
    ('SJ004', 'lease_lost',          'the claim token or running state no longer holds'),
    ('SJ005', 'queues_required',     'jobs.claim was given no queue'),
    ('SJ006', 'job_not_found',       'no job has that id'),
    ('SJ007', 'job_not_requeueable', 'the job succeeded; a success is not run again'),
    ('SJ008', 'job_live',            'the job is still live (ready, running, parked or interrupted)'),
    ('SJ009', 'job_running',         'a worker is running the job'),
    ('SJ010', 'job_finished',        'the job already reached a final state'),
    ('SJ011', 'reserved_step_name',  'step names starting with sqljobs. are the runtime''s own'),
    ('SJ012', 'key_busy',            'another run held the key, and the job said when_busy = fail'),
    ('SJ013', 'limit_not_found',     'no limit has that name'),
    ('SJ014', 'invalid_retention',   'a retention age is negative or not a number, or a batch is below 1'),
    ('SJ015', 'unknown_retention_key', 'a retention policy key is not succeeded, failed, dead, cancelled, awaited or events'),
    ('SJ016', 'job_type_not_found',  'no job type has that name'),
    ('SJ017', 'invalid_job_type',    'a job type definition is refused: unknown field, bad value or bad path'),
    ('SJ018', 'tenant_refused',      'the session is bound to another tenant, or the function acts on every tenant'),
    ('SJ019', 'setting_refused',     'a session setting would widen what the caller may do (the test clock)'),
    ('SJ020', 'worker_id_taken',     'a live worker of that id was registered by another login role'),
    ('SJ030', 'not_leader',          'the leader token does not hold the live lease'),
    ('SJ031', 'schedule_not_found',  'no schedule has that name')
$$;

-- jobs.raise_error(name, message, detail, hint): raise the coded error `name`.
-- The message is prefixed with the symbolic name so a log line is self-explaining.
-- An unknown name is itself a bug and raises SJ001 saying so.
create or replace function jobs.raise_error(
  p_name    text,
  p_message text,
  p_detail  text default null,
  p_hint    text default null
)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_state text;
begin
  select c.sqlstate into v_state from jobs.error_codes() c where c.name = p_name;
  if v_state is null then
    raise exception 'sqljobs.invalid_argument: unknown error name %', p_name
      using errcode = 'SJ001';
  end if;
  -- RAISE refuses a null DETAIL or HINT, and an empty one prints as a blank line.
  if p_detail is null and p_hint is null then
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message;
  elsif p_hint is null then
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message,
      detail = p_detail;
  elsif p_detail is null then
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message,
      hint = p_hint;
  else
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message,
      detail = p_detail, hint = p_hint;
  end if;
end
$$;

-- The largest payload accepted, in bytes of its jsonb text form: 1 MiB unless an
-- administrator set `jobs.max_payload_bytes` for the login role or the database
-- (`alter role ... set`, `alter database ... set`; the most specific one holds, as
-- PostgreSQL applies them). A session may LOWER it (`set jobs.max_payload_bytes`,
-- PGOPTIONS), never raise it past what its role and database allow: a session setting
-- is the caller's input and widens nothing (docs/design/roles.md).
-- PL/pgSQL for the same reason as jobs.now() (sql/00_schema.sql); the catalog is read
-- only when the setting is there.
create or replace function jobs.max_payload_bytes()
returns integer
language plpgsql
stable
set search_path = ''
as $$
declare
  -- null: the setting exists nowhere (no role or database set it either); '' or a
  -- value: read what an administrator configured, which the session may only lower
  v_text       text := pg_catalog.current_setting('jobs.max_payload_bytes', true);
  v_configured text;
  v_cap        integer;
begin
  if v_text is null then
    return 1048576;
  end if;
  -- what an administrator configured for this login role and database
  select pg_catalog.substr(c.setting, pg_catalog.length('jobs.max_payload_bytes=') + 1)
    into v_configured
    from pg_catalog.pg_db_role_setting s
   cross join lateral pg_catalog.unnest(s.setconfig) as c(setting)
   where s.setdatabase in (0, (select d.oid from pg_catalog.pg_database d
                                where d.datname = pg_catalog.current_database()))
     and s.setrole in (0, (select r.oid from pg_catalog.pg_roles r where r.rolname = session_user))
     and c.setting like 'jobs.max\_payload\_bytes=%'
   order by (s.setrole <> 0) desc, (s.setdatabase <> 0) desc
   limit 1;
  begin
    v_cap := coalesce(nullif(v_configured, ''), '1048576')::integer;
    return least(coalesce(nullif(v_text, '')::integer, v_cap), v_cap);
  exception when invalid_text_representation or numeric_value_out_of_range then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('jobs.max_payload_bytes must be a whole number of bytes, got %s',
                        pg_catalog.quote_literal(v_text)));
  end;
end
$$;

comment on function jobs.max_payload_bytes() is
  'Payload size limit in bytes: 1 MiB, or what jobs.max_payload_bytes is set to for the role or database; a session may only lower it.';

-- jobs.too_deep(): the JSON path that finds an object or array 99 levels below the
-- top, i.e. a value nested 100 levels deep or more. Strict mode, so an array counts as
-- a level as an object does (lax mode unwraps arrays). Immutable with no arguments: the
-- planner folds `value @? jobs.too_deep()` to a constant path once per plan.
create or replace function jobs.too_deep()
returns jsonpath
language sql
immutable
set search_path = ''
as $$ select 'strict $.**{99} ? (@.type() == "object" || @.type() == "array")'::pg_catalog.jsonpath $$;

comment on function jobs.too_deep() is
  'Private: the JSON path matching a value nested 100 levels deep or more.';

-- jobs.check_value(value, what): a JSON value (a result, progress, an error, a step's
-- value, an event's payload) nested 100 levels deep or more is refused: JSON readers
-- give up somewhere deeper (Python's with a RecursionError at a few thousand), and a
-- worker must read what it is given.
create or replace function jobs.check_value(p_value jsonb, p_what text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value @? jobs.too_deep() then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('%s must be nested less than 100 levels deep', p_what));
  end if;
end
$$;

comment on function jobs.check_value(jsonb, text) is
  'Refuse (SJ001) a stored JSON value nested 100 levels deep or more.';

-- jobs.check_values(values, what): jobs.check_value for each of an array ("what N").
create or replace function jobs.check_values(p_values jsonb[], p_what text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_ord bigint;
begin
  select v.ord into v_ord
    from pg_catalog.unnest(p_values) with ordinality as v(value, ord)
   where v.value @? jobs.too_deep()
   order by v.ord
   limit 1;
  if v_ord is not null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('%s %s must be nested less than 100 levels deep', p_what, v_ord));
  end if;
end
$$;

comment on function jobs.check_values(jsonb[], text) is
  'Refuse (SJ001) an array of stored JSON values when one is nested 100 levels deep or more.';

-- jobs.check_name(value, what): a name (of a queue, an event, a step, a worker, a
-- lease, a limit, a schedule, a job type) must be 1 to 200 bytes.
create or replace function jobs.check_name(p_value text, p_what text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value is null or p_value = '' or pg_catalog.octet_length(p_value) > 200 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('%s must be a non-empty string of at most 200 bytes', p_what));
  end if;
end
$$;

comment on function jobs.check_name(text, text) is
  'Refuse (SJ001) a name that is empty or longer than 200 bytes.';

-- jobs.caller_is(role) -> whether this session's login role may act as `role`: a
-- superuser, a member of the schema's owner, or a member of `role` (false when no role
-- of that name exists). For the few functions that do more for an operator than for
-- the roles also granted them (sql/45_workers.sql).
create or replace function jobs.caller_is(p_role text)
returns boolean
language sql
stable
set search_path = ''
as $$
  select coalesce((select r.rolsuper
                          or pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')
                          or (pg_catalog.to_regrole(p_role) is not null
                              and pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole(p_role),
                                                         'MEMBER'))
                     from pg_catalog.pg_roles r, pg_catalog.pg_namespace n
                    where r.rolname = session_user and n.nspname = 'jobs'), false)
$$;

comment on function jobs.caller_is(text) is
  'Whether the session''s login role is a superuser, the schema owner, or a member of the role.';

-- ---------------------------------------------------------------------------
-- jobs.lock_keys(keys, modes) -> the keys locked, in key order.
-- Row locks on jobs.lock_key, held to commit, taken in key order (two transactions
-- locking overlapping keys never deadlock on them). modes, per key: 'update' (wait,
-- exclusive), 'share' (wait, shared) or 'skip' (exclusive, and a key another
-- transaction holds is left out of the answer instead of waited for). A key's row is
-- made on first use; one swept by jobs.purge between that and the lock is made again.
-- ---------------------------------------------------------------------------
create or replace function jobs.lock_keys(p_keys text[], p_modes text[])
returns text[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_key    text;
  v_mode   text;
  v_locked text[] := '{}';
begin
  for v_key, v_mode in
    select k.key, pg_catalog.max(k.mode)  -- (a key asked twice: the strongest, update)
      from rows from (pg_catalog.unnest(p_keys), pg_catalog.unnest(p_modes)) as k(key, mode)
     where k.key is not null
     group by k.key
     order by k.key
  loop
    loop
      insert into jobs.lock_key (key, created_at) values (v_key, pg_catalog.now())
      on conflict (key) do nothing;
      if v_mode = 'share' then
        perform from jobs.lock_key l where l.key = v_key for share;
      elsif v_mode = 'skip' then
        perform from jobs.lock_key l where l.key = v_key for update skip locked;
        exit;  -- held elsewhere (or swept): left out
      else
        perform from jobs.lock_key l where l.key = v_key for update;
      end if;
      exit when found;  -- (swept meanwhile: made again)
    end loop;
    if found then
      v_locked := v_locked || v_key;
    end if;
  end loop;
  return v_locked;
end
$$;

comment on function jobs.lock_keys(text[], text[]) is
  'Lock rows of jobs.lock_key in key order (update | share | skip, per key); answers the keys locked.';

-- === sql/15_tenancy.sql ===

-- jobs.bound_tenant() -> the tenant this session is bound to, or null (unbound).
create or replace function jobs.bound_tenant()
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  v_setting text := nullif(pg_catalog.current_setting('sqljobs.tenant', true), '');
  v_role    text;
  v_count   bigint;
begin
  if exists (select from jobs.tenant_binding) then  -- (nothing bound: one empty read)
    select pg_catalog.min(b.tenant), pg_catalog.count(distinct b.tenant)
      into v_role, v_count
      from jobs.tenant_binding b
      join pg_catalog.pg_roles r on r.rolname = b.role_name
     where pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
       and not (select s.rolsuper from pg_catalog.pg_roles s where s.rolname = session_user);
    if v_count > 1 then
      perform jobs.raise_error('tenant_refused',
        pg_catalog.format('role %s is bound to %s tenants through its memberships', session_user,
                          v_count), null, 'bind each login role to one tenant');
    end if;
    if v_role is not null then
      if v_setting is not null and v_setting <> v_role then
        perform jobs.raise_error('tenant_refused',
          pg_catalog.format('sqljobs.tenant is %s, but role %s is bound to tenant %s',
                            v_setting, session_user, v_role));
      end if;
      return v_role;
    end if;
  end if;
  return v_setting;
end
$$;

comment on function jobs.bound_tenant() is
  'The tenant this session is bound to (by its login role, or the sqljobs.tenant setting), or null.';

-- jobs.fleet_only(fn): refuse a bound session the function fn, which acts on every tenant.
create or replace function jobs.fleet_only(p_fn text)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
begin
  if v_tenant is not null then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('%s acts on every tenant; this session is bound to tenant %s',
                        p_fn, v_tenant),
      null, 'call it from a role bound to no tenant');
  end if;
end
$$;

-- jobs.check_tenant(ids): refuse a bound session any of these jobs of another tenant
-- (missing ids are left to the caller's own not-found answer).
create or replace function jobs.check_tenant(p_ids bigint[])
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
  v_id     bigint;
begin
  if v_tenant is null then
    return;
  end if;
  select j.id into v_id
    from jobs.job j
   where j.id = any (p_ids) and j.tenant is distinct from v_tenant
   order by j.id
   limit 1;
  if v_id is not null then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('job %s is not of tenant %s, to which this session is bound',
                        v_id, v_tenant));
  end if;
end
$$;

-- jobs.foreign_tenant_spec(specs, tenant) -> the ordinal (from 1) of the first spec that
-- names a tenant other than p_tenant, or null (a spec naming none, or null, is fine).
create or replace function jobs.foreign_tenant_spec(p_specs jsonb, p_tenant text)
returns bigint
language sql
immutable
set search_path = ''
as $$
  select e.ord
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
   where pg_catalog.jsonb_typeof(e.spec->'tenant') is distinct from 'null'
     and e.spec->'tenant' <> pg_catalog.to_jsonb(p_tenant)
   order by e.ord
   limit 1
$$;

-- jobs.tenant_specs(specs) -> the specs, each given the bound tenant; a spec naming
-- another tenant is refused. Unbound: the specs as they are.
create or replace function jobs.tenant_specs(p_specs jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
  v_ord    bigint;
begin
  if v_tenant is null or pg_catalog.jsonb_typeof(p_specs) is distinct from 'array' then
    return p_specs;
  end if;
  v_ord := jobs.foreign_tenant_spec(p_specs, v_tenant);
  if v_ord is not null then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('spec %s: tenant %s is not %s, to which this session is bound', v_ord,
                        p_specs -> (v_ord - 1)::integer -> 'tenant', v_tenant));
  end if;
  return (select pg_catalog.jsonb_agg(
                   case when pg_catalog.jsonb_typeof(e.spec) = 'object'
                        then e.spec || pg_catalog.jsonb_build_object('tenant', v_tenant)
                        else e.spec end
                   order by e.ord)
            from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord));
end
$$;

-- jobs.tenant_filter(filter) -> an operator or listing filter narrowed to the bound
-- tenant; one naming another tenant is refused. Unbound: the filter as it is.
create or replace function jobs.tenant_filter(p_filter jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
begin
  if v_tenant is null or pg_catalog.jsonb_typeof(p_filter) is distinct from 'object' then
    return p_filter;
  end if;
  if p_filter->'tenant' is not null
     and p_filter->'tenant' not in (pg_catalog.to_jsonb(v_tenant),
                                    pg_catalog.jsonb_build_array(v_tenant)) then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('filter.tenant %s is not %s, to which this session is bound',
                        p_filter->'tenant', v_tenant));
  end if;
  return p_filter || pg_catalog.jsonb_build_object('tenant', v_tenant);
end
$$;

-- ---------------------------------------------------------------------------
-- Bindings: kept by the schema owner or an unbound operator.
-- ---------------------------------------------------------------------------
-- jobs.tenant_bind(role, tenant) -> true when created, false when changed.
create or replace function jobs.tenant_bind(p_role text, p_tenant text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_created boolean;
begin
  perform jobs.fleet_only('jobs.tenant_bind');
  if p_role is null or not exists (select from pg_catalog.pg_roles r where r.rolname = p_role) then
    perform jobs.raise_error('invalid_argument', pg_catalog.format('no role is named %s', p_role));
  end if;
  perform jobs.check_name(p_tenant, 'tenant');  -- (the bound of a job's tenant)
  if (select r.rolsuper from pg_catalog.pg_roles r where r.rolname = p_role) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('role %s is a superuser: a superuser is never bound', p_role));
  end if;
  insert into jobs.tenant_binding as b (role_name, tenant, updated_at)
  values (p_role, p_tenant, jobs.now())
  on conflict (role_name) do update set tenant = excluded.tenant, updated_at = excluded.updated_at
  returning (b.xmax::text = '0') into v_created;
  return v_created;
end
$$;

comment on function jobs.tenant_bind(text, text) is
  'Bind a role (and the login roles that are its members) to one tenant; true when created.';

-- jobs.tenant_unbind(role) -> true when a binding was removed.
create or replace function jobs.tenant_unbind(p_role text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.tenant_unbind');
  delete from jobs.tenant_binding b where b.role_name = p_role;
  return found;
end
$$;

comment on function jobs.tenant_unbind(text) is 'Remove a role''s tenant binding; true when there was one.';

create or replace function jobs.tenant_bindings()
returns table (role_name text, tenant text, updated_at timestamptz)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.tenant_bindings');
  return query select b.role_name, b.tenant, b.updated_at from jobs.tenant_binding b
                order by b.role_name;
end
$$;

comment on function jobs.tenant_bindings() is 'Every role bound to a tenant.';

-- === sql/20_enqueue.sql ===

-- ---------------------------------------------------------------------------
-- jobs.define_spec(): derive the job spec from jobs.job. (Re)creates
--   jobs.job_spec         the spec's fields as a record type
--   jobs.spec_fields()    {field: type} of every spec field (and delay_s, on_conflict)
--   jobs.spec_defaults()  {field: default} from the columns' DEFAULTs
--   jobs.spec_problem_of() the validation of one spec: each rule once, the type rules
--                         read off the columns' types
--   jobs.insert_jobs()    the one insert of jobs that enqueue, enqueue_many, stage's
--                         relay and every other path share
-- from the catalog, so a column added to jobs.job is a spec field with its default
-- everywhere at once. Runs at install, and again in any revision that changes jobs.job.
-- The engine's own columns, which no caller sets, are named here.
-- ---------------------------------------------------------------------------
create or replace function jobs.define_spec()
returns void
language plpgsql
volatile
set search_path = ''
as $define$
declare
  v_engine   text[] := array['id', 'state', 'attempt', 'claim', 'lease_expires_at', 'worker',
                             'progress', 'last_error', 'result', 'created_at', 'started_at',
                             'finished_at', 'first_started_at', 'step_seq', 'compensable',
                             'compensating', 'parent_id', 'parent_step', 'settle_watched',
                             'slots', 'blocked_on', 'deferred_by', 'attempts'];
  -- the fields that only steer an enqueue (not columns)
  v_steering jsonb := '{"delay_s": "double precision", "on_conflict": "text"}';
  v_fields   jsonb := '{}';
  v_defaults jsonb := '{}';
  v_columns  text[] := '{}';  -- spec columns the insert names (run_at is computed)
  v_order    text[];          -- the record's fields: steering ones, then columns in order
  v_checks   text := '';      -- one WHEN per field: a value not of its column's JSON type
  v_values   text;            -- the value rules
  v_given    text;            -- a spec without the fields it gives as JSON null
  v_base     text;            -- the spec's fields with their defaults, before it gives any
  v_known    text;            -- the fields' names
  v_col      record;
  v_default  jsonb;
  v_wrong    text;
  v_want     text;
begin
  -- FIELDS and DEFAULTS, from the columns of jobs.job
  v_order := array(select k from pg_catalog.jsonb_object_keys(v_steering) k order by k);
  for v_col in
    select a.attname::text as name, pg_catalog.format_type(a.atttypid, a.atttypmod) as type,
           pg_catalog.pg_get_expr(d.adbin, d.adrelid) as default_expr
      from pg_catalog.pg_attribute a
      left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
     where a.attrelid = 'jobs.job'::pg_catalog.regclass and a.attnum > 0
       and not a.attisdropped and a.attname <> all (v_engine)
     order by a.attnum
  loop
    v_fields := v_fields || pg_catalog.jsonb_build_object(v_col.name, v_col.type);
    v_order := v_order || v_col.name;
    if v_col.default_expr is not null then
      -- a constant the catalog wrote itself (e.g. 'default'::text, 25, '{}'::jsonb)
      execute 'select pg_catalog.to_jsonb(' || v_col.default_expr || ')' into v_default;
      v_defaults := v_defaults || pg_catalog.jsonb_build_object(v_col.name, v_default);
    end if;
    if v_col.name <> 'run_at' then
      v_columns := v_columns || v_col.name;
    end if;
  end loop;
  v_fields := v_fields || v_steering;

  -- TYPES: what a JSON value of each column type must be (null always is: the field
  -- then takes its default). One WHEN per field, in jsonb key order, so the first
  -- wrong field named is the first in the spec as jsonb stores it.
  for v_col in
    select f.key as name, f.value #>> '{}' as type, pg_catalog.quote_literal(f.key) as lit
      from pg_catalog.jsonb_each(v_fields) f
     order by pg_catalog.octet_length(f.key), f.key
  loop
    v_wrong := case v_col.type
      when 'jsonb' then null
      when 'text' then 'when ''string'' then false'
      when 'boolean' then 'when ''boolean'' then false'
      when 'double precision' then 'when ''number'' then @ ({spec}->{field})::numeric > 1e308'
      when 'smallint' then 'when ''number'' then ({spec}->{field})::numeric % 1 <> 0 '
                           'or ({spec}->{field})::numeric not between -32768 and 32767'
      when 'integer' then 'when ''number'' then ({spec}->{field})::numeric % 1 <> 0 '
                          'or ({spec}->{field})::numeric not between -2147483648 and 2147483647'
      when 'timestamp with time zone' then 'when ''string'' then not jobs.is_time({spec}->>{field})'
    end;
    v_want := case v_col.type
      when 'text' then 'a string'
      when 'boolean' then 'true or false'
      when 'double precision' then 'a number'
      when 'smallint' then 'a whole number between -32768 and 32767'
      when 'integer' then 'a whole number between -2147483648 and 2147483647'
      when 'timestamp with time zone' then 'a time (ISO 8601, e.g. 2030-01-02T03:04:05Z)'
    end;
    if v_col.type <> 'jsonb' and v_wrong is null then
      raise exception 'jobs.define_spec: no JSON rule for column type % (field %)',
        v_col.type, v_col.name;
    end if;
    if v_wrong is not null then
      v_checks := v_checks || pg_catalog.format(
        E'\n        when case pg_catalog.jsonb_typeof({spec}->%1$s) when ''null'' then false %2$s'
        || E'\n                  else {spec} ? %1$s end then %3$L',
        v_col.lit, pg_catalog.replace(v_wrong, '{field}', v_col.lit),
        pg_catalog.format('%L must be %s', v_col.name, v_want));
    end if;
  end loop;

  -- jobs.job_spec: a spec's fields as one record (narrow, so reading a spec is cheap).
  -- Fields are added, never dropped or changed: a column of jobs.job is never either.
  -- A column added to jobs.job comes last, so does its field here: an upgraded type
  -- and a fresh one list the same fields in the same order.
  if pg_catalog.to_regtype('jobs.job_spec') is null then
    execute 'create type jobs.job_spec as (' ||
            (select pg_catalog.string_agg(pg_catalog.format('%I %s', f.name, v_fields->>f.name),
                                          ', ' order by f.ord)
               from pg_catalog.unnest(v_order) with ordinality as f(name, ord)) || ')';
  else
    for v_col in
      select f.name, v_fields->>f.name as type
        from pg_catalog.unnest(v_order) with ordinality as f(name, ord)
       where not exists (select from pg_catalog.pg_attribute a
                          where a.attrelid = 'jobs.job_spec'::pg_catalog.regclass
                            and a.attname = f.name and not a.attisdropped)
       order by f.ord
    loop
      execute pg_catalog.format('alter type jobs.job_spec add attribute %I %s',
                                v_col.name, v_col.type);
    end loop;
  end if;
  comment on type jobs.job_spec is
    'Private: the fields of a job spec (made by jobs.define_spec() from jobs.job).';

  execute pg_catalog.format($f$
    create or replace function jobs.spec_fields()
    returns jsonb language sql immutable set search_path = ''
    as $b$ select %L::jsonb $b$ $f$, v_fields);
  comment on function jobs.spec_fields() is
    'The job spec''s fields and their types (made by jobs.define_spec()).';
  execute pg_catalog.format($f$
    create or replace function jobs.spec_defaults()
    returns jsonb language sql immutable set search_path = ''
    as $b$ select %L::jsonb $b$ $f$, v_defaults);
  comment on function jobs.spec_defaults() is
    'The job spec''s defaults (made by jobs.define_spec() from the DEFAULTs of jobs.job).';

  -- The validation of one spec, written once here as two pieces of SQL over {spec} (the
  -- spec) and {r} (its fields with their defaults), then used by jobs.spec_problem_of
  -- (one spec: simple expressions, no query) and jobs.spec_problem (a batch: one query).
  v_values := $rules$case
        when {r}.name is null or {r}.name = '' then 'name is required'
        when {r}.key is null or {r}.key = '' then 'key is required (the idempotency key)'
        -- a payload is what a handler takes as keyword arguments (null or absent: {})
        when pg_catalog.jsonb_typeof({r}.payload) <> 'object' then 'payload must be a JSON object'
        -- BOUNDS (docs/reference/sql.md, "Limits"): no value a caller may pass breaks an
        -- index, a fleet-wide read or a later settle of the job
        when pg_catalog.octet_length({r}.name) > 200 then 'name must be at most 200 bytes'
        when pg_catalog.octet_length({r}.key) > 1000 then 'key must be at most 1000 bytes'
        when pg_catalog.octet_length({r}.queue) > 200 then 'queue must be at most 200 bytes'
        when pg_catalog.octet_length({r}.tenant) > 200 then 'tenant must be at most 200 bytes'
        when pg_catalog.octet_length({r}.group_key) > 1000 then 'group_key must be at most 1000 bytes'
        when pg_catalog.octet_length({r}.traceparent) > 256 then 'traceparent must be at most 256 bytes'
        when {r}.payload @? jobs.too_deep() then 'payload must be nested less than 100 levels deep'
        when {r}.run_at not between '1970-01-01 00:00:00+00' and '2200-01-01 00:00:00+00'
          then 'run_at must be between 1970-01-01 and 2200-01-01'
        when {r}.delay_s > 3.2e9 then 'delay_s must be at most 3.2e9 seconds (a century)'
        when {r}.timeout_s > 1e9 then 'timeout_s must be at most 1e9 seconds'
        when {r}.retry_base_s > 1e9 then 'retry_base_s must be at most 1e9 seconds'
        when {r}.retry_cap_s > 1e9 then 'retry_cap_s must be at most 1e9 seconds'
        when {r}.debounce_s > 1e9 then 'debounce_s must be at most 1e9 seconds'
        when {r}.throttle_per_s > 1e9 then 'throttle_per_s must be at most 1e9 seconds'
        when {r}.queue = '' then 'queue must not be empty'
        when {r}.max_attempts < 1 then 'max_attempts must be at least 1'
        when {r}.retry_base_s <= 0 then 'retry_base_s must be positive'
        when {r}.retry_cap_s < {r}.retry_base_s then 'retry_cap_s must be at least retry_base_s'
        when {r}.retry_jitter not in ('none', 'full', 'equal')
          then 'retry_jitter must be none, full or equal'
        when {r}.timeout_s <= 0 then 'timeout_s must be positive'
        when {r}.delay_s < 0 then 'delay_s must not be negative'
        when {r}.delay_s is not null and {r}.run_at is not null
          then 'give run_at or delay_s, not both'
        when {r}.on_conflict not in ('return', 'error') then 'on_conflict must be return or error'
        when {r}.group_key = '' then 'group_key must not be empty'
        when {r}.debounce_s <= 0 then 'debounce_s must be positive'
        when {r}.debounce_s is not null and ({r}.run_at is not null or {r}.delay_s is not null)
          then 'give debounce_s, or run_at / delay_s, not both'
        when ({r}.throttle_n is null) <> ({r}.throttle_per_s is null)
          then 'give throttle_n and throttle_per_s together'
        when {r}.throttle_n < 1 then 'throttle_n must be at least 1'
        when {r}.throttle_per_s <= 0 then 'throttle_per_s must be positive'
      end$rules$;
  v_given := 'case when {spec} @? ''$.* ? (@ == null)'' then jobs.spec_given({spec}) else {spec} end';
  v_base := 'pg_catalog.jsonb_populate_record(null::jobs.job_spec, '
            || pg_catalog.quote_literal(v_defaults) || '::jsonb)';
  v_known := pg_catalog.quote_literal(array(select pg_catalog.jsonb_object_keys(v_fields)))
             || '::text[]';

  -- jobs.spec_problem_of(spec) -> what is wrong with one spec, or null. Reads no table.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
          pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.spec_problem_of(p_spec jsonb)
    returns text
    language plpgsql
    immutable
    set search_path = ''
    as $b$
    declare
      v_problem text;
      v_r       jobs.job_spec;
    begin
      -- SHAPE: an object of known fields, each of its column's JSON type
      if pg_catalog.jsonb_typeof({spec}) is distinct from 'object' then
        return 'must be a JSON object';
      end if;
      if {spec} - {known} <> '{}' then  -- the first unknown field in jsonb key order
        return pg_catalog.format('unknown field %L',
          (select k from pg_catalog.jsonb_object_keys({spec} - {known}) k limit 1));
      end if;
      v_problem := case{checks}
      end;
      if v_problem is not null then
        return v_problem;
      end if;
      -- VALUES: the fields with their defaults, now that every type is right
      v_r := pg_catalog.jsonb_populate_record({base}, {given});
      return {values};
    end
    $b$ $f$, '{values}', v_values), '{given}', v_given), '{base}', v_base), '{checks}', v_checks),
      '{known}', v_known), '{spec}', 'p_spec'), '{r}', 'v_r');
  comment on function jobs.spec_problem_of(jsonb) is
    'What is wrong with one job spec, or null (made by jobs.define_spec() from jobs.job).';

  -- jobs.spec_problem(specs) -> the first thing wrong with a batch of specs, or null:
  -- 'spec N: <problem>' for the first spec that has one, and its first problem.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
          pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.spec_problem(p_specs jsonb)
    returns text
    language plpgsql
    immutable
    set search_path = ''
    -- Generic plans: re-planning this statement on every call cost more than running it.
    set plan_cache_mode = force_generic_plan
    as $b$
    begin
      if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array' then
        return 'specs must be a JSON array of job specs';
      end if;
      if pg_catalog.jsonb_array_length(p_specs) = 1 then
        return 'spec 1: ' || jobs.spec_problem_of(p_specs->0);
      end if;
      return (
        select pg_catalog.format('spec %s: %s', p.ord, p.problem)
          from (select e.ord, case
              when pg_catalog.jsonb_typeof({spec}) <> 'object' then 'must be a JSON object'
              when {spec} - {known} <> '{}' then
                pg_catalog.format('unknown field %L',
                  (select k from pg_catalog.jsonb_object_keys({spec} - {known}) k limit 1)){checks}
              else (select {values}
                      -- (offset 0: the record is made once, not once per field read)
                      from (select pg_catalog.jsonb_populate_record({base}, {given}) as r
                            offset 0) x)
            end as problem
              from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
            offset 0) p
         where p.problem is not null
         order by p.ord
         limit 1);
    end
    $b$ $f$, '{values}', v_values), '{given}', v_given), '{base}', v_base), '{checks}', v_checks),
      '{known}', v_known), '{spec}', 'e.spec'), '{r}', '(x.r)');
  comment on function jobs.spec_problem(jsonb) is
    'The first problem in a jsonb array of job specs, or null when all are valid. Reads no table.';

  -- jobs.insert_jobs(specs, now, ids) -> (ord, id, queue, run_at) per job it created.
  -- Inserts every spec (already checked) as a ready job, in (name, tenant, key) order so
  -- two batches that share keys wait for each other instead of deadlocking; a key that
  -- has a job (or that an earlier spec of the batch takes) is skipped, not answered.
  -- ids: the id of each spec (the relay's staged rows); null: from jobs.job_id_seq.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_jobs(p_specs jsonb, p_now timestamptz,
                                                p_ids bigint[] default null)
    returns table (ord integer, id bigint, queue text, run_at timestamptz)
    language plpgsql volatile set search_path = ''
    -- PL/pgSQL, not SQL: its plan is kept for the session instead of made on every call.
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      v_base jobs.job_spec := pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults});
      v_r    jobs.job_spec;
    begin
      -- ONE SPEC (most calls): one row, without the batch statement's set-up.
      if pg_catalog.jsonb_array_length(p_specs) = 1 then
        v_r := pg_catalog.jsonb_populate_record(v_base,
                 case when p_specs->0 @? '$.* ? (@ == null)' then jobs.spec_given(p_specs->0)
                      else p_specs->0 end);
        insert into jobs.job as j (id, {columns}, run_at, created_at)
        values (coalesce(p_ids[1], pg_catalog.nextval('jobs.job_id_seq')), {values1},
                coalesce(v_r.run_at, p_now + pg_catalog.make_interval(
                  secs => coalesce(v_r.delay_s, v_r.debounce_s, 0))),
                p_now)
        on conflict do nothing  -- the key, or a singleton's or debounced job's group
        returning j.id, j.queue, j.run_at into id, queue, run_at;
        if found then
          ord := 1;
          return next;
        end if;
        return;
      end if;
      -- A BATCH: one statement.
      return query
      with s as materialized (
        select e.ord::integer as ord,
               pg_catalog.jsonb_populate_record(v_base,
                 case when e.spec @? '$.* ? (@ == null)' then jobs.spec_given(e.spec)
                      else e.spec end) as r
          from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
      ), mixed as (
        -- Whether the batch spans several (name, tenant). Usually it does not, and then
        -- key order is (name, tenant, key) order: sorting by key alone is far cheaper.
        select exists (select from s, (select (s1.r).name, (s1.r).tenant from s as s1 limit 1) f
                        where (s.r).name <> f.name
                           or coalesce((s.r).tenant, '') <> coalesce(f.tenant, '')) as yes
      ), sorted as materialized (
        -- in lock order, the ids drawn in that order too
        select o.ord, coalesce(p_ids[o.ord], pg_catalog.nextval('jobs.job_id_seq')) as id, o.r
          from (select s.ord, s.r
                  from s
                 order by case when (select mixed.yes from mixed) then (s.r).name end,
                          case when (select mixed.yes from mixed) then coalesce((s.r).tenant, '') end,
                          (s.r).key, s.ord) o
      ), ins as (
        insert into jobs.job as j (id, {columns}, run_at, created_at)
        select s.id, {values},
               coalesce((s.r).run_at, p_now + pg_catalog.make_interval(
                 secs => coalesce((s.r).delay_s, (s.r).debounce_s, 0))),
               p_now
          from sorted s
        on conflict do nothing  -- the key, or a singleton's or debounced job's group
        returning j.id, j.queue, j.run_at
      )
      select s.ord, ins.id, ins.queue, ins.run_at from ins join sorted s on s.id = ins.id;
    end
    $b$ $f$, '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values}', (select pg_catalog.string_agg('(s.r).' || pg_catalog.quote_ident(c), ', ')
                     from pg_catalog.unnest(v_columns) c)),
      '{values1}', (select pg_catalog.string_agg('v_r.' || pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_jobs(jsonb, timestamp with time zone, bigint[]) is
    'Private: the one insert of jobs (made by jobs.define_spec()).';

  -- jobs.insert_batch(spec, keys, payloads, now) -> (ord, id, queue, run_at) per job it
  -- created: the insert of jobs.insert_jobs for jobs that share one spec (already
  -- checked), each with its own key and payload (null: {}). The shared fields are read
  -- once, not once per job. In key order (one name and tenant), as insert_jobs locks.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_batch(p_spec jsonb, p_keys text[],
                                                 p_payloads jsonb, p_now timestamptz)
    returns table (ord integer, id bigint, queue text, run_at timestamptz)
    language plpgsql volatile set search_path = ''
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      v_r      jobs.job_spec := pg_catalog.jsonb_populate_record(
                  pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults}),
                  jobs.spec_given(p_spec));
      v_run_at timestamptz := coalesce(v_r.run_at, p_now + pg_catalog.make_interval(
                  secs => coalesce(v_r.delay_s, v_r.debounce_s, 0)));
    begin
      return query
      with sorted as materialized (
        -- in lock order, the ids drawn in that order too
        select o.ord, pg_catalog.nextval('jobs.job_id_seq') as id, o.key, o.payload
          from (select k.ord::integer as ord, k.key,
                       coalesce(nullif(p.payload, 'null'), '{}') as payload
                  from pg_catalog.unnest(p_keys) with ordinality as k(key, ord)
                  left join pg_catalog.jsonb_array_elements(p_payloads)
                            with ordinality as p(payload, ord) on p.ord = k.ord
                 order by k.key, k.ord) o
      ), ins as (
        insert into jobs.job as j (id, {columns}, run_at, created_at)
        select s.id, {values}, v_run_at, p_now
          from sorted s
        on conflict do nothing  -- the key, or a singleton's group
        returning j.id, j.queue, j.run_at
      )
      select s.ord, ins.id, ins.queue, ins.run_at from ins join sorted s on s.id = ins.id;
    end
    $b$ $f$, '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values}', (select pg_catalog.string_agg(case c when 'key' then 's.key'
                                                       when 'payload' then 's.payload'
                                                       else 'v_r.' || pg_catalog.quote_ident(c) end,
                                                  ', ')
                     from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_batch(jsonb, text[], jsonb, timestamp with time zone) is
    'Private: the insert of jobs sharing one spec (made by jobs.define_spec()).';
end
$define$;

-- jobs.spec_given(spec): the fields a spec gives, without those given as JSON null
-- (which take their default). Private.
create or replace function jobs.spec_given(p_spec jsonb)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if not p_spec @? '$.* ? (@ == null)' then
    return p_spec;  -- the common case: a spec gives no nulls
  end if;
  return coalesce((select pg_catalog.jsonb_object_agg(f.key, f.value)
                     from pg_catalog.jsonb_each(p_spec) as f
                    where pg_catalog.jsonb_typeof(f.value) <> 'null'), '{}');
end
$$;

-- jobs.is_time(text): whether the text reads as a timestamptz. Private.
create or replace function jobs.is_time(p_text text)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  perform p_text::timestamptz;
  return true;
exception when data_exception then
  return false;
end
$$;

-- jobs.job_of_key(name, tenant, key) -> the id of the job that holds the key, or null.
create or replace function jobs.job_of_key(p_name text, p_tenant text, p_key text)
returns bigint
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
begin
  return (select k.id from jobs.job k
           where k.name = p_name and coalesce(k.tenant, '') = coalesce(p_tenant, '')
             and k.key = p_key
           limit 1);
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.check_specs(specs): raise invalid_argument (SJ001) for the first problem
-- jobs.spec_problem finds, or payload_too_large (SJ002) for the first payload over
-- jobs.max_payload_bytes(). Reads no table; shared by enqueue_many and stage_many.
-- ---------------------------------------------------------------------------
create or replace function jobs.check_specs(p_specs jsonb)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_problem text := jobs.spec_problem(p_specs);
  v_ord     bigint;
  v_max     integer := jobs.max_payload_bytes();
begin
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  if pg_catalog.jsonb_array_length(p_specs) = 1 then  -- one spec: no query
    if pg_catalog.octet_length(p_specs->0->>'payload') > v_max then
      v_ord := 1;
    end if;
  else
    select e.ord into v_ord
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     where pg_catalog.octet_length(e.spec->>'payload') > v_max
     order by e.ord
     limit 1;
  end if;
  if v_ord is not null then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('spec %s: payload is %s bytes; the limit is %s', v_ord,
                        pg_catalog.octet_length(p_specs -> (v_ord - 1)::integer ->> 'payload'), v_max),
      null, 'store large data elsewhere and pass a reference in the payload');
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- Notification payloads (channels jobs_wake and jobs_settled). Any session may LISTEN
-- on any channel, a tenant-bound one too: so a payload names no queue and no job, but is
-- a token, the first 16 hex digits of sha256(jobs.channel_key || what), where `what` is
-- 'queue:<name>' or 'job:<id>'. A worker asks the tokens of its queues once
-- (jobs.wake_tokens), a result waiter the token of its job (jobs.watch_token).
-- ---------------------------------------------------------------------------
create or replace function jobs.channel_token(p_what text)
returns text
language sql
stable
set search_path = ''
as $$
  select pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
           k.key || pg_catalog.convert_to(p_what, 'UTF8')), 'hex'), 16)
    from jobs.channel_key k
$$;

comment on function jobs.channel_token(text) is
  'The notification token of a queue (''queue:<name>'') or a job (''job:<id>'').';

-- jobs.wake_tokens(queues) -> (queue, token) per queue: what jobs_wake carries when a
-- job of that queue becomes runnable (a worker listens for its queues' tokens).
create or replace function jobs.wake_tokens(p_queues text[])
returns table (queue text, token text)
language sql
stable
set search_path = ''
as $$
  select q.name, jobs.channel_token('queue:' || q.name)
    from pg_catalog.unnest(p_queues) with ordinality as q(name, ord)
   order by q.ord
$$;

comment on function jobs.wake_tokens(text[]) is
  'Per queue, the token jobs_wake carries when a job of it becomes runnable.';

-- ---------------------------------------------------------------------------
-- jobs.wake(queues): one pg_notify('jobs_wake', <queue's token>) per queue, unless the
-- session set jobs.notify = off. PostgreSQL delivers them at commit and folds repeats
-- within a transaction, so a transaction wakes each queue once however many calls it
-- makes.
-- ---------------------------------------------------------------------------
create or replace function jobs.wake(p_queues text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue text;
begin
  if coalesce(pg_catalog.current_setting('jobs.notify', true), '') = 'off' then
    return;
  end if;
  foreach v_queue in array coalesce(p_queues, '{}') loop
    perform pg_catalog.pg_notify('jobs_wake', jobs.channel_token('queue:' || v_queue));
  end loop;
end
$$;

comment on function jobs.wake(text[]) is
  'Notify jobs_wake once per queue, with its token (off when the session sets jobs.notify = off).';

-- jobs.job_of_group(spec) -> the job holding the spec's group (name, tenant, group_key):
-- for a singleton spec the live singleton job, for a debounced one the debounced job
-- waiting to start; null when there is none. Private.
create or replace function jobs.job_of_group(p_spec jsonb)
returns bigint
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
begin
  return (select k.id from jobs.job k
           where k.name = p_spec->>'name'
             and coalesce(k.tenant, '') = coalesce(p_spec->>'tenant', '')
             and coalesce(k.group_key, '') = coalesce(p_spec->>'group_key', '')
             and ((k.singleton and (p_spec->>'singleton')::boolean
                   and k.state in ('ready', 'running', 'parked', 'interrupted'))
                  or (k.debounce_s is not null and p_spec->>'debounce_s' is not null
                      and k.state = 'ready'))
           limit 1);
end
$$;

-- jobs.debounce(spec, now) -> the debounced job waiting to start in the spec's group,
-- which now carries the spec's payload and starts debounce_s from now; null when none
-- waits. (Trailing debounce: every enqueue inside the window moves the start.) Private.
create or replace function jobs.debounce(p_spec jsonb, p_now timestamptz)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_id bigint;
begin
  update jobs.job as k
     set payload = coalesce(nullif(p_spec->'payload', 'null'), '{}'),
         run_at = p_now + pg_catalog.make_interval(secs => (p_spec->>'debounce_s')::double precision)
   where k.name = p_spec->>'name'
     and coalesce(k.tenant, '') = coalesce(p_spec->>'tenant', '')
     and coalesce(k.group_key, '') = coalesce(p_spec->>'group_key', '')
     and k.debounce_s is not null and k.state = 'ready'
  returning k.id into v_id;
  return v_id;
end
$$;

-- jobs.refuse_duplicate(ord, id, key): raise duplicate_job (SJ003) for spec `ord`, whose
-- key already has job `id`; nothing when id is null. Private.
create or replace function jobs.refuse_duplicate(p_ord bigint, p_id bigint, p_key text)
returns void
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_id is not null then
    perform jobs.raise_error('duplicate_job',
      pg_catalog.format('spec %s: job %s already exists for key %s', p_ord, p_id,
                        pg_catalog.quote_literal(p_key)));
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.enqueue_many(specs jsonb) -> (ord, id, outcome), one row per spec, in input order.
--
-- Contract:
--   * Refuses the whole call before the first write when any spec is invalid
--     (invalid_argument SJ001, payload_too_large SJ002) or when a spec with
--     on_conflict = 'error' meets an existing key, or a key an earlier spec of the
--     same batch takes (duplicate_job SJ003).
--   * Inserts every new job as ready in one statement (jobs.insert_jobs); a key already
--     present (also a key repeated inside the batch) answers the existing job with
--     outcome 'deduped'; so does a singleton spec whose group has a live singleton job.
--     A debounced spec whose group has a debounced job waiting to start collapses into
--     it (its payload, start now + debounce_s) with outcome 'debounced'.
--   * Notifies 'jobs_wake' once per queue that received a job runnable now.
-- Locks: inserts rows in (name, tenant, key) order, so two batches that share keys
--   wait for each other instead of deadlocking.
-- Clients send at most 1,000 specs per call (one statement per chunk).
-- Answers: the insert answers the specs it created; only the other specs probe the key
--   index, in a later statement, so a key a concurrent transaction committed meanwhile
--   is seen.
-- ---------------------------------------------------------------------------
create or replace function jobs.enqueue_many(p_specs jsonb)
returns table (ord integer, id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
-- Generic plans: re-planning these statements on every call cost more than running them.
set plan_cache_mode = force_generic_plan
as $$
declare
  v_now      timestamptz := jobs.now();
  v_dup      text;
  v_strict   boolean;
  v_ids      bigint[];   -- per spec, in input order: the job that answers it
  v_created  boolean[];  -- per spec: whether it created that job
  v_wake     text[];
  v_spec     jsonb;
  v_id       bigint;
  v_queue    text;
  v_run_at   timestamptz;
  v_try      integer;
begin
  -- GUARD: every refusal happens here, before the first write.
  perform jobs.check_specs(p_specs);
  p_specs := jobs.tenant_specs(p_specs);  -- a tenant-bound session's tenant (sql/15_tenancy.sql)

  -- Throttled jobs: make the claim enforce their rates (sql/35_limits.sql).
  if p_specs @? '$[*].throttle_n ? (@ != null)' then
    insert into jobs.limit (name, scope, updated_at)
    values ('sqljobs.throttle', 'throttle', v_now)
    on conflict (name) do nothing;
  end if;

  -- ONE SPEC (jobs.enqueue, most client calls): the same steps for one row, without the
  -- batch statements' set-up.
  if pg_catalog.jsonb_array_length(p_specs) = 1 then
    v_spec := p_specs->0;
    v_strict := v_spec->>'on_conflict' = 'error';
    if v_strict then
      perform jobs.refuse_duplicate(1, jobs.job_of_key(v_spec->>'name', v_spec->>'tenant',
                                                       v_spec->>'key'), v_spec->>'key');
    end if;
    ord := 1;
    -- (a job of a debounced or singleton group that starts or ends meanwhile frees the
    -- group: then try again)
    for v_try in 1..3 loop
      if v_spec->>'debounce_s' is not null then
        id := jobs.debounce(v_spec, v_now);
        if id is not null then
          outcome := 'debounced';
          return next;
          return;
        end if;
      end if;
      select c.id, c.queue, c.run_at into v_id, v_queue, v_run_at
        from jobs.insert_jobs(p_specs, v_now) c;
      if v_id is not null then
        if v_run_at <= v_now then
          perform jobs.wake(array[v_queue]);  -- WAKE: runnable now
        end if;
        id := v_id;
        outcome := 'created';
        return next;
        return;
      end if;
      -- The key has a job: an existing one, or one a concurrent transaction committed
      -- first (this later statement sees it). Or its group has a live singleton.
      id := jobs.job_of_key(v_spec->>'name', v_spec->>'tenant', v_spec->>'key');
      if v_strict then
        perform jobs.refuse_duplicate(1, id, v_spec->>'key');
      end if;
      id := coalesce(id, case when v_spec->>'debounce_s' is null then jobs.job_of_group(v_spec) end);
      if id is not null then
        outcome := 'deduped';
        return next;
        return;
      end if;
    end loop;
    perform jobs.raise_error('invalid_argument',
      'spec 1: its group changed under three tries in a row; enqueue it again');
  end if;

  -- A BATCH with debounced specs: one at a time (each may collapse into a waiting job).
  if p_specs @? '$[*].debounce_s ? (@ != null)' then
    return query
      select e.ord::integer, m.id, m.outcome
        from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
       cross join lateral jobs.enqueue_many(pg_catalog.jsonb_build_array(e.spec)) m
       order by e.ord;
    return;
  end if;

  -- A BATCH
  v_strict := p_specs @? '$[*] ? (@.on_conflict == "error")';
  if v_strict then
    perform jobs.refuse_duplicate(e.ord, e.id, e.key)
       from (select e.ord, e.spec->>'key' as key,
                    jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key') as id
               from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
              where e.spec->>'on_conflict' = 'error') e
      where e.id is not null
      order by e.ord
      limit 1;
    -- A strict spec whose key an earlier spec of the same batch already takes.
    select pg_catalog.format('spec %s: key %s is already taken by spec %s of this batch',
                             e.ord, pg_catalog.quote_literal(e.spec->>'key'), f.ord)
      into v_dup
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
      cross join lateral (
        select p.ord
          from pg_catalog.jsonb_array_elements(p_specs) with ordinality as p(spec, ord)
         where p.ord < e.ord and p.spec->>'name' = e.spec->>'name'
           and p.spec->>'key' = e.spec->>'key'
           and coalesce(p.spec->>'tenant', '') = coalesce(e.spec->>'tenant', '')
         limit 1) as f
     where e.spec->>'on_conflict' = 'error'
     order by e.ord
     limit 1;
    if v_dup is not null then
      perform jobs.raise_error('duplicate_job', v_dup);
    end if;
  end if;

  -- WRITE: one insert for the whole batch. A key repeated in the batch is created by
  -- its first spec; the repeats answer that job as deduped.
  with created as (select c.ord, c.id, c.queue, c.run_at from jobs.insert_jobs(p_specs, v_now) c)
  select pg_catalog.array_agg(c.id order by u.ord),
         pg_catalog.array_agg(c.id is not null order by u.ord),
         (select pg_catalog.array_agg(distinct w.queue) from created w where w.run_at <= v_now)
    into v_ids, v_created, v_wake
    from pg_catalog.generate_series(1, pg_catalog.jsonb_array_length(p_specs)) as u(ord)
    left join created c on c.ord = u.ord;

  -- Specs the insert did not take: their key had a job already, or a concurrent
  -- transaction committed one first. This later statement sees it: answer that job.
  if pg_catalog.array_position(v_created, false) is not null then
    v_ids := array(
      select coalesce(e.id, jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key'),
                      jobs.job_of_group(e.spec))
        from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids))
             with ordinality as e(spec, id, ord)
       order by e.ord);
    -- A key that met a concurrent insert after the guard: still refuse when asked to.
    if v_strict then
      perform jobs.refuse_duplicate(e.ord, e.id, e.spec->>'key')
         from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids),
                         pg_catalog.unnest(v_created)) with ordinality as e(spec, id, created, ord)
        where e.spec->>'on_conflict' = 'error' and not e.created and e.id is not null
        order by e.ord
        limit 1;
    end if;
  end if;

  -- WAKE: once per queue.
  perform jobs.wake(v_wake);

  -- ANSWER: one row per spec, in input order.
  return query
    select u.ord::integer, u.id, case when u.created then 'created' else 'deduped' end
      from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_created))
           with ordinality as u(id, created, ord)
     order by u.ord;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.enqueue_batch(spec, keys, payloads) -> (ord, id, outcome), one row per key, in
-- input order.
--
-- Jobs that share one spec: `spec` holds every field but key and payload (name, queue,
-- retry policy, ...), `keys` the jobs' keys and `payloads` (a jsonb array, or null) their
-- payloads, one per key. It is jobs.enqueue_many over the specs `spec + {key, payload}`:
-- the same refusals (spec N: ...), answers, locks and wake-up. The shared fields are
-- read and checked once, not once per job, which is most of enqueue_many's cost; a
-- batch the shared path does not take (a debounced or strict or throttled spec, a
-- tenant-bound session, any key or payload enqueue_many would refuse) goes through
-- jobs.enqueue_many itself. What client libraries send for a batch of one job type.
-- ---------------------------------------------------------------------------
create or replace function jobs.enqueue_batch(
  p_spec     jsonb,
  p_keys     text[],
  p_payloads jsonb default null
)
returns table (ord integer, id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  v_now     timestamptz := jobs.now();
  v_n       integer := coalesce(pg_catalog.cardinality(p_keys), 0);
  v_max     integer := jobs.max_payload_bytes();
  v_ids     bigint[];
  v_created boolean[];
  v_wake    text[];
begin
  -- GUARD: the shapes of the three arguments
  if p_spec is null or pg_catalog.jsonb_typeof(p_spec) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'spec must be a JSON object');
  end if;
  if p_spec ?| array['key', 'payload'] then
    perform jobs.raise_error('invalid_argument',
      'spec must not carry key or payload: pass them as keys and payloads');
  end if;
  if p_payloads is not null and (pg_catalog.jsonb_typeof(p_payloads) <> 'array'
                                 or pg_catalog.jsonb_array_length(p_payloads) <> v_n) then
    perform jobs.raise_error('invalid_argument',
      'payloads must be a JSON array holding one payload per key (or null)');
  end if;
  if v_n = 0 then
    return;
  end if;

  -- What the shared path does not take goes through enqueue_many, spec by spec, which
  -- refuses or answers it exactly as it would.
  if jobs.spec_problem_of(p_spec || '{"key": "k"}') is not null
     or p_spec->>'debounce_s' is not null or p_spec->>'on_conflict' = 'error'
     or p_spec->>'throttle_n' is not null or jobs.bound_tenant() is not null
     or pg_catalog.array_position(p_keys, null) is not null or '' = any (p_keys)
     or exists (select from pg_catalog.unnest(p_keys) k where pg_catalog.octet_length(k) > 1000)
     or (p_payloads is not null and exists (
           select from pg_catalog.jsonb_array_elements(p_payloads) as p(payload)
            where pg_catalog.jsonb_typeof(p.payload) not in ('object', 'null')
               or pg_catalog.octet_length(p.payload::text) > v_max
               or p.payload @? jobs.too_deep())) then
    return query
      select m.ord, m.id, m.outcome
        from jobs.enqueue_many((
          select pg_catalog.jsonb_agg(
                   p_spec || pg_catalog.jsonb_build_object(
                     'key', k.key, 'payload', coalesce(p_payloads -> (k.ord::integer - 1), '{}'))
                   order by k.ord)
            from pg_catalog.unnest(p_keys) with ordinality as k(key, ord))) m;
    return;
  end if;

  -- WRITE: one insert for the whole batch (a key repeated in it: its first spec).
  with created as (
    select c.ord, c.id, c.queue, c.run_at from jobs.insert_batch(p_spec, p_keys, p_payloads, v_now) c)
  select pg_catalog.array_agg(c.id order by u.ord),
         pg_catalog.array_agg(c.id is not null order by u.ord),
         (select pg_catalog.array_agg(distinct w.queue) from created w where w.run_at <= v_now)
    into v_ids, v_created, v_wake
    from pg_catalog.generate_series(1, v_n) as u(ord)
    left join created c on c.ord = u.ord;

  -- Keys the insert did not take: answer the job that holds each (or its singleton's).
  if pg_catalog.array_position(v_created, false) is not null then
    v_ids := array(
      select coalesce(e.id, jobs.job_of_key(p_spec->>'name', p_spec->>'tenant', e.key),
                      jobs.job_of_group(p_spec))
        from rows from (pg_catalog.unnest(p_keys), pg_catalog.unnest(v_ids))
             with ordinality as e(key, id, ord)
       order by e.ord);
  end if;

  perform jobs.wake(v_wake);

  return query
    select u.ord::integer, u.id, case when u.created then 'created' else 'deduped' end
      from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_created))
           with ordinality as u(id, created, ord)
     order by u.ord;
end
$$;

comment on function jobs.enqueue_batch(jsonb, text[], jsonb) is
  'Enqueue jobs sharing one spec, a key and a payload each: enqueue_many over those specs, the shared fields read once.';

-- ---------------------------------------------------------------------------
-- jobs.one_spec(name, key, payload, options) -> a one-spec jsonb array, for the
-- single-job wrappers (enqueue, stage). Refuses options that are not an object or that
-- carry name, key or payload (invalid_argument SJ001).
-- ---------------------------------------------------------------------------
create or replace function jobs.one_spec(
  p_name    text,
  p_key     text,
  p_payload jsonb,
  p_options jsonb
)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'options must be a JSON object');
  end if;
  if p_options ?| array['name', 'key', 'payload'] then
    perform jobs.raise_error('invalid_argument',
      'options must not carry name, key or payload: pass them as arguments');
  end if;
  return pg_catalog.jsonb_build_array(
    p_options || pg_catalog.jsonb_build_object('name', p_name, 'key', p_key,
                                               'payload', coalesce(p_payload, '{}')));
end
$$;

select jobs.define_spec();

-- === sql/30_claim.sql ===

create or replace function jobs.claim(
  p_queues  text[],
  p_worker  text,
  p_limit   integer default 1,
  p_lease_s double precision default 30,
  p_options jsonb default '{}'
)
returns table (
  id               bigint,
  name             text,
  queue            text,
  tenant           text,
  key              text,
  payload          jsonb,
  priority         smallint,
  attempt          integer,
  max_attempts     integer,
  retry_base_s     double precision,  -- the job's retry policy (a step's retry falls back on it)
  retry_cap_s      double precision,
  retry_jitter     text,
  claim            bigint,
  lease_expires_at timestamptz,
  timeout_s        double precision,
  progress         jsonb,
  traceparent      text,
  created_at       timestamptz,
  started_at       timestamptz,  -- this claim's time on the database clock
  steps            jsonb         -- stored durable steps {name: value}; null when none
)
language plpgsql
volatile
set search_path = ''
-- One generic plan per session instead of planning every call (planning was about a
-- third of a small claim). It must stay index-driven whatever the table's size when it
-- is made: seq scans are off for these statements, and the update finds its rows by
-- `id = any(array(...))` on job_pkey, never by joining a scan of jobs.job. With seq
-- scans off, a scan of a small table (jobs.limit) is costed so high that it would be
-- JIT-compiled (hundreds of ms): no JIT, ever, for a claim. No bitmap scans either:
-- jobs.slot churns a row per limited claim, and only a plain index scan marks the
-- entries of deleted rows dead so that the next scan skips them and an insert reuses
-- their space; a bitmap scan reads every dead entry again until a vacuum (counting a
-- group's slots took 1.7 ms after 20,000 limited jobs, 0.03 ms with index scans).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now    timestamptz := jobs.now();
  v_queues text[];
  v_names  text[];
  v_unwind_ids    bigint[];
  v_unwind_seqs   integer[];
  v_unwind_states jobs.job_state[];
  v_unwind_errors jsonb[];
  v_buried        bigint[];  -- watched jobs lease recovery buried: notified
  v_limited boolean;
  v_rooms   integer[];  -- limited: per queue of v_queues, what its concurrency limits leave
  v_ids     bigint[];  -- limited: the candidates
  v_tenant  text := jobs.bound_tenant();  -- a bound session claims its tenant's jobs only
  v_seed    bigint := jobs.random32();     -- the claim tokens' random half
begin
  -- GUARD
  if p_queues is null or pg_catalog.cardinality(p_queues) = 0 then
    perform jobs.raise_error('queues_required', 'claim needs at least one queue',
                             null, 'pass the queues this worker serves');
  end if;
  perform jobs.check_name(p_worker, 'worker');
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('limit must be between 1 and 1000, got %s', p_limit));
  end if;
  -- NaN and leases past the end of time (now + lease overflows) are refused too
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive and at most 1e9 seconds, got %s', p_lease_s));
  end if;
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object'
     or exists (select 1 from pg_catalog.jsonb_object_keys(p_options) k
                 where k not in ('names', 'recover')) then
    perform jobs.raise_error('invalid_argument',
      'options takes only {"names": [...], "recover": true|false}');
  end if;
  if p_options ? 'recover' and pg_catalog.jsonb_typeof(p_options->'recover') <> 'boolean' then
    perform jobs.raise_error('invalid_argument', 'options.recover must be true or false');
  end if;
  if p_options ? 'names' then
    if pg_catalog.jsonb_typeof(p_options->'names') <> 'array' then
      perform jobs.raise_error('invalid_argument', 'options.names must be an array of job names');
    end if;
    v_names := array(select pg_catalog.jsonb_array_elements_text(p_options->'names'));
  end if;

  -- RECOVER lapsed leases: bounded, by job_lease_idx. The attempt counts: where it leads
  -- is jobs.retry_state's answer, except that a job with compensable steps never is
  -- buried: on its final attempt it starts unwinding instead (back to ready,
  -- compensating, its final state recorded), and one already compensating goes back to
  -- ready to finish its unwind (sql/50_steps.sql).
  if coalesce((p_options->>'recover')::boolean, true) then
    with lapsed as (
      select l.id, jobs.retry_state(l.attempt, l.max_attempts, l.dead_letter) as next_state,
             l.settle_watched,
             pg_catalog.jsonb_build_object(
               'kind', 'lease_expired',
               'message', pg_catalog.format('the lease of worker %s expired during attempt %s',
                                            l.worker, l.attempt),
               'attempt', l.attempt,
               'at', v_now) as error
        from jobs.job l
       where l.state = 'running' and l.lease_expires_at < v_now
         and l.queue = any (p_queues)
         and (v_tenant is null or l.tenant = v_tenant)
       order by l.lease_expires_at
       limit 100
         for update skip locked
    ), moved as (
      update jobs.job as j
         set state = case when j.compensable or j.compensating then 'ready'
                          else n.next_state end,
             -- run_at is left as it was: a recovered job keeps its place in line
             -- (priority, run_at, id), ahead of the backlog that queued behind it
             lease_expires_at = null,
             finished_at = case when n.next_state = 'ready' or j.compensable or j.compensating
                                then null else v_now end,
             compensating = j.compensating or (j.compensable and n.next_state <> 'ready'),
             step_seq = j.step_seq + case when j.compensable and not j.compensating
                                               and n.next_state <> 'ready' then 1 else 0 end,
             last_error = n.error,
             -- the attempt history (sql/40_settle.sql): this attempt ended when its
             -- lease lapsed
             attempts = jobs.attempts_push(j.attempts, pg_catalog.jsonb_build_object(
               'attempt', j.attempt, 'claim', j.claim >> 32, 'worker', j.worker,
               'started_at', j.started_at, 'ended_at', j.lease_expires_at,
               'outcome', 'lease_expired', 'error', n.error))
        from lapsed n
       where j.id = n.id
      returning j.id, j.step_seq, n.next_state, j.last_error,
                j.compensable and n.next_state <> 'ready' as starts_unwind,
                -- buried (dead or failed): a result waiter hears of it, as from nack_many
                n.settle_watched and j.finished_at is not null as buried_watched
    )
    select pg_catalog.array_agg(m.id) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.step_seq) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.next_state) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.last_error) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.id) filter (where m.buried_watched)
      into v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors, v_buried
      from moved m
     where m.starts_unwind or m.buried_watched;
    if v_unwind_ids is not null then  -- (a SQL function: planned at every call)
      perform jobs.record_unwinds(v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors);
    end if;
    if v_buried is not null then
      perform jobs.notify_settled(v_buried);
    end if;

    -- Free the slots a waiter did not hear of (sql/35_limits.sql).
    if exists (select from jobs.job b
                where b.blocked_on is not null and b.state in ('ready', 'interrupted')) then
      perform jobs.unblock_free(100);
    end if;

    -- Wake parked jobs whose time came (durable sleeps, wait timeouts).
    update jobs.job as j
       set state = 'ready'
      from (select p.id
              from jobs.job p
             where p.state = 'parked' and p.run_at <= v_now and p.queue = any (p_queues)
               and (v_tenant is null or p.tenant = v_tenant)
             order by p.run_at
             limit 100
               for update skip locked) as due
     where j.id = due.id;
  end if;

  -- PICK: paused queues are left out.
  v_queues := array(
    select q.name
      from pg_catalog.unnest(p_queues) as q(name)
     where not exists (select 1 from jobs.queue pq where pq.name = q.name and pq.paused));

  -- LIMITS (sql/35_limits.sql), only once any limit exists: pick more candidates
  -- than asked for, and claim those jobs.admit lets run (below).
  v_limited := exists (select from jobs.limit);
  if v_limited then
    -- What the concurrency limits leave, per queue: the least room of the global limits
    -- and of its queue's. A full limit leaves nothing to pick, and a nearly full one few
    -- candidates to lock (a worker that claims ahead asks for hundreds). Read without
    -- the limits' locks, this only saves work: jobs.admit decides under them.
    select coalesce(pg_catalog.array_agg(r.name), '{}'), pg_catalog.array_agg(r.room)
      into v_queues, v_rooms
      from (select q.name,
                   least(p_limit, (select pg_catalog.min(l.concurrency - (
                                            select pg_catalog.count(*) from jobs.slot s
                                             where s.grp = l.name || '|'))
                                     from jobs.limit l
                                    where l.concurrency is not null
                                      and (l.scope = 'global'
                                           or (l.scope = 'queue' and l.target = q.name))))
                     as room
              from pg_catalog.unnest(v_queues) as q(name)) r
     where r.room > 0;
    v_ids := array(
      select c.id
        from rows from (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_rooms)) as q(name, room)
        cross join lateral (
          select r.id, r.priority, r.run_at
            from jobs.job r
           where r.state in ('ready', 'interrupted') and r.blocked_on is null
             and r.queue = q.name
             and r.run_at <= v_now
             and (v_names is null or r.name = any (v_names))
             and (v_tenant is null or r.tenant = v_tenant)
           order by r.priority, r.run_at, r.id
           limit q.room + 4
             for update skip locked) as c
       order by c.priority, c.run_at, c.id
       limit p_limit + 4);
  end if;

  -- CLAIM
  return query
    with picked as materialized (
      (select c.id, c.priority, c.run_at, null::text[] as slots, v_now as started_at
         from pg_catalog.unnest(v_queues) as q(name)
         cross join lateral (
           select r.id, r.priority, r.run_at
             from jobs.job r
            where r.state in ('ready', 'interrupted') and r.blocked_on is null
              and r.queue = q.name
              and r.run_at <= v_now
              and (v_names is null or r.name = any (v_names))
              and (v_tenant is null or r.tenant = v_tenant)
            order by r.priority, r.run_at, r.id
            limit p_limit
              for update skip locked) as c
        where not v_limited
        order by c.priority, c.run_at, c.id
        limit p_limit)
      union all
      -- limited: the candidates jobs.admit lets run, with the limit groups each takes
      -- and the admission's time as its start
      (select a.id, r.priority, r.run_at, a.slots, a.at
         from jobs.admit(v_ids, p_limit, v_now) a
         join jobs.job r on r.id = a.id and r.id = any (v_ids)  -- job_pkey, the candidates
        where v_limited)
    ),
    claimed as (
      update jobs.job as j
         set state = 'running',
             attempt = j.attempt + 1,
             -- the new token (sql/00_schema.sql): one strong random value per claim,
             -- spread over its jobs by a multiplicative hash of each id
             claim = (((j.claim >> 32) + 1) << 32)
                     | ((v_seed # ((j.id & 2147483647) * 2654435761)) & 4294967295),
             worker = p_worker,
             lease_expires_at = v_now + pg_catalog.make_interval(secs => p_lease_s),
             started_at = picked.started_at,
             first_started_at = coalesce(j.first_started_at, v_now),
             deferred_by = null,
             slots = picked.slots
        from picked
       where j.id = any (array(select p.id from picked p)) and j.id = picked.id
      returning j.id, j.name, j.queue, j.tenant, j.key, j.payload, j.priority, j.attempt,
                j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.claim,
                j.lease_expires_at, j.timeout_s, j.progress,
                j.traceparent, j.created_at, picked.run_at as picked_run_at, j.step_seq,
                j.started_at
    ),
    slotted as (  -- the limit groups the admitted jobs now hold (sql/35_limits.sql)
      insert into jobs.slot (grp, job_id)
      select g, p.id from picked p cross join lateral pg_catalog.unnest(p.slots) as g
      on conflict do nothing
    )
    select c.id, c.name, c.queue, c.tenant, c.key, c.payload, c.priority, c.attempt,
           c.max_attempts, c.retry_base_s, c.retry_cap_s, c.retry_jitter, c.claim,
           c.lease_expires_at, c.timeout_s, c.progress,
           c.traceparent, c.created_at, c.started_at,
           -- Stored steps (sql/50_steps.sql), read only for jobs that ever wrote one.
           case when c.step_seq > 0 then
             (select pg_catalog.jsonb_object_agg(s.name, s.value)
                from jobs.step s where s.job_id = c.id)
           end
      from claimed c
     order by c.priority, c.picked_run_at, c.id;
end
$$;

-- === sql/35_limits.sql ===

-- jobs.lease_take(name, holder, ttl_s, renew) -> the fencing token, or null while a
-- live lease holds it. Private: what jobs.lease_acquire (an application's lock) and
-- jobs.leader_acquire (the scheduler's leadership) share. A free, released or lapsed
-- lease is taken under a new token (greater than the last, its low 32 bits random:
-- sql/00_schema.sql, "Fencing tokens"), even by the holder it lapsed from; with `renew`,
-- the holder of a live lease renews it under the same token (the leader's habit: its
-- role alone may call it). Locks: the lease row.
create or replace function jobs.lease_take(p_name text, p_holder text, p_ttl_s double precision,
                                           p_renew boolean)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now   timestamptz := jobs.now();
  v_token bigint;
begin
  perform jobs.check_lease_args(p_name, p_holder, p_ttl_s);
  insert into jobs.lease as l (name, holder, token, lease_expires_at, acquired_at)
  values (p_name, p_holder, (1::bigint << 32) | jobs.random32(),
          v_now + pg_catalog.make_interval(secs => p_ttl_s), v_now)
  on conflict (name) do update
     set holder = excluded.holder,
         token = case when l.holder = excluded.holder and l.lease_expires_at > v_now
                      then l.token
                      else (((l.token >> 32) + 1) << 32) | (excluded.token & 4294967295) end,
         acquired_at = case when l.holder = excluded.holder and l.lease_expires_at > v_now
                            then l.acquired_at else excluded.acquired_at end,
         lease_expires_at = excluded.lease_expires_at
   where l.holder is null or l.lease_expires_at <= v_now
      or (p_renew and l.holder = excluded.holder)
  returning l.token into v_token;
  return v_token;
end
$$;

comment on function jobs.lease_take(text, text, double precision, boolean) is
  'Private: take a free or lapsed lease under a new token (with renew: or renew the holder''s live one).';

-- jobs.check_lock_name(name): an application's lock may not be a lease the engine
-- keeps for itself: the scheduler's leadership ('scheduler') and any 'sqljobs.' name.
create or replace function jobs.check_lock_name(p_name text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_name = 'scheduler' or pg_catalog.starts_with(p_name, 'sqljobs.') then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease %s is the engine''s own (the scheduler''s leadership): '
                        'name a lock otherwise', p_name));
  end if;
end
$$;

-- jobs.lease_acquire(name, holder, ttl_s) -> the fencing token, or null while a live
-- lease holds it (this caller's too: a holder renews with jobs.lease_renew and its
-- token, never by its name, which jobs.leases() shows to everyone). A free, released
-- or lapsed lease is taken under a new token. Locks: the lease row.
-- Errors: invalid_argument (SJ001) for an empty name or holder, one of the engine's own
-- names, a ttl that is not positive and finite.
create or replace function jobs.lease_acquire(p_name text, p_holder text, p_ttl_s double precision)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_acquire');  -- (sql/15_tenancy.sql)
  perform jobs.check_lock_name(p_name);
  return jobs.lease_take(p_name, p_holder, p_ttl_s, false);
end
$$;

comment on function jobs.lease_acquire(text, text, double precision) is
  'Take a free or lapsed named lease; answers its new fencing token, or null while a live lease holds it.';

-- jobs.lease_renew(name, holder, token, ttl_s) -> true while the caller still holds the
-- lease under that token (it is extended to now + ttl_s); false, changing nothing, once
-- another holder took it. Errors as lease_acquire.
create or replace function jobs.lease_renew(p_name text, p_holder text, p_token bigint,
                                            p_ttl_s double precision)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_renew');  -- (sql/15_tenancy.sql)
  perform jobs.check_lease_args(p_name, p_holder, p_ttl_s);
  perform jobs.check_lock_name(p_name);
  update jobs.lease as l
     set lease_expires_at = jobs.now() + pg_catalog.make_interval(secs => p_ttl_s)
   where l.name = p_name and l.holder = p_holder and l.token = p_token;
  return found;
end
$$;

comment on function jobs.lease_renew(text, text, bigint, double precision) is
  'Extend a lease the caller holds under its token; false once another holder took it.';

-- jobs.lease_give_up(name, holder, token) -> true when released. Private: what
-- jobs.lease_release and jobs.leader_release share. Fenced on holder and token: a
-- deposed holder releases nothing. The token is kept, so the next is higher.
create or replace function jobs.lease_give_up(p_name text, p_holder text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  update jobs.lease as l
     set holder = null, lease_expires_at = null
   where l.name = p_name and l.holder = p_holder and l.token = p_token;
  return found;
end
$$;

-- jobs.lease_release(name, holder, token) -> true when released (jobs.lease_give_up).
create or replace function jobs.lease_release(p_name text, p_holder text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_release');  -- (sql/15_tenancy.sql)
  perform jobs.check_lock_name(p_name);
  return jobs.lease_give_up(p_name, p_holder, p_token);
end
$$;

comment on function jobs.lease_release(text, text, bigint) is
  'Give up a lease (fenced on holder and token).';

-- jobs.lease_holds(name, token) -> true while `token` is the token of the live lease
-- `name`. It locks the lease row FOR SHARE to the end of the caller's transaction, so a
-- takeover waits for that transaction: a write in this database guarded by it
-- (`update ... where jobs.lease_holds('name', $token)`) never lands after the lease
-- moved on. (A resource elsewhere keeps the highest token it has seen and refuses lower.)
create or replace function jobs.lease_holds(p_name text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_holds');  -- (sql/15_tenancy.sql)
  perform jobs.check_lock_name(p_name);
  return coalesce((select l.holder is not null and l.lease_expires_at > jobs.now()
                          and l.token = p_token
                     from jobs.lease l
                    where l.name = p_name
                      for share), false);
end
$$;

comment on function jobs.lease_holds(text, bigint) is
  'True while the token holds the live lease; locks it for share so a fenced write commits first.';

-- jobs.leases() -> every lease: name, holder, lease_expires_at, acquired_at, live. Not
-- its token: the proof of holding it is its holder's alone (sql/00_schema.sql).
create or replace function jobs.leases()
returns table (name text, holder text, lease_expires_at timestamptz,
               acquired_at timestamptz, live boolean)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.leases');  -- (sql/15_tenancy.sql)
  select l.name, l.holder, l.lease_expires_at, l.acquired_at,
         l.holder is not null and l.lease_expires_at > jobs.now()
    from jobs.lease l
   order by l.name
$$;

comment on function jobs.leases() is 'Named leases and whether each is live.';

-- Shared guard of the lease functions.
create or replace function jobs.check_lease_args(p_name text, p_holder text,
                                                 p_ttl_s double precision)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_name is null or p_name = '' or pg_catalog.octet_length(p_name) > 200
     or p_holder is null or p_holder = '' or pg_catalog.octet_length(p_holder) > 200 then
    perform jobs.raise_error('invalid_argument',
      'a lease needs a name and a holder, each of at most 200 bytes');
  end if;
  -- bounded (about 31 years): now + ttl must stay a timestamp (NaN is refused too)
  if p_ttl_s is null or not (p_ttl_s > 0 and p_ttl_s <= 1e9) then
    perform jobs.raise_error('invalid_argument', 'ttl_s must be positive and at most 1e9 seconds');
  end if;
end
$$;

-- jobs.limit_problem(name, definition) -> what is wrong with a limit definition, or null.
create or replace function jobs.limit_problem(p_name text, p_def jsonb)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_scope text := p_def->>'scope';
begin
  if p_name is null or p_name = '' or pg_catalog.length(p_name) > 200 or p_name like '%|%' then
    return 'a limit name is 1 to 200 characters, without |';
  end if;
  if p_name like 'sqljobs.%' then
    return 'limit names starting with sqljobs. are the engine''s own';
  end if;
  if p_def is null or pg_catalog.jsonb_typeof(p_def) <> 'object' then
    return 'a limit is a JSON object';
  end if;
  if p_def - array['scope', 'target', 'key', 'concurrency', 'rate', 'when_busy', 'origin'] <> '{}' then
    return pg_catalog.format('unknown field %L (a limit takes scope, target, key, concurrency, '
                             'rate, when_busy, origin)',
      (select k from pg_catalog.jsonb_object_keys(
         p_def - array['scope', 'target', 'key', 'concurrency', 'rate', 'when_busy', 'origin']) k
        limit 1));
  end if;
  if v_scope is null or v_scope not in ('global', 'queue', 'name', 'tenant', 'key') then
    return 'scope must be global, queue, name, tenant or key';
  end if;
  if pg_catalog.jsonb_typeof(p_def->'target') not in ('string', 'null') or p_def->>'target' = '' then
    return 'target must be a non-empty string';
  end if;
  if v_scope in ('queue', 'name', 'key') and p_def->>'target' is null then
    return pg_catalog.format('a %s limit needs a target (the %s)', v_scope,
                             case v_scope when 'queue' then 'queue' else 'job name' end);
  end if;
  if v_scope = 'global' and p_def->>'target' is not null then
    return 'a global limit takes no target';
  end if;
  if (v_scope = 'key') <> (p_def ? 'key') then
    return 'a key limit, and only it, needs key: the payload field (a name, or a path as a list of names)';
  end if;
  if v_scope = 'key' and not (
       (pg_catalog.jsonb_typeof(p_def->'key') = 'string' and p_def->>'key' <> '')
       or (pg_catalog.jsonb_typeof(p_def->'key') = 'array'
           and pg_catalog.jsonb_array_length(p_def->'key') between 1 and 10
           and not p_def->'key' @? '$[*] ? (@.type() != "string" || @ == "")')) then
    return 'key must be a payload field name, or a path as a list of names';
  end if;
  if not (p_def ? 'concurrency' or p_def ? 'rate') then
    return 'a limit needs concurrency, rate, or both';
  end if;
  if p_def ? 'concurrency' and not (pg_catalog.jsonb_typeof(p_def->'concurrency') = 'number'
       and (p_def->'concurrency')::numeric % 1 = 0
       and (p_def->'concurrency')::numeric between 1 and 1000000) then
    return 'concurrency must be a whole number from 1 to 1000000';
  end if;
  if p_def ? 'rate' and not (pg_catalog.jsonb_typeof(p_def->'rate') = 'object'
       and (p_def->'rate') - array['n', 'per_s'] = '{}'
       and pg_catalog.jsonb_typeof(p_def->'rate'->'n') = 'number'
       and (p_def->'rate'->'n')::numeric % 1 = 0
       and (p_def->'rate'->'n')::numeric between 1 and 100000
       and pg_catalog.jsonb_typeof(p_def->'rate'->'per_s') = 'number'
       and (p_def->'rate'->'per_s')::numeric > 0
       and (p_def->'rate'->'per_s')::numeric <= 31536000) then
    return 'rate must be {"n": starts (1 to 100000), "per_s": seconds (more than 0, at most a year)}';
  end if;
  if p_def ? 'when_busy' and (p_def->>'when_busy' is null
                              or p_def->>'when_busy' not in ('wait', 'fail')) then
    return 'when_busy must be wait or fail';
  end if;
  if p_def->>'when_busy' = 'fail' and (v_scope <> 'key' or not p_def ? 'concurrency') then
    return 'when_busy fail is for a key limit with concurrency';
  end if;
  if p_def ? 'origin' and (p_def->>'origin' is null or p_def->>'origin' not in ('declared', 'api')) then
    return 'origin must be declared or api';
  end if;
  return null;
end
$$;

-- jobs.limit_put(name, definition) -> true when the limit is new (else it is replaced).
-- definition: {"scope": "global" | "queue" | "name" | "tenant" | "key",
--              "target": the queue / job name / tenant (tenant: omit for each tenant),
--              "key": the payload field (key scope), "concurrency": N,
--              "rate": {"n": N, "per_s": seconds}, "when_busy": "wait" | "fail"}.
-- A lowered concurrency applies from the next claim (running jobs run to their end);
-- a raised one frees waiting jobs at the next recovering claim.
-- Errors: invalid_argument (SJ001) with what is wrong; nothing is written.
create or replace function jobs.limit_put(p_name text, p_def jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_problem text := jobs.limit_problem(p_name, p_def);
  v_new     boolean;
begin
  perform jobs.fleet_only('jobs.limit_put');  -- (sql/15_tenancy.sql)
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  insert into jobs.limit as l (name, scope, target, key_path, concurrency, rate_n, rate_per_s,
                               when_busy, origin, updated_at)
  values (p_name, p_def->>'scope', p_def->>'target',
          case pg_catalog.jsonb_typeof(p_def->'key')
            when 'string' then array[p_def->>'key']
            when 'array' then array(select pg_catalog.jsonb_array_elements_text(p_def->'key'))
          end,
          (p_def->>'concurrency')::integer, (p_def->'rate'->>'n')::integer,
          (p_def->'rate'->>'per_s')::double precision,
          coalesce(p_def->>'when_busy', 'wait'), coalesce(p_def->>'origin', 'api'), jobs.now())
  on conflict (name) do update
     set scope = excluded.scope, target = excluded.target, key_path = excluded.key_path,
         concurrency = excluded.concurrency, rate_n = excluded.rate_n,
         rate_per_s = excluded.rate_per_s, when_busy = excluded.when_busy,
         origin = excluded.origin, updated_at = excluded.updated_at
  returning (xmax = 0) into v_new;
  return v_new;
end
$$;

comment on function jobs.limit_put(text, jsonb) is
  'Define (or replace) a concurrency and/or rate limit; true when it is new.';

-- jobs.limit_remove(name): the limit goes; jobs waiting on it are claimable again.
-- Errors: limit_not_found (SJ013).
create or replace function jobs.limit_remove(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.limit_remove');  -- (sql/15_tenancy.sql)
  delete from jobs.limit l where l.name = p_name;
  if not found then
    perform jobs.raise_error('limit_not_found', pg_catalog.format('no limit named %L', p_name));
  end if;
  perform jobs.unblock(array(
    select b.id from jobs.job b
     where pg_catalog.split_part(b.blocked_on, '|', 1) = p_name
       and b.state in ('ready', 'interrupted')));
end
$$;

comment on function jobs.limit_remove(text) is
  'Remove a limit; the jobs waiting on it become claimable. SJ013 when there is none.';

-- jobs.limits() -> every limit as defined.
create or replace function jobs.limits()
returns table (name text, scope text, target text, key_path text[], concurrency integer,
               rate_n integer, rate_per_s double precision, when_busy text, origin text,
               updated_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.limits');  -- (sql/15_tenancy.sql: a tenant's limit names others)
  select l.name, l.scope, l.target, l.key_path, l.concurrency, l.rate_n, l.rate_per_s,
         l.when_busy, l.origin, l.updated_at
    from jobs.limit l
   where l.scope <> 'throttle'
   order by l.name
$$;

comment on function jobs.limits() is 'The concurrency and rate limits, as defined.';

-- jobs.limit_stats() -> per group in use or waiting: its limit, key, concurrency and
-- running count, rate and starts in the current window, and the jobs waiting on it
-- (for a slot; for a full global or queue limit, the runnable jobs it holds back) or
-- deferred (by its rate, run_at ahead).
create or replace function jobs.limit_stats()
returns table (limit_name text, grp text, concurrency integer, running bigint,
               waiting bigint, rate_n integer, rate_per_s double precision,
               recent_starts integer, deferred bigint)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.limit_stats');  -- (sql/15_tenancy.sql)
  with used as (
    select s.grp, pg_catalog.count(*) as running from jobs.slot s group by s.grp
  ), waiting as (
    select b.blocked_on as grp, pg_catalog.count(*) as waiting
      from jobs.job b
     where b.blocked_on is not null and b.state in ('ready', 'interrupted')
     group by b.blocked_on
  ), deferred as (
    select d.deferred_by as grp, pg_catalog.count(*) as deferred
      from jobs.job d
     where d.deferred_by is not null and d.state in ('ready', 'interrupted')
       and d.run_at > jobs.now()
     group by d.deferred_by
  ), held as (  -- a full global or queue limit holds back the runnable jobs of its scope
    select l.name || '|' as grp,
           (select pg_catalog.count(*) from jobs.job h
             where h.state in ('ready', 'interrupted') and h.blocked_on is null
               and h.run_at <= jobs.now() and (l.scope = 'global' or h.queue = l.target)) as n
      from jobs.limit l join used u on u.grp = l.name || '|'
     where l.scope in ('global', 'queue') and u.running >= l.concurrency
  ), starts as (
    select t.grp, t.starts from jobs.limit_start t
  ), groups as (
    select u.grp from used u union select w.grp from waiting w
    union select d.grp from deferred d union select t.grp from starts t
  )
  select pg_catalog.split_part(g.grp, '|', 1), g.grp, l.concurrency,
         coalesce(u.running, 0), coalesce(w.waiting, 0) + coalesce(h.n, 0), l.rate_n, l.rate_per_s,
         (select pg_catalog.count(*)::integer from pg_catalog.unnest(t.starts) s(at)
           where s.at > jobs.now() - pg_catalog.make_interval(secs => coalesce(l.rate_per_s, 0))),
         coalesce(d.deferred, 0)
    from groups g
    left join jobs.limit l on l.name = pg_catalog.split_part(g.grp, '|', 1)
    left join used u on u.grp = g.grp
    left join waiting w on w.grp = g.grp
    left join starts t on t.grp = g.grp
    left join deferred d on d.grp = g.grp
    left join held h on h.grp = g.grp
   order by g.grp
$$;

comment on function jobs.limit_stats() is
  'Per limit group in use: concurrency and running, waiting jobs, rate and recent starts.';

-- jobs.admit(candidates, limit, now) -> (id, slots, at) of the candidates admitted, at
-- most p_limit, in candidate order: the limit groups each holds, and the admission's
-- time (its start). The candidates are ready jobs the claim holds locked, in claim
-- order. Refused ones are blocked, deferred or failed here (see the file's header);
-- candidates past the limit are left as they are. Locks: each group's lock row
-- (jobs.lock_keys, skip locked: a group another claim admits into is left for the next
-- claim), in group order, held to commit.
create or replace function jobs.admit(p_ids bigint[], p_limit integer, p_now timestamptz)
returns table (id bigint, slots text[], at timestamptz)
language plpgsql
volatile
set search_path = ''
set enable_bitmapscan = off  -- jobs.slot churns: see jobs.claim (sql/30_claim.sql)
as $$
declare
  -- every (candidate, group) pair, in candidate order (a candidate's pairs together,
  -- its global and queue groups last), as parallel arrays
  a_id     bigint[];
  a_group  text[];
  a_cap    integer[];       -- concurrency (null: none)
  a_n      integer[];       -- rate: starts ...
  a_per    double precision[];  -- ... per seconds (null: no rate)
  a_fail   boolean[];       -- when_busy = 'fail'
  a_all    boolean[];       -- a global or queue limit's group
  a_pos    integer[];       -- the group's place in v_names
  v_names  text[];          -- every group of the candidates, sorted (the lock order)
  v_held   text[];          -- the groups this claim holds the lock of (jobs.lock_keys)
  v_used   integer[];       -- per group: running (then + admitted)
  v_waits  integer[];       -- per group: jobs deferred by its rate so far (null: not read)
  v_starts jsonb := '{}';   -- rate group -> recent starts, oldest first (+ admitted)
  v_now    timestamptz := p_now;
  v_k      integer := 1;    -- the pair at hand
  v_first  integer;         -- the candidate's first pair
  v_last   integer;
  v_cid    bigint;
  v_p      integer;
  v_i      integer;
  v_taken  integer := 0;
  v_refusal text;           -- null (admitted) | block | leave | defer | fail
  v_group  text;
  v_until  timestamptz;
  v_at     timestamptz;
  v_ring   jsonb;
  v_w      integer;
  v_slots  text[];
  v_blocked  bigint[] := '{}';
  v_block_on text[] := '{}';
  v_defer    bigint[] := '{}';
  v_defer_at timestamptz[] := '{}';
  v_defer_on text[] := '{}';
  v_defer_group text;      -- the rate group that defers the longest
  v_fail     bigint[] := '{}';
  v_fail_on  text[] := '{}';
begin
  -- GROUPS of every candidate, from the limits that apply to it.
  select pg_catalog.array_agg(g.id), pg_catalog.array_agg(g.grp), pg_catalog.array_agg(g.cap),
         pg_catalog.array_agg(g.n), pg_catalog.array_agg(g.per), pg_catalog.array_agg(g.fail),
         pg_catalog.array_agg(g.all_jobs)
    into a_id, a_group, a_cap, a_n, a_per, a_fail, a_all
    from (select x.id, x.grp, x.cap, x.n, x.per, x.fail, x.all_jobs from (
            select c.ord, j.id, g.grp, g.cap, g.n, g.per, g.fail, g.all_jobs
              from pg_catalog.unnest(p_ids) with ordinality as c(id, ord)
              join jobs.job j on j.id = c.id  -- each candidate read once, its groups beside it
             cross join lateral (
               select l.name || '|' || case
                        when l.scope = 'key' then coalesce(j.payload #>> l.key_path, '')
                        when l.scope = 'tenant' and l.target is null then j.tenant
                        else '' end as grp,
                      l.concurrency as cap, l.rate_n as n, l.rate_per_s as per,
                      l.when_busy = 'fail' as fail, l.scope in ('global', 'queue') as all_jobs
                 from jobs.limit l
                where l.scope = 'global'
                   or (l.scope = 'queue' and l.target = j.queue)
                   or ((l.scope = 'name' or l.scope = 'key') and l.target = j.name)
                   or (l.scope = 'tenant' and j.tenant is not null
                       and (l.target is null or l.target = j.tenant))
               union all
               select 'sqljobs.throttle|' || j.name || '|' || coalesce(j.tenant, '') || '|'
                        || coalesce(j.group_key, ''),
                      null, j.throttle_n, j.throttle_per_s, false, false
                where j.throttle_n is not null) g) x
          order by x.ord, x.all_jobs, x.grp) g;

  if a_id is null then  -- no limit applies to any candidate
    return query select c.id, null::text[], p_now
                   from pg_catalog.unnest(p_ids) with ordinality as c(id, ord)
                  order by c.ord limit p_limit;
    return;
  end if;

  -- LOCK ACQUISITION: each group's lock row (jobs.lock_keys), in group order, never
  -- waited for: a group another claim is admitting into right now is left for the next
  -- claim (its candidates stay as they are), so a claim never waits on another, nor on
  -- a session holding one open.
  v_names := array(select distinct g from pg_catalog.unnest(a_group) g order by 1);
  v_held := array(select pg_catalog.substr(k, 7)  -- (without 'limit|')
                    from pg_catalog.unnest(jobs.lock_keys(
                           array(select 'limit|' || g from pg_catalog.unnest(v_names) g),
                           array(select 'skip' from pg_catalog.unnest(v_names)))) k);
  a_pos := array(select pg_catalog.array_position(v_names, g)
                   from pg_catalog.unnest(a_group) with ordinality as x(g, o) order by x.o);

  -- The admission's time, read once the locks are held: the claims of a group are
  -- admitted in lock order, so their starts (the rate windows, each job's started_at)
  -- are in that order too. A session's jobs.fake_now (tests) stands in for it.
  if nullif(pg_catalog.current_setting('jobs.fake_now', true), '') is null then
    v_now := pg_catalog.clock_timestamp();
  end if;

  -- USE: the running jobs holding each group (jobs.slot); the recent starts of the
  -- groups this claim holds (only those: what it writes back at the end must be what
  -- it read under the lock, or it would undo another claim's starts).
  select pg_catalog.array_agg(coalesce(u.n, 0) order by g.o)
    into v_used
    from pg_catalog.unnest(v_names) with ordinality as g(name, o)
    left join (select s.grp, pg_catalog.count(*)::integer as n
                 from jobs.slot s
                where s.grp = any (v_names)
                group by s.grp) u on u.grp = g.name;
  if exists (select from pg_catalog.unnest(a_n) n where n is not null) then
    select coalesce(pg_catalog.jsonb_object_agg(t.grp, pg_catalog.to_jsonb(t.starts)), '{}')
      into v_starts
      from jobs.limit_start t
     where t.grp = any (v_held);
  end if;
  v_waits := pg_catalog.array_fill(null::integer, array[pg_catalog.cardinality(v_names)]);

  -- ADMIT in claim order while every group has room.
  foreach v_cid in array p_ids loop
    exit when v_taken >= p_limit;
    v_first := v_k;
    while v_k <= pg_catalog.cardinality(a_id) and a_id[v_k] = v_cid loop
      v_k := v_k + 1;
    end loop;
    v_last := v_k - 1;
    v_refusal := null;
    -- a group another claim holds: the job is left as it is, for the next claim
    for v_i in v_first .. v_last loop
      if not a_group[v_i] = any (v_held) then
        v_refusal := 'leave';
        exit;
      end if;
    end loop;
    -- concurrency first: a full group blocks (or fails); a full global or queue group
    -- (listed last) leaves the job as it is; then the rates
    for v_i in v_first .. v_last loop
      exit when v_refusal is not null;
      v_p := a_pos[v_i];
      if a_cap[v_i] is not null and v_used[v_p] >= a_cap[v_i] then
        v_group := a_group[v_i];
        if a_all[v_i] then
          v_refusal := 'leave';
        elsif a_fail[v_i] and exists (
                select from jobs.slot s join jobs.job r on r.id = s.job_id
                 where s.grp = v_group and r.state = 'running' and r.lease_expires_at > v_now)
        then
          v_refusal := 'fail';  -- evidence: a run holds the key under a live lease
        else
          v_refusal := 'block';
        end if;
        exit;
      end if;
    end loop;
    if v_refusal is null then
      v_until := null;
      for v_i in v_first .. v_last loop
        continue when a_n[v_i] is null;
        v_group := a_group[v_i];
        v_ring := coalesce(v_starts->v_group, '[]');
        if pg_catalog.jsonb_array_length(v_ring) >= a_n[v_i]
           and (v_ring->>(pg_catalog.jsonb_array_length(v_ring) - a_n[v_i]))::timestamptz
               > v_now - pg_catalog.make_interval(secs => a_per[v_i]) then
          -- the window is full: the k-th job deferred (counting those an earlier claim
          -- deferred, still waiting) starts when the k-th of the recent starts leaves
          -- the window
          v_p := a_pos[v_i];
          if v_waits[v_p] is null then
            select pg_catalog.count(*) into v_w from jobs.job d
             where d.deferred_by = v_group and d.state in ('ready', 'interrupted')
               and d.run_at > v_now;
            v_waits[v_p] := v_w;
          end if;
          v_w := v_waits[v_p];
          v_waits[v_p] := v_w + 1;
          v_at := (v_ring->>(pg_catalog.jsonb_array_length(v_ring) - a_n[v_i]
                             + v_w % a_n[v_i]))::timestamptz
                  + pg_catalog.make_interval(secs => a_per[v_i] * (v_w / a_n[v_i] + 1));
          if v_until is null or v_at > v_until then
            v_until := v_at;
            v_defer_group := v_group;
          end if;
          v_refusal := 'defer';
        end if;
      end loop;
    end if;
    if v_refusal = 'block' then
      v_blocked := v_blocked || v_cid;
      v_block_on := v_block_on || v_group;
    elsif v_refusal = 'fail' then
      v_fail := v_fail || v_cid;
      v_fail_on := v_fail_on || v_group;
    elsif v_refusal = 'defer' then
      v_defer := v_defer || v_cid;
      v_defer_at := v_defer_at || v_until;
      v_defer_on := v_defer_on || v_defer_group;
    elsif v_refusal is null then
      -- TAKE: a slot of each concurrency group, a start of each rate group
      v_slots := null;
      for v_i in v_first .. v_last loop
        v_p := a_pos[v_i];
        if a_cap[v_i] is not null then
          v_used[v_p] := v_used[v_p] + 1;
          v_slots := v_slots || a_group[v_i];
        end if;
        if a_n[v_i] is not null then
          v_ring := coalesce(v_starts->a_group[v_i], '[]') || pg_catalog.to_jsonb(v_now);
          if pg_catalog.jsonb_array_length(v_ring) > a_n[v_i] then
            v_ring := v_ring - 0;
          end if;
          v_starts := v_starts || pg_catalog.jsonb_build_object(a_group[v_i], v_ring);
        end if;
      end loop;
      id := v_cid;
      slots := v_slots;
      at := v_now;
      v_taken := v_taken + 1;
      return next;
    end if;
  end loop;

  -- APPLY the refusals and the new starts.
  if pg_catalog.cardinality(v_blocked) > 0 then
    update jobs.job as j set blocked_on = b.grp
      from unnest(v_blocked, v_block_on) as b(id, grp)
     where j.id = b.id;
    -- ROOM LEFT: a group that still has free slots after this admission may have jobs
    -- waiting on it (a waiter woken for its slot and blocked again on another of its
    -- groups left that slot unused): make as many of them claimable as it has room
    -- (of a group this claim holds the lock of: another's use it did not read).
    -- Only a claim that blocked a job can have left such a slot.
    perform jobs.unblock(array(
      select w.id
        from (select distinct a_group[x.i] as grp, a_cap[x.i] as cap, v_used[a_pos[x.i]] as used
                from pg_catalog.generate_subscripts(a_group, 1) as x(i)
               where a_cap[x.i] > v_used[a_pos[x.i]]
                 and a_group[x.i] = any (v_held)) g
       cross join lateral (
         select b.id from jobs.job b
          where b.blocked_on = g.grp and b.state in ('ready', 'interrupted')
          order by b.priority, b.run_at, b.id
          limit g.cap - g.used
            for update skip locked) w));
  end if;
  if pg_catalog.cardinality(v_defer) > 0 then
    update jobs.job as j set run_at = d.at, deferred_by = d.grp
      from unnest(v_defer, v_defer_at, v_defer_on) as d(id, at, grp)
     where j.id = d.id;
  end if;
  if pg_catalog.cardinality(v_fail) > 0 then
    update jobs.job as j
       set state = 'failed', finished_at = v_now,
           last_error = pg_catalog.jsonb_build_object(
             'kind', 'key_busy', 'sqlstate', 'SJ012',
             'message', pg_catalog.format(
               'another run holds key %L of limit %L, and the job says when_busy = fail',
               pg_catalog.substr(f.grp, pg_catalog.strpos(f.grp, '|') + 1),
               pg_catalog.split_part(f.grp, '|', 1)),
             'at', v_now)
      from unnest(v_fail, v_fail_on) as f(id, grp)
     where j.id = f.id;
  end if;
  -- MORE: refused jobs left the claimable ones (blocked, deferred or failed); when this
  -- claim took fewer than it was asked for, others may be claimable now: wake the
  -- claimers of those queues (this one included) to claim again.
  if v_taken < p_limit and pg_catalog.cardinality(v_blocked || v_defer || v_fail) > 0 then
    perform jobs.wake(array(select distinct j.queue from jobs.job j
                             where j.id = any (v_blocked || v_defer || v_fail)));
  end if;
  if v_starts <> '{}' then
    insert into jobs.limit_start as t (grp, starts)
    select s.key, array(select pg_catalog.jsonb_array_elements_text(s.value)::timestamptz)
      from pg_catalog.jsonb_each(v_starts) as s
    on conflict (grp) do update set starts = excluded.starts
     where t.starts is distinct from excluded.starts;
  end if;
end
$$;

-- jobs.unblock(ids): these waiting jobs are claimable again; their queues are woken.
-- (PL/pgSQL, not SQL: its plans are kept for the session; a SQL function called from
-- a trigger is planned at every call.)
create or replace function jobs.unblock(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queues text[];
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0 then
    return;
  end if;
  with moved as (
    update jobs.job as j set blocked_on = null
     where j.id = any (p_ids) and j.blocked_on is not null
    returning j.queue
  )
  select pg_catalog.array_agg(distinct m.queue) into v_queues from moved m;
  perform jobs.wake(v_queues);
end
$$;

-- jobs.unblock_free(max) -> how many waiting jobs it made claimable: for every group with
-- waiting jobs, as many as it has free slots (all, when its limit is gone or has no
-- concurrency any more). The recovering claims run it, so a slot that freed without
-- waking a waiter (a waiter blocked while the slot freed) is taken within one poll.
create or replace function jobs.unblock_free(p_max integer)
returns integer
language plpgsql
volatile
set search_path = ''
set enable_bitmapscan = off  -- jobs.slot churns: see jobs.claim (sql/30_claim.sql)
as $$
declare
  v_ids bigint[];
begin
  v_ids := array(
    select w.id
      from (select b.blocked_on as grp, pg_catalog.count(*) as n
              from jobs.job b
             where b.blocked_on is not null and b.state in ('ready', 'interrupted')
             group by b.blocked_on) g
      left join jobs.limit l on l.name = pg_catalog.split_part(g.grp, '|', 1)
     cross join lateral (
       select b.id from jobs.job b
        where b.blocked_on = g.grp and b.state in ('ready', 'interrupted')
        order by b.priority, b.run_at, b.id
        limit greatest(0, case when l.concurrency is null then g.n
                               else l.concurrency - (select pg_catalog.count(*) from jobs.slot s
                                                      where s.grp = g.grp) end)
          for update skip locked) w
     limit p_max);
  perform jobs.unblock(v_ids);
  return pg_catalog.cardinality(v_ids);
end
$$;

-- Jobs that leave running free their slots, once per statement (an ack_many of a
-- batch pays one trigger, not one per job): their jobs.slot rows go, and the first
-- waiting job of each freed group becomes claimable (skip locked: a waiter another
-- transaction holds is left to the sweep). A statement that moved no job holding
-- slots out of running returns after one look at its old rows.
create or replace function jobs.slots_freed()
returns trigger
language plpgsql
volatile
set search_path = ''
set enable_bitmapscan = off  -- jobs.slot churns: see jobs.claim (sql/30_claim.sql)
as $$
declare
  v_groups text[];
  v_queues text[];
begin
  if not exists (select from old_jobs o where o.slots is not null and o.state = 'running') then
    return null;
  end if;
  with freed as (
    delete from jobs.slot s
     using (select g, o.id, o.queue
              from old_jobs o
              join new_jobs n on n.id = o.id
             cross join lateral pg_catalog.unnest(o.slots) as g
             where o.state = 'running' and n.state <> 'running' and o.slots is not null) f
     where s.grp = f.g and s.job_id = f.id
    returning s.grp, f.queue
  )
  select pg_catalog.array_agg(distinct freed.grp), pg_catalog.array_agg(distinct freed.queue)
    into v_groups, v_queues
    from freed;
  if v_groups is null then
    return null;
  end if;
  if exists (select from jobs.job b
              where b.blocked_on = any (v_groups) and b.state in ('ready', 'interrupted')) then
    perform jobs.unblock(array(
      select (select b.id from jobs.job b
               where b.blocked_on = g and b.state in ('ready', 'interrupted')
               order by b.priority, b.run_at, b.id
               limit 1
                 for update skip locked)
        from pg_catalog.unnest(v_groups) as g));
  end if;
  -- Jobs held back by a full global or queue limit stay claimable (no waiter is
  -- recorded), and the claims skip picking while it is full: when these slots were
  -- the group's last (the group was full as this transaction sees it), wake the
  -- claimers of the jobs' queues. (Those of other queues under the same global limit
  -- take a free slot at their next poll.) A group with room wakes no one: its
  -- claimers are not waiting for it.
  if exists (select from jobs.limit l
              where l.scope in ('global', 'queue') and l.concurrency is not null
                and l.name || '|' = any (v_groups)
                and l.concurrency <= (select pg_catalog.count(*) from jobs.slot s
                                       where s.grp = l.name || '|')
                                     + (select pg_catalog.count(*) from old_jobs o
                                         where l.name || '|' = any (o.slots))) then
    perform jobs.wake(v_queues);
  end if;
  return null;
end
$$;

-- (Transition tables need a trigger on every update: PostgreSQL allows no column list
-- with them.)
drop trigger if exists job_slots_freed on jobs.job;

create trigger job_slots_freed
  after update on jobs.job
  referencing old table as old_jobs new table as new_jobs
  for each statement
  execute function jobs.slots_freed();

-- === sql/40_settle.sql ===

-- Shared argument check for the batched settlers: arrays present and of one length.
create or replace function jobs.check_batch(p_ids bigint[], p_claims bigint[], p_other anyarray)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_ids is null or p_claims is null then
    perform jobs.raise_error('invalid_argument', 'ids and claims are required');
  end if;
  if pg_catalog.cardinality(p_ids) <> pg_catalog.cardinality(p_claims)
     or (p_other is not null and pg_catalog.cardinality(p_other) <> pg_catalog.cardinality(p_ids)) then
    perform jobs.raise_error('invalid_argument', 'ids, claims and values must have the same length');
  end if;
  if pg_catalog.array_position(p_ids, null) is not null
     or pg_catalog.array_position(p_claims, null) is not null then
    perform jobs.raise_error('invalid_argument', 'ids and claims must not contain null');
  end if;
end
$$;

-- jobs.watch_token(id) -> the token jobs_settled carries when the job settles.
create or replace function jobs.watch_token(p_id bigint)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return jobs.channel_token('job:' || p_id);
end
$$;

comment on function jobs.watch_token(bigint) is
  'The token jobs_settled carries when this job settles (a result waiter listens for it).';

create or replace function jobs.notify_settled(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_payload text;
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0
     or coalesce(pg_catalog.current_setting('jobs.notify', true), '') = 'off' then
    return;
  end if;
  v_payload := (select pg_catalog.string_agg(jobs.channel_token('job:' || i), ',')
                  from pg_catalog.unnest(p_ids) as i);
  if pg_catalog.octet_length(v_payload) > 7900 then
    v_payload := '*';
  end if;
  perform pg_catalog.pg_notify('jobs_settled', v_payload);
end
$$;

comment on function jobs.notify_settled(bigint[]) is
  'Notify jobs_settled once with the tokens of these (watched) jobs, or * when too many; off with jobs.notify = off.';

-- jobs.watch_outcome(id) -> (id, state, result, last_error): the job as it is now, its
-- result and error redacted as every view shows them (a field its job type marks
-- sensitive reads "[redacted]"), and from now on its settlement notifies 'jobs_settled'
-- (a waiter LISTENs first, then calls this, so no settlement falls between). No row: no
-- such job.
create or replace function jobs.watch_outcome(p_id bigint)
returns table (id bigint, state jobs.job_state, result jsonb, last_error jsonb)
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  update jobs.job as j set settle_watched = true
   where j.id = p_id and not j.settle_watched
     and j.state in ('ready', 'running', 'parked', 'interrupted');
  -- redacted as every view is (jobs.job_view, sql/92_introspection.sql)
  return query select v.id, v.state, v.result, v.last_error from jobs.job_view v
                where v.id = p_id;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.ack_many(ids, claims, results) -> (id, ok) per input, in input order.
-- running -> succeeded, storing the result (jsonb; null allowed). results may be
-- null (no results at all). An earlier attempt's last_error is kept, marked
-- {"historical": true}. ok = false: the fence did not hold, nothing changed.
-- ---------------------------------------------------------------------------
create or replace function jobs.ack_many(
  p_ids     bigint[],
  p_claims  bigint[],
  p_results jsonb[] default null
)
returns table (id bigint, ok boolean)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_done    bigint[];
  v_watched bigint[];
begin
  perform jobs.check_batch(p_ids, p_claims, p_results);
  perform jobs.check_values(p_results, 'result');
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  with input as (
    select u.id, u.claim, u.result
      from unnest(p_ids, p_claims,
                  coalesce(p_results, pg_catalog.array_fill(null::jsonb, array[pg_catalog.cardinality(p_ids)])))
           as u(id, claim, result)
  ),
  done as (
    update jobs.job as j
       set state = 'succeeded',
           result = i.result,
           finished_at = v_now,
           lease_expires_at = null,
           -- an earlier attempt's error stays for the record, marked as history
           last_error = case when j.last_error is not null
                             then j.last_error || '{"historical": true}' end
      from (select input.id, input.claim, input.result from input order by input.id) as i
     where j.id = i.id and j.claim = i.claim and j.state = 'running'
    returning j.id, j.settle_watched
  )
  select pg_catalog.array_agg(done.id),
         pg_catalog.array_agg(done.id) filter (where done.settle_watched)
    into v_done, v_watched
    from done;
  -- NOTIFY result waiters of watched jobs only (once per call).
  perform jobs.notify_settled(v_watched);
  return query
    select u.id, u.id = any (coalesce(v_done, '{}'))
      from unnest(p_ids) with ordinality as u(id, ord)
     order by u.ord;
end
$$;

-- jobs.lease_lost(id, claim): raise SJ004 describing where the job is now (its state;
-- never its claim token, the proof of whoever holds it now).
create or replace function jobs.lease_lost(p_id bigint, p_claim bigint)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_state jobs.job_state;
begin
  perform jobs.check_tenant(array[p_id]);  -- (another tenant's job: not described)
  select j.state into v_state from jobs.job j where j.id = p_id;
  perform jobs.raise_error('lease_lost',
    pg_catalog.format('job %s is no longer held by this claim', p_id),
    case when v_state is null then 'the job no longer exists'
         when v_state = 'running' then 'the job runs under another claim'
         else pg_catalog.format('the job is %s', v_state) end,
    'another worker may have taken it over after the lease lapsed; this run must stop');
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.retry_state(attempt, max_attempts, dead_letter) -> where a failed attempt leads:
-- ready (attempts remain), else dead, or failed when the policy has no dead-letter.
-- The one place retry finality is decided: nack's retry mode and lease recovery in the
-- claim both ask it, and the worker reads the answer they give.
-- ---------------------------------------------------------------------------
create or replace function jobs.retry_state(p_attempt integer, p_max_attempts integer,
                                            p_dead_letter boolean)
returns jobs.job_state
language sql
immutable
set search_path = ''
as $$
  select case when p_attempt < p_max_attempts then 'ready'
              when p_dead_letter then 'dead'
              else 'failed' end::jobs.job_state
$$;

-- ---------------------------------------------------------------------------
-- jobs.attempts_push(attempts, entry) -> the attempt history (jobs.job.attempts) with
-- one more entry at its end, the oldest dropped beyond the last 20: bounded, whatever
-- a job's max_attempts. Called only on the failure paths (jobs.nack_many here, lease
-- recovery in jobs.claim), never by ack or a claim's normal path. An entry is
-- {attempt, claim, worker, started_at, ended_at, outcome, error}.
-- ---------------------------------------------------------------------------
create or replace function jobs.attempts_push(p_attempts jsonb, p_entry jsonb)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_attempts jsonb := coalesce(p_attempts, '[]'::jsonb) || pg_catalog.jsonb_build_array(p_entry);
begin
  while pg_catalog.jsonb_array_length(v_attempts) > 20 loop
    v_attempts := v_attempts - 0;
  end loop;
  return v_attempts;
end
$$;

comment on function jobs.attempts_push(jsonb, jsonb) is
  'An attempt history with one more entry, keeping the last 20 (jobs.job.attempts).';

-- ---------------------------------------------------------------------------
-- jobs.nack_many(ids, claims, errors, modes, delays_s) -> (id, ok, state) per input.
--
-- modes (null = 'retry'):
--   retry      attempt counted. Next run_at = now + delay_s, or the job's backoff
--              curve when delay_s is null. Attempts exhausted (jobs.retry_state) ->
--              dead, or failed when dead_letter is off.
--   fail       terminal now: failed.
--   park       parked, not an attempt; wakes at now + delay_s (never when null) or
--              when an event or child job wakes it.
--   shed       back to ready at now + delay_s (default now), not an attempt
--              (e.g. rate-limited).
--   interrupt  interrupted (a drain cut-off stopped the run), not an attempt;
--              claimed again like ready, in its old place in line (run_at kept;
--              now + delay_s when a delay is given).
-- errors: jsonb per job (null allowed), stored in last_error with attempt and time; an
--         error that is not an object is stored as {"message": error, ...}. A null error
--         leaves last_error as it was.
-- History: modes retry, fail and interrupt end an attempt without success: each appends
--   {attempt, claim, worker, started_at, ended_at: now, outcome: retry | failed | dead
--   | interrupted, error} to the job's attempts (jobs.attempts_push; error: the stored
--   one, null when none was given). park and shed write none (not a failure).
-- Sagas: a job with a stored compensable step (compensable) whose nack would make it
--   failed or dead starts unwinding instead (docs/design/sagas.md): it stays `running`
--   under the caller's claim and lease, compensating, with the final state recorded
--   (jobs.record_unwinds); its answer's state is `running`. The caller runs the
--   compensations and settles it with jobs.step_unwound (or leaves it to a later run).
-- ---------------------------------------------------------------------------
create or replace function jobs.nack_many(
  p_ids      bigint[],
  p_claims   bigint[],
  p_errors   jsonb[] default null,
  p_modes    text[] default null,
  p_delays_s double precision[] default null
)
returns table (id bigint, ok boolean, state jobs.job_state)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_n       integer;
  v_bad     text;
  v_done    bigint[];
  v_states  jobs.job_state[];
  v_watched bigint[];
begin
  perform jobs.check_batch(p_ids, p_claims, p_errors);
  perform jobs.check_values(p_errors, 'error');
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  v_n := pg_catalog.cardinality(p_ids);
  if (p_modes is not null and pg_catalog.cardinality(p_modes) <> v_n)
     or (p_delays_s is not null and pg_catalog.cardinality(p_delays_s) <> v_n) then
    perform jobs.raise_error('invalid_argument', 'modes and delays_s must match ids in length');
  end if;
  select m into v_bad from pg_catalog.unnest(p_modes) m
   where m not in ('retry', 'fail', 'park', 'shed', 'interrupt') limit 1;
  if v_bad is not null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('mode %s is not one of retry, fail, park, shed, interrupt',
                        pg_catalog.quote_literal(v_bad)));
  end if;
  -- (NaN sorts above every number, so `not (d <= 1e9)` refuses it too)
  if exists (select 1 from pg_catalog.unnest(p_delays_s) d where d < 0 or not (d <= 1e9)) then
    perform jobs.raise_error('invalid_argument', 'delays_s must be 0 to 1e9 seconds');
  end if;
  -- last_error is read by every client and the dashboard: {kind, message, detail, ...},
  -- kind and message text when given (a non-object error is wrapped as {message} below)
  select pg_catalog.format('error %s: %s must be a JSON string, got %s', e.ord, f.field,
                           pg_catalog.jsonb_typeof(e.error -> f.field))
    into v_bad
    from pg_catalog.unnest(p_errors) with ordinality as e(error, ord)
   cross join (values ('kind'), ('message')) as f(field)
   where pg_catalog.jsonb_typeof(e.error) = 'object'
     and e.error ? f.field
     and pg_catalog.jsonb_typeof(e.error -> f.field) <> 'string'
   order by e.ord, f.field
   limit 1;
  if v_bad is not null then
    perform jobs.raise_error('invalid_argument', v_bad
      || ' (send {"kind": "...", "message": "...", "detail": ...}, see docs/howto-other-languages.md)');
  end if;

  with input as (
      select u.id, u.claim, u.error, coalesce(u.mode, 'retry') as mode, u.delay_s, u.ord
        from unnest(
               p_ids, p_claims,
               coalesce(p_errors, pg_catalog.array_fill(null::jsonb, array[v_n])),
               coalesce(p_modes, pg_catalog.array_fill(null::text, array[v_n])),
               coalesce(p_delays_s, pg_catalog.array_fill(null::double precision, array[v_n])))
             with ordinality as u(id, claim, error, mode, delay_s, ord)
    ),
    target as (
      select j.id, i.error, i.mode, i.delay_s, j.attempt, n.next_state,
             -- what last_error (and the attempt history) store: the error as an object,
             -- plus the attempt that ended and when (null: no error given)
             case when i.error is not null then
               case when pg_catalog.jsonb_typeof(i.error) = 'object' then i.error
                    else pg_catalog.jsonb_build_object('message', i.error) end
               || pg_catalog.jsonb_build_object('attempt', j.attempt, 'at', v_now)
             end as stored_error,
             n.next_state in ('failed', 'dead') and j.compensable and not j.compensating
               as unwinds,
             case
               when i.mode = 'retry' then
                 v_now + pg_catalog.make_interval(secs => coalesce(i.delay_s,
                   jobs.backoff_s(j.attempt, j.retry_base_s, j.retry_cap_s, j.retry_jitter)))
               when i.mode = 'park' then
                 coalesce(v_now + pg_catalog.make_interval(secs => i.delay_s), 'infinity')
               -- an interrupted run keeps its place in line (its run_at), like a
               -- recovered one, unless the caller asks for a delay
               when i.mode = 'interrupt' and i.delay_s is null then least(j.run_at, v_now)
               else v_now + pg_catalog.make_interval(secs => coalesce(i.delay_s, 0))
             end as next_run_at
        from input i
        join jobs.job j on j.id = i.id and j.claim = i.claim and j.state = 'running'
       cross join lateral (select case
                                    when i.mode = 'fail' then 'failed'
                                    when i.mode = 'park' then 'parked'
                                    when i.mode = 'shed' then 'ready'
                                    when i.mode = 'interrupt' then 'interrupted'
                                    else jobs.retry_state(j.attempt, j.max_attempts, j.dead_letter)
                                  end::jobs.job_state as next_state) n
       order by j.id
         for update of j
    ),
    done as (
      update jobs.job as j
         set state = case when t.unwinds then j.state else t.next_state end,
             run_at = case when not t.unwinds and t.next_state in ('ready', 'parked', 'interrupted')
                           then t.next_run_at else j.run_at end,
             attempt = case when t.mode in ('park', 'shed', 'interrupt')
                            then j.attempt - 1 else j.attempt end,
             lease_expires_at = case when t.unwinds then j.lease_expires_at end,
             finished_at = case when not t.unwinds and t.next_state in ('failed', 'dead')
                                then v_now end,
             compensating = j.compensating or t.unwinds,
             step_seq = j.step_seq + case when t.unwinds then 1 else 0 end,
             last_error = coalesce(t.stored_error, j.last_error),
             -- the history: an attempt that failed, ended for good or was interrupted
             attempts = case when t.mode in ('retry', 'fail', 'interrupt') then
               jobs.attempts_push(j.attempts, pg_catalog.jsonb_build_object(
                 'attempt', t.attempt, 'claim', j.claim >> 32, 'worker', j.worker,
                 'started_at', j.started_at, 'ended_at', v_now,
                 'outcome', case when t.mode = 'interrupt' then 'interrupted'
                                 when t.next_state = 'ready' then 'retry'
                                 else t.next_state::text end,
                 'error', t.stored_error))
               else j.attempts end
        from target t
       where j.id = t.id
      returning j.id, j.state, j.settle_watched, t.unwinds, j.step_seq, t.next_state, t.error
    ),
    unwound as (
      -- record the final state of each job that starts unwinding (sagas, above)
      select jobs.record_unwinds(pg_catalog.array_agg(done.id), pg_catalog.array_agg(done.step_seq),
                                 pg_catalog.array_agg(done.next_state),
                                 pg_catalog.array_agg(done.error))
        from done where done.unwinds
    )
  select pg_catalog.array_agg(done.id), pg_catalog.array_agg(done.state),
         pg_catalog.array_agg(done.id) filter (
           where done.settle_watched and done.state in ('failed', 'dead'))
    into v_done, v_states, v_watched
    from done, (select pg_catalog.count(*) from unwound) as u;
  -- NOTIFY result waiters of watched jobs that reached a final state (once per call).
  perform jobs.notify_settled(v_watched);
  return query
    select u.id, d.id is not null, d.state
      from unnest(p_ids) with ordinality as u(id, ord)
      left join unnest(v_done, v_states) as d(id, state) on d.id = u.id
     order by u.ord;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.heartbeat_many(ids, claims, lease_s) -> (id, ok): extend each held lease to
-- now + lease_s. ok = false: the job is no longer this claim's (lost, cancelled); the
-- worker must stop that run.
-- ---------------------------------------------------------------------------
create or replace function jobs.heartbeat_many(
  p_ids     bigint[],
  p_claims  bigint[],
  p_lease_s double precision
)
returns table (id bigint, ok boolean)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now    timestamptz := jobs.now();
begin
  perform jobs.check_batch(p_ids, p_claims, null::text[]);
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  -- NaN and leases past the end of time (now + lease overflows) are refused too
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive and at most 1e9 seconds, got %s', p_lease_s));
  end if;
  return query
    with input as (
      select u.id, u.claim, u.ord
        from unnest(p_ids, p_claims) with ordinality as u(id, claim, ord)
    ),
    held as (
      update jobs.job as j
         set lease_expires_at = v_now + pg_catalog.make_interval(secs => p_lease_s)
        from (select input.id, input.claim from input order by input.id) as i
       where j.id = i.id and j.claim = i.claim and j.state = 'running'
      returning j.id
    )
    select input.id, held.id is not null
      from input left join held on held.id = input.id
     order by input.ord;
end
$$;

-- jobs.progress(id, claim, progress) -> true when recorded; false when the fence failed.
create or replace function jobs.progress(p_id bigint, p_claim bigint, p_progress jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.check_value(p_progress, 'progress');
  perform jobs.check_tenant(array[p_id]);  -- a bound session: another tenant's job is refused
  update jobs.job as j
     set progress = p_progress
   where j.id = p_id and j.claim = p_claim and j.state = 'running';
  return found;
end
$$;

-- === sql/45_workers.sql ===

-- ---------------------------------------------------------------------------
-- jobs.worker_heartbeat(id, queues, names, concurrency, ttl_s, host, pid, info)
--   -> the worker's expires_at.
-- Inserts the worker's row on first call (started_at = now), updates it afterwards
-- (started_at kept), and sets expires_at = now + ttl_s. Then forgets rows that have
-- been expired for more than an hour (at most 100 per call).
-- Idempotent: repeating a call changes only the times.
-- Locks: the worker's own row (upsert); expired rows with skip locked.
-- A live row is renewed only by the login role that registered it (`login`; the
-- tenant it is bound to is kept beside it): another login's live row is refused
-- (worker_id_taken, SJ020); an expired one is taken over.
-- Errors: invalid_argument (SJ001) for a missing or too long id (200 bytes), no queue,
--         null names, concurrency < 1, or ttl_s <= 0; worker_id_taken (SJ020).
-- ---------------------------------------------------------------------------
create or replace function jobs.worker_heartbeat(
  p_id          text,
  p_queues      text[],
  p_names       text[],
  p_concurrency integer,
  p_ttl_s       double precision default 60,
  p_host        text default null,
  p_pid         integer default null,
  p_info        jsonb default '{}'
)
returns timestamptz
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_expires timestamptz;
begin
  -- GUARD
  perform jobs.check_name(p_id, 'a worker id');
  if p_queues is null or pg_catalog.cardinality(p_queues) = 0 then
    perform jobs.raise_error('invalid_argument', 'a worker serves at least one queue');
  end if;
  if p_names is null then
    perform jobs.raise_error('invalid_argument', 'names is required (an empty array for none)');
  end if;
  if p_concurrency is null or p_concurrency < 1 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('concurrency must be at least 1, got %s', p_concurrency));
  end if;
  -- NaN and ttls past the end of time (now + ttl overflows) are refused too
  if p_ttl_s is null or not (p_ttl_s > 0 and p_ttl_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('ttl_s must be positive and at most 1e9 seconds, got %s', p_ttl_s));
  end if;

  -- UPSERT: a live row is renewed only by the login that registered it (an expired
  -- one is anybody's, e.g. a pod started again under another role)
  v_expires := v_now + pg_catalog.make_interval(secs => p_ttl_s);
  insert into jobs.worker as w
         (id, started_at, heartbeat_at, expires_at, queues, names, concurrency, host, pid, info,
          login, tenant)
  values (p_id, v_now, v_now, v_expires, p_queues, p_names, p_concurrency, p_host, p_pid,
          coalesce(p_info, '{}'), session_user, jobs.bound_tenant())
  on conflict (id) do update
     set heartbeat_at = excluded.heartbeat_at,
         expires_at   = excluded.expires_at,
         queues       = excluded.queues,
         names        = excluded.names,
         concurrency  = excluded.concurrency,
         host         = excluded.host,
         pid          = excluded.pid,
         info         = excluded.info,
         login        = excluded.login,
         tenant       = excluded.tenant,
         started_at   = case when w.login is distinct from excluded.login then excluded.started_at
                             else w.started_at end
   where w.login is null or w.login = excluded.login or w.expires_at <= v_now;
  if not found then
    perform jobs.raise_error('worker_id_taken',
      pg_catalog.format('worker %s is registered by another login role, and live', p_id),
      null, 'give this worker another id (sqljobs worker --id)');
  end if;

  -- FORGET rows expired for more than an hour (bounded, never waits).
  delete from jobs.worker as w
   using (select o.id from jobs.worker o
           where o.expires_at < v_now - interval '1 hour'
           limit 100
             for update skip locked) as old
   where w.id = old.id;

  return v_expires;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.worker_stop(id) -> true when a row was removed.
-- A cleanly exiting worker deregisters. Jobs it still held are not touched here (the
-- worker settles them first; a lapsed lease recovers anything it could not).
-- Idempotent: a second call answers false. Locks: the worker's row.
-- ---------------------------------------------------------------------------
create or replace function jobs.worker_stop(p_id text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_login  text;
  v_tenant text;
  v_bound  text := jobs.bound_tenant();
begin
  select w.login, w.tenant into v_login, v_tenant from jobs.worker w where w.id = p_id for update;
  if not found then
    return false;
  end if;
  -- a bound session (an operator's too) reaches only its own tenant's rows
  if v_bound is not null and v_tenant is distinct from v_bound then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('worker %s is not of tenant %s, to which this session is bound',
                        p_id, v_bound));
  end if;
  -- another login's row: an operator's to remove, not a worker's
  if v_login is not null and v_login <> session_user and not jobs.caller_is('sqljobs_operator') then
    perform jobs.raise_error('worker_id_taken',
      pg_catalog.format('worker %s is registered by another login role', p_id));
  end if;
  delete from jobs.worker w where w.id = p_id;
  return true;
end
$$;

comment on function jobs.worker_stop(text) is
  'Deregister a worker (the login that registered it, or an operator); true when it was registered.';

-- ---------------------------------------------------------------------------
-- jobs.workers() -> live workers (expires_at > now), oldest first, each with the
-- number of jobs it holds in state running right now.
-- Read-only; takes no locks.
-- ---------------------------------------------------------------------------
create or replace function jobs.workers()
returns table (
  id           text,
  started_at   timestamptz,
  heartbeat_at timestamptz,
  expires_at   timestamptz,
  queues       text[],
  names        text[],
  concurrency  integer,
  host         text,
  pid          integer,
  running      bigint
)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.workers');  -- (sql/15_tenancy.sql)
  select w.id, w.started_at, w.heartbeat_at, w.expires_at, w.queues, w.names,
         w.concurrency, w.host, w.pid,
         (select pg_catalog.count(*) from jobs.job j
           where j.state = 'running' and j.worker = w.id) as running
    from jobs.worker w
   where w.expires_at > jobs.now()
   order by w.started_at, w.id
$$;

-- ---------------------------------------------------------------------------
-- jobs.unserved_jobs() -> (queue, name, waiting, oldest_s) for waiting jobs (ready or
-- interrupted) that NO live worker can run: no live worker serves both the job's queue
-- and its name. During a rolling deploy these are the jobs that only newer workers
-- know; they wait rather than fail.
-- Read-only; reads the claimable rows only (job_claimable_idx), takes no locks.
-- ---------------------------------------------------------------------------
create or replace function jobs.unserved_jobs()
returns table (queue text, name text, waiting bigint, oldest_s double precision)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.unserved_jobs');  -- (sql/15_tenancy.sql)
  select j.queue, j.name, pg_catalog.count(*) as waiting,
         extract(epoch from jobs.now() - pg_catalog.min(j.created_at))::double precision
           as oldest_s
    from jobs.job j
   where j.state in ('ready', 'interrupted')
     and not exists (select 1 from jobs.worker w
                      where w.expires_at > jobs.now()
                        and j.queue = any (w.queues)
                        and j.name = any (w.names))
   group by j.queue, j.name
   order by j.queue, j.name
$$;

-- === sql/50_steps.sql ===

-- ---------------------------------------------------------------------------
-- jobs.hold_step(id, claim, lease_s) -> the job's new step_seq. Private.
-- The fence: locks the job row while it is running under p_claim, moves step_seq and
-- (when p_lease_s is not null) extends the lease to now + lease_s. Raises lease_lost.
-- ---------------------------------------------------------------------------
create or replace function jobs.hold_step(p_id bigint, p_claim bigint, p_lease_s double precision)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_seq    integer;
  v_tenant text := jobs.bound_tenant();
begin
  if p_lease_s is not null and not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive and at most 1e9 seconds, got %s', p_lease_s));
  end if;
  update jobs.job as j
     set step_seq = j.step_seq + 1,
         lease_expires_at = case when p_lease_s is null then j.lease_expires_at
                                 else jobs.now() + pg_catalog.make_interval(secs => p_lease_s) end
   where j.id = p_id and j.claim = p_claim and j.state = 'running'
     and (v_tenant is null or j.tenant = v_tenant)
  returning j.step_seq into v_seq;
  if v_seq is null then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
  return v_seq;
end
$$;

-- Shared guard: a step name is a non-empty string of at most 200 bytes, and not
-- one of the runtime's own ('sqljobs.' ...: a saga's unwind and undo records), which
-- only these functions write (reserved_step_name SJ011).
create or replace function jobs.check_step_name(p_name text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  perform jobs.check_name(p_name, 'a step name');
  if pg_catalog.starts_with(p_name, 'sqljobs.') then
    perform jobs.raise_error('reserved_step_name',
      pg_catalog.format('step name %L starts with sqljobs., which the runtime keeps for itself',
                        p_name), null, 'give the step another name');
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.step_put(id, claim, name, value, lease_s, options) -> the stored value of the step.
--
-- Stores `value` as step `name` of job `id`, if that step is not stored yet, and
-- answers the stored value (the new one, or the one stored before: the first write
-- wins). Fenced: raises lease_lost (SJ004), writing nothing, unless the job is running
-- under p_claim. Extends the lease to now + p_lease_s (left as is when null).
-- options: {"compensable": true} the step has a compensation (marks the job
--          compensable); {"undo": true} the value records that the compensation of step
--          `name` ran: it is stored as step 'sqljobs.undo:<name>' (kind undo).
-- Errors: invalid_argument (SJ001) for a bad name, lease_s or option; payload_too_large (SJ002)
-- for a value larger than jobs.max_payload_bytes(); lease_lost (SJ004); reserved_step_name
-- (SJ011) for a name starting with 'sqljobs.'.
-- ---------------------------------------------------------------------------
create or replace function jobs.step_put(
  p_id      bigint,
  p_claim   bigint,
  p_name    text,
  p_value   jsonb,
  p_lease_s double precision default null,
  p_options jsonb default '{}'
)
returns jsonb
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  v_seq   integer;
  v_value jsonb;
  v_name  text;
begin
  -- GUARD
  perform jobs.check_step_name(p_name);
  perform jobs.check_value(p_value, 'a step value');
  if pg_catalog.octet_length(coalesce(p_value, 'null'::jsonb)::text) > jobs.max_payload_bytes() then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('step %s: value is larger than %s bytes', p_name, jobs.max_payload_bytes()));
  end if;
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object'
     or exists (select 1 from pg_catalog.jsonb_each(p_options) o
                 where o.key not in ('compensable', 'undo')
                    or pg_catalog.jsonb_typeof(o.value) <> 'boolean') then
    perform jobs.raise_error('invalid_argument',
      'options takes only {"compensable": boolean, "undo": boolean}');
  end if;
  v_name := case when (p_options->>'undo')::boolean then 'sqljobs.undo:' || p_name
                 else p_name end;
  -- FENCE (locks the job row)
  v_seq := jobs.hold_step(p_id, p_claim, p_lease_s);
  -- WRITE, first write wins
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at)
  values (p_id, v_name, v_seq,
          case when (p_options->>'undo')::boolean then 'undo' else 'run' end,
          p_value, jobs.now())
  on conflict (job_id, name) do nothing
  returning s.value into v_value;
  if found then
    if (p_options->>'compensable')::boolean then
      update jobs.job as j set compensable = true where j.id = p_id and not j.compensable;
    end if;
    return v_value;
  end if;
  select s.value into v_value from jobs.step s where s.job_id = p_id and s.name = v_name;
  return v_value;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.step_sleep(id, claim, name, until, delay_s) -> (wake_at, parked).
--
-- A durable sleep. The first call stores step `name` with its wake-up time: p_until,
-- or now + p_delay_s (the database clock); later calls read the stored time. While
-- that time is in the future the job is parked until then in the same call (as
-- jobs.nack mode park: not an attempt, the lease is released; jobs.claim wakes it when
-- the time comes) and `parked` is true: the caller's run must end without settling.
-- When the time has passed, nothing changes and `parked` is false: carry on.
-- Errors: invalid_argument (SJ001) unless exactly one of p_until / p_delay_s is given
-- (finite; delay >= 0); lease_lost (SJ004).
-- ---------------------------------------------------------------------------
create or replace function jobs.step_sleep(
  p_id      bigint,
  p_claim   bigint,
  p_name    text,
  p_until   timestamptz default null,
  p_delay_s double precision default null
)
returns table (wake_at timestamptz, parked boolean)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now  timestamptz := jobs.now();
  v_seq  integer;
  v_wake timestamptz;
begin
  -- GUARD
  perform jobs.check_step_name(p_name);
  if (p_until is null) = (p_delay_s is null)
     or p_until in ('infinity', '-infinity')
     or p_delay_s < 0 or p_delay_s > 1e9 then
    perform jobs.raise_error('invalid_argument',
      'a sleep needs exactly one of until (a finite time) or delay_s (0 to 1e9 seconds)');
  end if;
  -- FENCE
  v_seq := jobs.hold_step(p_id, p_claim, null);
  -- WRITE the wake-up time once; later calls read it.
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at)
  values (p_id, p_name, v_seq, 'sleep',
          pg_catalog.jsonb_build_object('until',
            coalesce(p_until, v_now + pg_catalog.make_interval(secs => p_delay_s))),
          v_now)
  on conflict (job_id, name) do nothing;
  select (s.value->>'until')::timestamptz into v_wake
    from jobs.step s where s.job_id = p_id and s.name = p_name and s.kind = 'sleep';
  if v_wake is null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('step %s of job %s is stored, but not as a sleep', p_name, p_id));
  end if;
  -- PARK while the time is ahead.
  if v_wake > v_now then
    perform jobs.nack_many(array[p_id], array[p_claim], null, array['park'],
                           array[extract(epoch from v_wake - v_now)::double precision]);
    return query select v_wake, true;
  else
    return query select v_wake, false;
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.job_steps(id) -> the stored steps of a job, in ordinal order (the read side).
-- ---------------------------------------------------------------------------
create or replace function jobs.job_steps(p_id bigint)
returns table (name text, ordinal integer, kind text, value jsonb, created_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select jobs.check_tenant(array[p_id]);
  select s.name, s.ordinal, s.kind, s.value, s.created_at
    from jobs.step s where s.job_id = p_id order by s.ordinal
$$;

-- ---------------------------------------------------------------------------
-- jobs.step_invoke(id, claim, names, specs, lease_s) -> (name, value, child_id, parked)
-- per name, in input order.
--
-- Step names[i] of job `id` awaits a child job enqueued from specs[i] (a
-- jobs.enqueue_many spec; its key defaults to '<id>:<step name>', so a replay or a
-- crash never enqueues a second child). Fenced (lease_lost SJ004 otherwise).
--   * a stored step answers its stored value;
--   * else the child is enqueued (or found, by its key) and marked as this step's
--     child; once it is final, the step stores {"job_id", "state", "result", "error"}
--     (kind child) and answers it;
--   * when any child is still live, the job is parked (no wake-up time; not an
--     attempt; the lease is released) and every row says parked = true: the run must
--     end without settling. The last child's settlement wakes it; it then calls again.
-- Errors: invalid_argument (SJ001) for names and specs of different lengths, a bad
-- name or spec; those of jobs.enqueue_many; lease_lost (SJ004).
-- ---------------------------------------------------------------------------
create or replace function jobs.step_invoke(
  p_id      bigint,
  p_claim   bigint,
  p_names   text[],
  p_specs   jsonb,
  p_lease_s double precision default null
)
returns table (name text, value jsonb, child_id bigint, parked boolean)
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  v_now     timestamptz := jobs.now();
  v_seq     integer;
  v_name    text;
  v_live    boolean := false;
  v_pending text[];
  v_specs   jsonb;
  v_ids     bigint[];
  v_tenant  text;
  v_ord     bigint;
begin
  -- GUARD
  if p_names is null or pg_catalog.cardinality(p_names) = 0
     or p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array'
     or pg_catalog.jsonb_array_length(p_specs) <> pg_catalog.cardinality(p_names)
     or exists (select 1 from pg_catalog.jsonb_array_elements(p_specs) x
                 where pg_catalog.jsonb_typeof(x) <> 'object') then
    perform jobs.raise_error('invalid_argument',
      'names and specs (job spec objects) must be non-empty and of one length');
  end if;
  foreach v_name in array p_names loop
    perform jobs.check_step_name(v_name);
  end loop;
  if (select pg_catalog.count(distinct n) from pg_catalog.unnest(p_names) n)
     <> pg_catalog.cardinality(p_names) then
    perform jobs.raise_error('invalid_argument', 'step names must be distinct');
  end if;
  -- FENCE (locks the job row)
  v_seq := jobs.hold_step(p_id, p_claim, p_lease_s);
  -- A child is of its parent's tenant: one naming another tenant is refused.
  select j.tenant into v_tenant from jobs.job j where j.id = p_id;
  if v_tenant is not null then
    v_ord := jobs.foreign_tenant_spec(p_specs, v_tenant);
    if v_ord is not null then
      perform jobs.raise_error('tenant_refused',
        pg_catalog.format('spec %s: a child of job %s is of its tenant %s, not %s', v_ord, p_id,
                          v_tenant, p_specs -> (v_ord - 1)::integer -> 'tenant'));
    end if;
  end if;

  -- ENQUEUE the child of every step not stored yet (created, or found by its key).
  select pg_catalog.array_agg(u.n order by u.ord),
         pg_catalog.jsonb_agg(case when p_specs->(u.ord::integer - 1) ? 'key'
                                   then p_specs->(u.ord::integer - 1)
                                   else p_specs->(u.ord::integer - 1)
                                        || pg_catalog.jsonb_build_object('key', p_id || ':' || u.n)
                              end
                              || case when v_tenant is null then '{}'::jsonb
                                      else pg_catalog.jsonb_build_object('tenant', v_tenant) end
                              order by u.ord)
    into v_pending, v_specs
    from pg_catalog.unnest(p_names) with ordinality as u(n, ord)
   where not exists (select 1 from jobs.step s where s.job_id = p_id and s.name = u.n);
  if v_pending is not null then
    v_ids := array(select x.id from jobs.enqueue_many(v_specs) x order by x.ord);
    update jobs.job as c
       set parent_id = p_id, parent_step = m.n
      from unnest(v_pending, v_ids) as m(n, cid)
     where c.id = m.cid and c.parent_id is null;
    -- STORE the outcome of every child already final.
    insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at)
    select p_id, m.n, v_seq, 'child',
           pg_catalog.jsonb_build_object('job_id', c.id, 'state', c.state, 'result', c.result,
                                         'error', c.last_error),
           v_now
      from unnest(v_pending, v_ids) as m(n, cid)
      join jobs.job c on c.id = m.cid
     where c.state in ('succeeded', 'failed', 'dead', 'cancelled')
    on conflict (job_id, name) do nothing;
    v_live := exists (select 1 from pg_catalog.unnest(v_ids) as m(cid)
                        join jobs.job c on c.id = m.cid
                       where c.state not in ('succeeded', 'failed', 'dead', 'cancelled'));
  end if;

  -- PARK while any child is live.
  if v_live then
    perform jobs.nack_many(array[p_id], array[p_claim], null, array['park'], null);
  end if;
  return query
    select u.n, s.value, coalesce((s.value->>'job_id')::bigint, m.cid), v_live
      from pg_catalog.unnest(p_names) with ordinality as u(n, ord)
      left join jobs.step s on s.job_id = p_id and s.name = u.n
      left join unnest(v_pending, v_ids) as m(n, cid) on m.n = u.n
     order by u.ord;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.step_unwound(id, claim) -> the job's final state.
-- Ends the unwind of a compensating, running job: it settles in the state the unwind
-- recorded (failed, dead or cancelled), with the recorded error as last_error.
-- Fenced (lease_lost SJ004); invalid_argument (SJ001) when no unwind was recorded.
-- ---------------------------------------------------------------------------
create or replace function jobs.step_unwound(p_id bigint, p_claim bigint)
returns jobs.job_state
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_unwind  jsonb;
  v_state   jobs.job_state;
  v_watched boolean;
begin
  perform jobs.hold_step(p_id, p_claim, null);
  select s.value into v_unwind from jobs.step s where s.job_id = p_id and s.name = 'sqljobs.unwind';
  if v_unwind is null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('job %s is not unwinding', p_id));
  end if;
  update jobs.job as j
     set state = (v_unwind->>'state')::jobs.job_state,
         compensating = false,
         finished_at = jobs.now(),
         lease_expires_at = null,
         last_error = case when pg_catalog.jsonb_typeof(v_unwind->'error') = 'object'
                           then (v_unwind->'error')
                                || pg_catalog.jsonb_build_object('compensated', true,
                                                                 'at', jobs.now())
                           else j.last_error end
   where j.id = p_id
  returning j.state, j.settle_watched into v_state, v_watched;
  -- a result waiter hears of the end of the unwind; nobody else is notified (40_settle)
  if v_watched then
    perform jobs.notify_settled(array[p_id]);
  end if;
  return v_state;
end
$$;

-- === sql/60_events.sql ===

-- jobs.event_lock_key(name): version 1's advisory lock key of an event name. Nothing
-- calls it since version 2 (row locks, below); a released function stays until the
-- release its retirement names (migrations/versions/RETIRED).
create or replace function jobs.event_lock_key(p_name text)
returns bigint
language sql
immutable
set search_path = ''
as $$ select pg_catalog.hashtextextended('sqljobs.event:' || p_name, 0) $$;

-- jobs.event_locks(tenant, names, waiting) -> lock keys and modes for jobs.lock_keys
-- (sql/10_errors.sql): what an emit or a wait of these event names by that tenant
-- (null: none) must hold so that a wait's look-back and an emit's wake-up never run
-- concurrently for one name. An emit of tenant T shares 'event|T|<name>'; an emit
-- without a tenant (it wakes every tenant's waiters) takes 'event||<name>' exclusive;
-- a wait of tenant T takes 'event|T|<name>' exclusive and shares 'event||<name>'; a
-- wait of a job without a tenant takes 'event||<name>' exclusive. So emits of one
-- tenant never wait on another tenant's, and a tenant's session can hold up only its
-- own tenant's emits and waits, or (by a wait held open) the emits without a tenant.
create or replace function jobs.event_locks(p_tenant text, p_names text[], p_waiting boolean,
                                            out keys text[], out modes text[])
language sql
immutable
set search_path = ''
as $$
  select pg_catalog.array_agg(l.key order by l.key), pg_catalog.array_agg(l.mode order by l.key)
    from pg_catalog.unnest(p_names) as n(name)
   cross join lateral (
     values ('event|' || coalesce(p_tenant, '') || '|' || n.name,
             case when p_waiting or p_tenant is null then 'update' else 'share' end),
            (case when p_waiting and p_tenant is not null then 'event||' || n.name end, 'share')
   ) as l(key, mode)
   where l.key is not null
$$;

-- ---------------------------------------------------------------------------
-- jobs.emit_event(name, payload) -> the event's id.
-- Records the event and makes every parked job with a matching open wait ready now
-- (notifying its queue's workers on jobs_wake, once per queue).
-- Errors: invalid_argument (SJ001) for a missing name or a payload that is not an
-- object; payload_too_large (SJ002).
-- ---------------------------------------------------------------------------
create or replace function jobs.emit_event(p_name text, p_payload jsonb default '{}')
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_id     bigint;
  v_queues text[];
  v_tenant text := jobs.bound_tenant();  -- wakes only this tenant's waiters (null: all)
begin
  -- GUARD
  perform jobs.check_name(p_name, 'an event name');
  if p_payload is null or pg_catalog.jsonb_typeof(p_payload) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'an event payload must be a JSON object');
  end if;
  perform jobs.check_value(p_payload, 'an event payload');
  if pg_catalog.octet_length(p_payload::text) > jobs.max_payload_bytes() then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('event payload is larger than %s bytes', jobs.max_payload_bytes()));
  end if;
  -- LOCK (jobs.event_locks: emits of one name and tenant run side by side; waits on it
  -- wait for us)
  perform jobs.lock_keys(l.keys, l.modes) from jobs.event_locks(v_tenant, array[p_name], false) l;
  -- WRITE
  insert into jobs.event as e (name, payload, created_at, tenant)
  values (p_name, p_payload, jobs.now(), v_tenant)
  returning e.id into v_id;
  -- WAKE every parked job with a matching open wait.
  with woken as (
    update jobs.job as j
       set state = 'ready', run_at = jobs.now()
      from (select distinct w.job_id
              from jobs.event_wait w
             where w.names @> array[p_name]
               and exists (select 1 from pg_catalog.jsonb_array_elements(w.specs) x
                            where x->>'event' = p_name
                              and p_payload @> coalesce(x->'match', '{}'::jsonb))
             order by w.job_id) as m
     where j.id = m.job_id and j.state = 'parked'
       and (v_tenant is null or j.tenant = v_tenant)
    returning j.queue
  )
  select array(select distinct woken.queue from woken) into v_queues;
  perform jobs.wake(v_queues);
  return v_id;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.step_wait(id, claim, name, specs, timeout_s, lease_s) -> (value, parked).
--
-- A durable event wait, step `name` of job `id` (fenced: lease_lost SJ004 otherwise).
--   * stored already: answers the stored outcome, parked = false.
--   * else registers the wait (once; its deadline = first call + timeout_s, or none)
--     and looks back for the first matching event (by id) with created_at between the
--     job's first claim and the deadline, not consumed by another step of this job:
--       found        -> stores {"event", "payload", "id"} (kind event), parked = false
--       deadline hit -> stores {"timeout": true} (kind timeout), parked = false
--       otherwise    -> parks the job until the deadline (not an attempt; the lease is
--                       released), parked = true: the run must end without settling.
--                       A matching emit, or the deadline, wakes it; it then calls again.
-- specs: a non-empty JSON array of {"event": name, "match": object (optional)}.
-- Extends the lease to now + lease_s when it does not park (left as is when null).
-- ---------------------------------------------------------------------------
create or replace function jobs.step_wait(
  p_id        bigint,
  p_claim     bigint,
  p_name      text,
  p_specs     jsonb,
  p_timeout_s double precision default null,
  p_lease_s   double precision default null
)
returns table (value jsonb, parked boolean)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now      timestamptz := jobs.now();
  v_seq      integer;
  v_value    jsonb;
  v_names    text[];
  v_cursor   timestamptz;
  v_deadline timestamptz;
  v_event    record;
  v_tenant   text;  -- the job's
begin
  -- GUARD
  perform jobs.check_step_name(p_name);
  if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array'
     or pg_catalog.jsonb_array_length(p_specs) = 0
     or exists (select 1 from pg_catalog.jsonb_array_elements(p_specs) x
                 where pg_catalog.jsonb_typeof(x) <> 'object'
                    or pg_catalog.jsonb_typeof(x->'event') is distinct from 'string'
                    or x->>'event' = '' or pg_catalog.octet_length(x->>'event') > 200
                    or (x ? 'match' and pg_catalog.jsonb_typeof(x->'match') <> 'object')) then
    perform jobs.raise_error('invalid_argument',
      'specs must be a non-empty array of {"event": name (at most 200 bytes), "match": object}');
  end if;
  perform jobs.check_value(p_specs, 'specs');
  if p_timeout_s < 0 or p_timeout_s > 1e9 then  -- (NaN too: it sorts above every number)
    perform jobs.raise_error('invalid_argument', 'timeout_s must be 0 to 1e9 seconds');
  end if;
  -- FENCE (locks the job row)
  v_seq := jobs.hold_step(p_id, p_claim, p_lease_s);
  select s.value into v_value from jobs.step s where s.job_id = p_id and s.name = p_name;
  if found then
    return query select v_value, false;
    return;
  end if;
  -- LOCK every name (jobs.event_locks, the job's tenant), in key order.
  v_names := array(select distinct x->>'event' from pg_catalog.jsonb_array_elements(p_specs) x
                    order by 1);
  perform jobs.lock_keys(l.keys, l.modes)
     from jobs.event_locks((select j.tenant from jobs.job j where j.id = p_id), v_names, true) l;
  -- REGISTER once (a later call keeps the first deadline).
  insert into jobs.event_wait as w (job_id, step, specs, names, deadline, created_at)
  values (p_id, p_name, p_specs, v_names,
          case when p_timeout_s is null then 'infinity'
               else v_now + pg_catalog.make_interval(secs => p_timeout_s) end,
          v_now)
  on conflict (job_id, step) do nothing;
  select w.deadline, w.specs into v_deadline, p_specs
    from jobs.event_wait w where w.job_id = p_id and w.step = p_name;
  select coalesce(j.first_started_at, j.created_at), j.tenant into v_cursor, v_tenant
    from jobs.job j where j.id = p_id;
  -- LOOK BACK
  select e.id, e.name, e.payload into v_event
    from jobs.event e
   where e.name = any (v_names)
     and e.created_at >= v_cursor
     and e.created_at <= v_deadline
     and (e.tenant is null or e.tenant = v_tenant)  -- another tenant's events are not seen
     and exists (select 1 from pg_catalog.jsonb_array_elements(p_specs) x
                  where x->>'event' = e.name and e.payload @> coalesce(x->'match', '{}'::jsonb))
     and not exists (select 1 from jobs.step s where s.job_id = p_id and s.event_id = e.id)
   order by e.id
   limit 1;
  if v_event.id is not null then
    v_value := pg_catalog.jsonb_build_object('event', v_event.name, 'payload', v_event.payload,
                                             'id', v_event.id);
    insert into jobs.step (job_id, name, ordinal, kind, value, event_id, created_at)
    values (p_id, p_name, v_seq, 'event', v_value, v_event.id, v_now);
  elsif v_deadline <= v_now then
    v_value := '{"timeout": true}'::jsonb;
    insert into jobs.step (job_id, name, ordinal, kind, value, created_at)
    values (p_id, p_name, v_seq, 'timeout', v_value, v_now);
  else
    -- PARK until the deadline (or a matching emit).
    perform jobs.nack_many(array[p_id], array[p_claim], null, array['park'],
      array[case when v_deadline = 'infinity' then null
                 else extract(epoch from v_deadline - v_now)::double precision end]);
    return query select null::jsonb, true;
    return;
  end if;
  delete from jobs.event_wait w where w.job_id = p_id and w.step = p_name;
  return query select v_value, false;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.purge_events(before, max) -> events deleted: at most p_max events created
-- before p_before, oldest first. A wait looks back only to its job's first claim, so
-- keep events at least as long as your longest-running waiting job.
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_events(p_before timestamptz, p_max integer default 10000)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_n integer;
begin
  perform jobs.fleet_only('jobs.purge_events');  -- (sql/15_tenancy.sql)
  if p_before is null or p_max is null or p_max not between 1 and 100000 then
    perform jobs.raise_error('invalid_argument', 'purge_events needs a time and 1 <= max <= 100000');
  end if;
  delete from jobs.event as e
   where e.id in (select o.id from jobs.event o where o.created_at < p_before
                   order by o.created_at limit p_max);
  get diagnostics v_n = row_count;
  return v_n;
end
$$;

-- === sql/70_outbox.sql ===

-- ---------------------------------------------------------------------------
-- jobs.stage_many(specs jsonb) -> (ord, id, outcome), one row per spec in input order.
--
-- Contract:
--   * A spec is an enqueue spec (sql/20_enqueue.sql) plus `ordering_key`; on_conflict
--     is refused (staging always answers an existing key as 'deduped'). Refuses the
--     whole call before the first write: invalid_argument SJ001, payload_too_large SJ002.
--   * delay_s is turned into run_at at stage time (the delay counts from staging).
--   * outcome 'staged': a new row whose id is its future job's id; 'deduped': the key
--     already has a job (its id) or an unpublished staged row (its id).
--   * Writes in the caller's transaction; notifies 'jobs_outbox' once.
-- Locks: the lock row of each distinct (tenant, ordering key) (jobs.lock_keys, in key
--   order), held to commit, so one key's rows are staged one transaction at a time;
--   then the insert, in (name, tenant, key) order.
-- ---------------------------------------------------------------------------
create or replace function jobs.stage_many(p_specs jsonb)
returns table (ord integer, id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_problem text;
  v_created bigint[];
begin
  -- GUARD: shape of the extra field, then the enqueue spec rules, before any write.
  if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array' then
    perform jobs.raise_error('invalid_argument', 'specs must be a JSON array of job specs');
  end if;
  select pg_catalog.format('spec %s: %s', e.ord, case
           when pg_catalog.jsonb_typeof(e.spec) = 'object' and e.spec ? 'on_conflict'
             then 'on_conflict is not accepted by stage: an existing key is always answered as deduped'
           else 'ordering_key must be a non-empty string of at most 1000 bytes' end)
    into v_problem
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
   where pg_catalog.jsonb_typeof(e.spec) = 'object'
     and (e.spec ? 'on_conflict'
          or (e.spec ? 'ordering_key' and pg_catalog.jsonb_typeof(e.spec->'ordering_key') <> 'null'
              and (pg_catalog.jsonb_typeof(e.spec->'ordering_key') <> 'string'
                   or e.spec->>'ordering_key' = ''
                   or pg_catalog.octet_length(e.spec->>'ordering_key') > 1000)))
   order by e.ord
   limit 1;
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  -- the job fields, checked as enqueue_many checks them (ordering_key is the outbox's own)
  perform jobs.check_specs(
    (select coalesce(pg_catalog.jsonb_agg(
              case when pg_catalog.jsonb_typeof(e.spec) = 'object' then e.spec - 'ordering_key'
                   else e.spec end order by e.ord), '[]')
       from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)));
  p_specs := jobs.tenant_specs(p_specs);  -- a tenant-bound session's tenant (sql/15_tenancy.sql)

  -- LOCK ACQUISITION: the lock row of each (tenant, ordering key), in key order
  -- (jobs.lock_keys: a tenant's session can hold up only its own tenant's keys).
  perform jobs.lock_keys(k.keys, array(select 'update' from pg_catalog.unnest(k.keys)))
     from (select array(select distinct 'outbox|' || coalesce(e.spec->>'tenant', '') || '|'
                                        || (e.spec->>'ordering_key')
                          from pg_catalog.jsonb_array_elements(p_specs) as e(spec)
                         where e.spec->>'ordering_key' is not null) as keys) k;

  -- WRITE: keys with no job and no unpublished staged row; a key repeated in the batch
  -- is staged from its first spec.
  with ins as (
    insert into jobs.outbox as o (name, tenant, key, ordering_key, spec, staged_at)
    select e.spec->>'name', e.spec->>'tenant', e.spec->>'key', e.spec->>'ordering_key',
           case when e.spec->>'delay_s' is null then e.spec - 'ordering_key'
                else e.spec - 'ordering_key' - 'delay_s'
                     || pg_catalog.jsonb_build_object('run_at', v_now
                          + pg_catalog.make_interval(secs => (e.spec->>'delay_s')::double precision))
           end,
           v_now
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     where jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key') is null
     order by e.ord
    on conflict (name, (coalesce(tenant, '')), key) where published_at is null do nothing
    returning o.id
  )
  select pg_catalog.array_agg(ins.id) into v_created from ins;

  if v_created is not null
     and coalesce(pg_catalog.current_setting('jobs.notify', true), '') <> 'off' then
    perform pg_catalog.pg_notify('jobs_outbox', '');
  end if;

  -- ANSWER: the job of the key when there is one, else its unpublished staged row.
  return query
    select a.ord::integer, a.id,
           case when a.id = any (coalesce(v_created, '{}')) and a.first then 'staged'
                else 'deduped' end
      from (select e.ord, coalesce(j.id, o.id) as id,
                   pg_catalog.row_number() over (partition by coalesce(j.id, o.id)
                                                 order by e.ord) = 1 as first
              from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
             cross join lateral (select jobs.job_of_key(e.spec->>'name', e.spec->>'tenant',
                                                        e.spec->>'key') as id) j
              left join lateral (select b.id from jobs.outbox b
                                  where b.name = e.spec->>'name'
                                    and coalesce(b.tenant, '') = coalesce(e.spec->>'tenant', '')
                                    and b.key = e.spec->>'key' and b.published_at is null) o
                     on true) a
     order by a.ord;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.relay(batch, relay_id, lease_s) -> (published, deduped, held): one relay step.
--
-- Contract (one transaction):
--   PUBLISH  every unpublished row claimed_by = p_relay_id (what this relay claimed on
--            its previous call), fenced on claimed_by: a row another relay took over
--            after this one's lease lapsed is not touched. Each becomes a job with the
--            row's id (created), or, when its key already has a job, records that job
--            (deduped): a repeated publish never makes a second job. Rows are marked
--            published (published_at, job_id, outcome) and their claim cleared.
--   CLAIM    up to p_batch unpublished rows, in id order, that no live lease holds
--            (unclaimed, or lease_expires_at <= now): sets claimed_by, claim + 1 (the
--            fencing token) and lease_expires_at = now + p_lease_s. A row of an
--            ordering key is claimed only when every earlier unpublished row of that key
--            is claimed with it, so one key is never in flight in two relays; and of
--            the ordering keys among those rows, one call takes at most half (rounded
--            up, oldest first), so that a relay never holds every key and starves the
--            others.
--   Answers published (rows marked published now), deduped (of those, rows whose key
--   already had a job) and held (rows claimed now, published by the next call).
-- Refuses (invalid_argument SJ001): p_batch < 0 or > 10000, an empty relay id, a
--   lease_s that is not positive and finite.
-- Locks: outbox rows (held rows, then claimed rows with skip locked, in id order), then
--   job rows by insert in id order; notifies jobs_wake once per queue made runnable.
-- ---------------------------------------------------------------------------
create or replace function jobs.relay(
  p_batch    integer,
  p_relay_id text,
  p_lease_s  double precision default 30
)
returns table (published integer, deduped integer, held integer)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now       timestamptz := jobs.now();
  v_published integer := 0;
  v_deduped   integer := 0;
  v_held      integer := 0;
  v_specs     jsonb;
  v_ids       bigint[];
  v_created   bigint[];
  v_wake      text[];
begin
  perform jobs.fleet_only('jobs.relay');  -- (sql/15_tenancy.sql)
  -- GUARD
  if p_batch is null or p_batch < 0 or p_batch > 10000 then
    perform jobs.raise_error('invalid_argument', 'batch must be between 0 and 10000');
  end if;
  perform jobs.check_name(p_relay_id, 'relay_id');
  -- bounded (about 31 years): now + lease must stay a timestamp (NaN is refused too)
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument', 'lease_s must be positive and at most 1e9 seconds');
  end if;

  -- PUBLISH: the rows this relay holds, as jobs under their own ids (jobs.insert_jobs).
  select pg_catalog.jsonb_agg(h.spec order by h.id), pg_catalog.array_agg(h.id order by h.id)
    into v_specs, v_ids
    from (select o.id, o.spec
            from jobs.outbox o
           where o.claimed_by = p_relay_id and o.published_at is null
           order by o.id
             for update) h;
  if v_ids is not null then
    select pg_catalog.array_agg(c.id),
           pg_catalog.array_agg(distinct c.queue) filter (where c.run_at <= v_now)
      into v_created, v_wake
      from jobs.insert_jobs(v_specs, v_now, v_ids) c;
  end if;

  with done as (
    update jobs.outbox o
       set published_at = v_now,
           lease_expires_at = null,
           job_id = case when o.id = any (coalesce(v_created, '{}')) then o.id
                         else jobs.job_of_key(o.name, o.tenant, o.key) end,
           outcome = case when o.id = any (coalesce(v_created, '{}')) then 'created'
                          else 'deduped' end
     where o.claimed_by = p_relay_id and o.published_at is null
    returning o.outcome
  )
  select pg_catalog.count(*)::integer,
         (pg_catalog.count(*) filter (where done.outcome = 'deduped'))::integer
    into v_published, v_deduped
    from done;

  perform jobs.wake(v_wake);

  -- CLAIM: the next batch under a lease; an ordering key only from its head.
  if p_batch > 0 then
    with cand as materialized (
      select o.id, o.ordering_key, coalesce(o.tenant, '') as tenant
        from jobs.outbox o
       where o.published_at is null
         and (o.claimed_by is null or o.lease_expires_at <= v_now)
       order by o.id
       limit p_batch
         for update skip locked
    ),
    -- Per ordering key in the batch: its first unpublished row NOT in the batch (held
    -- by a live lease elsewhere, locked by another relay, or past the limit). Rows of
    -- the key after that one must wait; the seek stops at the first such row.
    keyed as (
      select c.tenant, c.ordering_key, pg_catalog.array_agg(c.id) as ids,
             pg_catalog.min(c.id) as head
        from cand c
       where c.ordering_key is not null
       group by c.tenant, c.ordering_key
    ),
    -- FAIR SHARE: a key is in flight in one relay only, so a relay that took every key
    -- of its window would leave the others nothing to claim until it published. It
    -- takes at most half the keys (rounded up; the oldest heads first) and leaves the
    -- rest of them to the next relay.
    taken as (
      select k.tenant, k.ordering_key, k.ids
        from keyed k
       order by k.head
       limit (select (pg_catalog.count(*) + 1) / 2 from keyed)
    ),
    blocked as (
      select k.tenant, k.ordering_key,
             (select p.id from jobs.outbox p
               where p.ordering_key = k.ordering_key and coalesce(p.tenant, '') = k.tenant
                 and p.published_at is null and p.id <> all (k.ids)
               order by p.id
               limit 1) as first_out
        from taken k
    ),
    ok as (
      select c.id
        from cand c
        left join blocked b on b.ordering_key = c.ordering_key and b.tenant = c.tenant
       where c.ordering_key is null
          or (b.ordering_key is not null and (b.first_out is null or c.id < b.first_out))
    ),
    claimed as (
      update jobs.outbox o
         set claimed_by = p_relay_id,
             claim = o.claim + 1,
             lease_expires_at = v_now + pg_catalog.make_interval(secs => p_lease_s)
        from ok
       where o.id = ok.id
      returning o.id
    )
    select pg_catalog.count(*)::integer into v_held from claimed;
  end if;

  return query select v_published, v_deduped, v_held;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.purge_outbox(retention_s, max) -> (purged, remaining): retention of published
-- rows. Deletes at most p_max rows published more than p_retention_s seconds ago
-- (skip locked, oldest first) and answers how many such rows remain. Unpublished rows
-- are never purged. Refuses a negative or non-finite retention, or p_max < 1.
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_outbox(
  p_retention_s double precision,
  p_max         integer default 1000
)
returns table (purged integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_before timestamptz;
  v_purged integer;
begin
  perform jobs.fleet_only('jobs.purge_outbox');  -- (sql/15_tenancy.sql)
  -- bounded (about 31 years): now - retention must stay a timestamp
  if p_retention_s is null or not (p_retention_s >= 0 and p_retention_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      'retention_s must be zero or more, and at most 1e9 seconds');
  end if;
  if p_max is null or p_max < 1 then
    perform jobs.raise_error('invalid_argument', 'max must be at least 1');
  end if;
  v_before := jobs.now() - pg_catalog.make_interval(secs => p_retention_s);
  with victims as (
    select o.id from jobs.outbox o
     where o.published_at is not null and o.published_at < v_before
     order by o.published_at
     limit p_max
       for update skip locked
  ), gone as (
    delete from jobs.outbox o using victims v where o.id = v.id returning o.id
  )
  select pg_catalog.count(*)::integer into v_purged from gone;
  return query
    select v_purged, (select pg_catalog.count(*) from jobs.outbox o
                       where o.published_at is not null and o.published_at < v_before);
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.outbox_stats() -> one row: pending (unpublished), held (claimed under a live
-- lease), lapsed (claimed, lease lapsed), published (retained), oldest_pending_s.
-- ---------------------------------------------------------------------------
create or replace function jobs.outbox_stats()
returns table (pending bigint, held bigint, lapsed bigint, published bigint,
               oldest_pending_s double precision)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.outbox_stats');  -- (sql/15_tenancy.sql)
  select pg_catalog.count(*) filter (where o.published_at is null),
         pg_catalog.count(*) filter (where o.published_at is null and o.claimed_by is not null
                                       and o.lease_expires_at > jobs.now()),
         pg_catalog.count(*) filter (where o.published_at is null and o.claimed_by is not null
                                       and o.lease_expires_at <= jobs.now()),
         pg_catalog.count(*) filter (where o.published_at is not null),
         coalesce(extract(epoch from jobs.now() - pg_catalog.min(o.staged_at)
                          filter (where o.published_at is null))::double precision, 0)
    from jobs.outbox o
$$;

-- === sql/80_schedule.sql ===

-- ---------------------------------------------------------------------------
-- The scheduler's leadership is the named lease 'scheduler' (jobs.lease, sql/35_limits.sql):
-- jobs.leader_acquire(role, holder, lease_s), jobs.leader_release(role, holder, token)
-- and jobs.leaders() are jobs.lease_acquire / lease_release / leases() under the
-- scheduler's own names.
-- ---------------------------------------------------------------------------
create or replace function jobs.leader_acquire(
  p_role    text,
  p_holder  text,
  p_lease_s double precision
)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.leader_acquire');  -- (sql/15_tenancy.sql)
  return jobs.lease_take(p_role, p_holder, p_lease_s, true);
end
$$;

create or replace function jobs.leader_release(p_role text, p_holder text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.leader_release');  -- (sql/15_tenancy.sql)
  return jobs.lease_give_up(p_role, p_holder, p_token);
end
$$;

-- jobs.leaders(): version 1's view of the leases. Its token column stays (a released
-- result never changes) but is null: a token is its holder's proof (sql/00_schema.sql).
create or replace function jobs.leaders()
returns table (role text, holder text, token bigint, lease_expires_at timestamptz,
               acquired_at timestamptz, live boolean)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.leaders');  -- (sql/15_tenancy.sql)
  select l.name, l.holder, null::bigint, l.lease_expires_at, l.acquired_at, l.live
    from jobs.leases() l
$$;

comment on function jobs.leaders() is 'Leader leases and whether each is live (the token column is always null).';

-- ---------------------------------------------------------------------------
-- jobs.schedule_definition_problem(definition) -> the first thing wrong, or null.
-- Private. Cron syntax is checked by the client (which evaluates it); here: required
-- fields, known fields, a known time zone, the catch-up policy, and options that make a
-- valid enqueue spec.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_definition_problem(p_definition jsonb)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  v_field text;
begin
  if p_definition is null or pg_catalog.jsonb_typeof(p_definition) <> 'object' then
    return 'the definition must be a JSON object';
  end if;
  select f.key into v_field
    from pg_catalog.jsonb_each(p_definition) f
   where f.key <> all (array['job', 'cron', 'timezone', 'catch_up', 'options', 'payload',
                             'origin'])
   limit 1;
  if v_field is not null then
    return 'unknown field ' || pg_catalog.quote_literal(v_field);
  end if;
  select f.key into v_field
    from pg_catalog.jsonb_each(p_definition) f
   where f.key = any (array['job', 'cron', 'timezone', 'catch_up', 'origin'])
     and pg_catalog.jsonb_typeof(f.value) <> 'string'
   limit 1;
  if v_field is not null then
    return pg_catalog.quote_literal(v_field) || ' must be a string';
  end if;
  if coalesce(p_definition->>'job', '') = '' then
    return 'job is required (the job type each occurrence enqueues)';
  end if;
  if pg_catalog.btrim(coalesce(p_definition->>'cron', '')) = '' then
    return 'cron is required';
  end if;
  if p_definition ? 'timezone' and not exists (
       select 1 from pg_catalog.pg_timezone_names z where z.name = p_definition->>'timezone') then
    return 'unknown time zone ' || pg_catalog.quote_literal(p_definition->>'timezone');
  end if;
  if coalesce(p_definition->>'catch_up', 'latest') not in ('all', 'latest', 'none') then
    return 'catch_up must be all, latest or none';
  end if;
  if coalesce(p_definition->>'origin', 'api') not in ('declared', 'api') then
    return 'origin must be declared or api';
  end if;
  if p_definition ? 'options' then
    if pg_catalog.jsonb_typeof(p_definition->'options') <> 'object' then
      return 'options must be a JSON object';
    end if;
    if p_definition->'options' ?| array['name', 'key', 'payload', 'run_at', 'delay_s',
                                        'on_conflict'] then
      return 'options must not carry name, key, payload, run_at, delay_s or on_conflict';
    end if;
  end if;
  return jobs.spec_problem(pg_catalog.jsonb_build_array(
    coalesce(p_definition->'options', '{}')
    || pg_catalog.jsonb_build_object('name', p_definition->>'job', 'key', 'check',
                                     'payload', coalesce(p_definition->'payload', '{}'))));
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.schedule_put(name, definition) -> true when the schedule is new.
--
-- definition: {job, cron, timezone = 'UTC', catch_up = 'latest', options = {},
-- payload = {}, origin = 'api'}. A new schedule's watermark is now: it fires the first
-- occurrence after it was added, never the past. Updating keeps paused, the watermark
-- and last_fired_at. Refuses (invalid_argument) an empty name or a bad definition.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_put(p_name text, p_definition jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_problem text;
  v_new     boolean;
begin
  perform jobs.fleet_only('jobs.schedule_put');  -- (sql/15_tenancy.sql)
  perform jobs.check_name(p_name, 'a schedule name');
  perform jobs.check_value(p_definition, 'a schedule definition');
  v_problem := jobs.schedule_definition_problem(p_definition);
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', 'schedule ' || p_name || ': ' || v_problem);
  end if;
  insert into jobs.schedule as s (name, job_name, cron, timezone, catch_up, options, payload,
                                  origin, watermark, created_at, updated_at)
  values (p_name, p_definition->>'job', pg_catalog.btrim(p_definition->>'cron'),
          coalesce(p_definition->>'timezone', 'UTC'),
          coalesce(p_definition->>'catch_up', 'latest'),
          coalesce(p_definition->'options', '{}'), coalesce(p_definition->'payload', '{}'),
          coalesce(p_definition->>'origin', 'api'), v_now, v_now, v_now)
  on conflict (name) do update
     set job_name = excluded.job_name, cron = excluded.cron, timezone = excluded.timezone,
         catch_up = excluded.catch_up, options = excluded.options, payload = excluded.payload,
         origin = excluded.origin,
         updated_at = case when (s.job_name, s.cron, s.timezone, s.catch_up, s.options,
                                 s.payload, s.origin)
                                is distinct from
                                (excluded.job_name, excluded.cron, excluded.timezone,
                                 excluded.catch_up, excluded.options, excluded.payload,
                                 excluded.origin)
                           then v_now else s.updated_at end
  returning (xmax = 0) into v_new;
  return v_new;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.schedule_pause(name) / jobs.schedule_resume(name) / jobs.schedule_remove(name).
-- Refuse schedule_not_found (SJ031) for an unknown name. Resuming moves the watermark
-- to now: occurrences missed while paused are skipped, whatever the catch-up policy.
-- Pausing or resuming twice is harmless.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_pause(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.schedule_pause');  -- (sql/15_tenancy.sql)
  update jobs.schedule s set paused = true, updated_at = jobs.now()
   where s.name = p_name and not s.paused;
  if not found and not exists (select 1 from jobs.schedule s where s.name = p_name) then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

create or replace function jobs.schedule_resume(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.schedule_resume');  -- (sql/15_tenancy.sql)
  update jobs.schedule s
     set paused = false, updated_at = jobs.now(), watermark = greatest(s.watermark, jobs.now())
   where s.name = p_name and s.paused;
  if not found and not exists (select 1 from jobs.schedule s where s.name = p_name) then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

create or replace function jobs.schedule_remove(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.schedule_remove');  -- (sql/15_tenancy.sql)
  delete from jobs.schedule s where s.name = p_name;
  if not found then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.schedules() -> every schedule, by name.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedules()
returns table (name text, job_name text, cron text, timezone text, catch_up text,
               options jsonb, payload jsonb, paused boolean, origin text,
               watermark timestamptz, last_fired_at timestamptz, created_at timestamptz,
               updated_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.schedules');  -- (sql/15_tenancy.sql)
  select s.name, s.job_name, s.cron, s.timezone, s.catch_up, s.options, s.payload, s.paused,
         s.origin, s.watermark, s.last_fired_at, s.created_at, s.updated_at
    from jobs.schedule s
   order by s.name
$$;

-- ---------------------------------------------------------------------------
-- jobs.occurrence_key(schedule, occurrence) -> '<schedule>@YYYY-MM-DDTHH:MI:SSZ'
-- (the occurrence in UTC, to the second; fractions are kept when present).
-- ---------------------------------------------------------------------------
create or replace function jobs.occurrence_key(p_schedule text, p_occurrence timestamptz)
returns text
language sql
immutable
set search_path = ''
as $$
  select p_schedule || '@'
         || pg_catalog.to_char(p_occurrence at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
         || case when pg_catalog.date_part('microseconds', p_occurrence)::bigint % 1000000 = 0
                 then ''
                 else pg_catalog.rtrim(pg_catalog.to_char(p_occurrence at time zone 'UTC', '.US'), '0')
            end
         || 'Z'
$$;

-- ---------------------------------------------------------------------------
-- jobs.schedule_fire(name, occurrences, watermark, token) -> (occurrence, job_id, outcome)
--
-- Contract (one transaction; the watermark moves with the fire):
--   GUARD    p_token must be the live 'scheduler' lease's token, else not_leader (SJ030),
--            nothing written. An unknown schedule is schedule_not_found (SJ031). The
--            watermark must be given, not in the future, and not before any occurrence
--            given; occurrences must not be in the future (invalid_argument SJ001).
--   SKIP     a paused schedule fires nothing and keeps its watermark (answers no row).
--            Occurrences at or before the current watermark are already done: not fired,
--            not answered (a repeat, a restart or a skewed clock).
--   FIRE     the other occurrences, oldest first, through jobs.enqueue_many with the key
--            jobs.occurrence_key(name, occurrence), the schedule's options and payload,
--            run_at = the occurrence: created, or deduped when it was fired before.
--   MOVE     watermark = greatest(current, p_watermark); last_fired_at = the latest fired.
-- Locks: the 'scheduler' leader row FOR SHARE (a takeover waits), then the schedule row
--   FOR UPDATE (one fire per schedule at a time), then job rows by enqueue_many.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_fire(
  p_name        text,
  p_occurrences timestamptz[],
  p_watermark   timestamptz,
  p_token       bigint
)
returns table (occurrence timestamptz, job_id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_live    boolean;
  v_s       record;
  v_due     timestamptz[];
  v_specs   jsonb;
begin
  perform jobs.fleet_only('jobs.schedule_fire');  -- (sql/15_tenancy.sql)
  -- GUARD: the leader lease, held for share until commit.
  select l.holder is not null and l.lease_expires_at > v_now and l.token = p_token
    into v_live
    from jobs.lease l
   where l.name = 'scheduler'
     for share;
  if not coalesce(v_live, false) then
    perform jobs.raise_error('not_leader',
      pg_catalog.format('token %s does not hold the live scheduler lease', p_token),
      null, 'stop dispatching and acquire the lease again (jobs.leader_acquire)');
  end if;
  if p_watermark is null or p_watermark > v_now then
    perform jobs.raise_error('invalid_argument', 'the watermark must be given and not in the future');
  end if;
  if exists (select 1 from pg_catalog.unnest(p_occurrences) o(at)
              where o.at is null or o.at > p_watermark) then
    perform jobs.raise_error('invalid_argument',
      'occurrences must be given, and at or before the watermark (never in the future)');
  end if;

  -- LOCK: the schedule.
  select s.name, s.job_name, s.options, s.payload, s.paused, s.watermark
    into v_s
    from jobs.schedule s
   where s.name = p_name
     for update;
  if not found then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
  if v_s.paused then
    return;
  end if;

  -- FIRE: occurrences after the watermark, oldest first.
  select pg_catalog.array_agg(distinct o.at order by o.at)
    into v_due
    from pg_catalog.unnest(p_occurrences) o(at)
   where o.at > v_s.watermark;
  if v_due is not null then
    select pg_catalog.jsonb_agg(
             v_s.options || pg_catalog.jsonb_build_object(
               'name', v_s.job_name, 'key', jobs.occurrence_key(v_s.name, d.at),
               'payload', v_s.payload, 'run_at', d.at)
             order by d.at)
      into v_specs
      from pg_catalog.unnest(v_due) d(at);
  end if;

  -- MOVE: the watermark, in this transaction.
  update jobs.schedule s
     set watermark = greatest(s.watermark, p_watermark),
         last_fired_at = coalesce(v_due[pg_catalog.array_length(v_due, 1)], s.last_fired_at)
   where s.name = p_name;

  if v_specs is not null then
    return query
      select v_due[e.ord], e.id, e.outcome
        from jobs.enqueue_many(v_specs) e
       order by e.ord;
  end if;
end
$$;

-- === sql/90_operator.sql ===

-- ---------------------------------------------------------------------------
-- Filter plumbing.
-- ---------------------------------------------------------------------------
create or replace function jobs.filter_values(p_filter jsonb, p_field text)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
begin
  -- An absent field matches everything. (Not `case ... when null`: null never equals.)
  if p_filter->p_field is null then
    return null;
  end if;
  case pg_catalog.jsonb_typeof(p_filter->p_field)
    when 'string' then return array[p_filter->>p_field];
    when 'array' then
      if exists (select 1 from pg_catalog.jsonb_array_elements(p_filter->p_field) e
                  where pg_catalog.jsonb_typeof(e) <> 'string') then
        perform jobs.raise_error('invalid_argument',
          pg_catalog.format('filter.%s must hold strings', p_field));
      end if;
      return array(select pg_catalog.jsonb_array_elements_text(p_filter->p_field));
    else
      perform jobs.raise_error('invalid_argument',
        pg_catalog.format('filter.%s must be a string or an array of strings', p_field));
  end case;
  return null;
end
$$;

-- The ids of at most p_max jobs matching p_filter in p_states (only those still
-- waiting when p_waiting), locked with skip locked, oldest first. Validates the filter.
create or replace function jobs.ids_where(
  p_filter  jsonb,
  p_states  jobs.job_state[],
  p_max     integer,
  p_waiting boolean default false
)
returns bigint[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_states jobs.job_state[];
begin
  p_filter := jobs.tenant_filter(p_filter);  -- a bound session: its tenant only
  if p_filter is null or pg_catalog.jsonb_typeof(p_filter) <> 'object'
     or exists (select 1 from pg_catalog.jsonb_object_keys(p_filter) k
                 where k not in ('queue', 'name', 'state', 'tenant')) then
    perform jobs.raise_error('invalid_argument',
      'filter must be a JSON object with only queue, name, state, tenant');
  end if;
  if p_max is null or p_max not between 1 and 10000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('max must be between 1 and 10000, got %s', p_max));
  end if;
  begin
    v_states := jobs.filter_values(p_filter, 'state')::jobs.job_state[];
  exception when invalid_text_representation then
    perform jobs.raise_error('invalid_argument', 'filter.state names an unknown state',
      null, 'states: ready, running, parked, succeeded, failed, dead, cancelled, interrupted');
  end;
  return array(
    select j.id
      from jobs.job j
     where j.state = any (p_states)
       and (v_states is null or j.state = any (v_states))
       and (p_filter->'queue' is null or j.queue = any (jobs.filter_values(p_filter, 'queue')))
       and (p_filter->'name' is null or j.name = any (jobs.filter_values(p_filter, 'name')))
       and (p_filter->'tenant' is null or j.tenant = any (jobs.filter_values(p_filter, 'tenant')))
       and (not p_waiting or j.state = 'parked' or j.run_at > jobs.now())
     order by j.id
     limit p_max
       for update skip locked);
end
$$;

create or replace function jobs.count_where(
  p_filter  jsonb,
  p_states  jobs.job_state[],
  p_waiting boolean default false
)
returns bigint
language sql
stable
set search_path = ''
as $$
  select pg_catalog.count(*)
    from jobs.job j, (select jobs.tenant_filter(p_filter) as f) t  -- a bound session: its tenant
   where j.state = any (p_states)
     and (t.f->'state' is null or j.state = any (jobs.filter_values(t.f, 'state')::jobs.job_state[]))
     and (t.f->'queue' is null or j.queue = any (jobs.filter_values(t.f, 'queue')))
     and (t.f->'name' is null or j.name = any (jobs.filter_values(t.f, 'name')))
     and (t.f->'tenant' is null or j.tenant = any (jobs.filter_values(t.f, 'tenant')))
     and (not p_waiting or j.state = 'parked' or j.run_at > jobs.now())
$$;

-- Refuse a one-job verb on a missing job or one in a refused state. Locks the row.
create or replace function jobs.lock_for_verb(
  p_id      bigint,
  p_verb    text,
  p_allowed jobs.job_state[]
)
returns jobs.job_state
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_state jobs.job_state;
begin
  select j.state into v_state from jobs.job j where j.id = p_id for update;
  if v_state is null then
    perform jobs.raise_error('job_not_found', pg_catalog.format('no job has id %s', p_id));
  end if;
  perform jobs.check_tenant(array[p_id]);
  if v_state = any (p_allowed) then
    return v_state;
  end if;
  if v_state = 'running' then
    perform jobs.raise_error('job_running',
      pg_catalog.format('cannot %s job %s: a worker is running it', p_verb, p_id),
      null, 'cancel it first, or wait for it to finish');
  end if;
  perform jobs.raise_error('job_finished',
    pg_catalog.format('cannot %s job %s: it is already %s', p_verb, p_id, v_state));
  return v_state;
end
$$;

-- ---------------------------------------------------------------------------
-- The state changes, each written once and shared by the one-job and bulk forms.
-- ---------------------------------------------------------------------------
create or replace function jobs.apply_cancel(p_ids bigint[])
returns void
language sql
volatile
set search_path = ''
as $$
  with moved as (
    update jobs.job as j
       set state = 'cancelled', finished_at = jobs.now(), lease_expires_at = null,
           -- a running attempt ends here: it joins the history (sql/40_settle.sql)
           attempts = case when j.state = 'running' then
             jobs.attempts_push(j.attempts, pg_catalog.jsonb_build_object(
               'attempt', j.attempt, 'claim', j.claim >> 32, 'worker', j.worker,
               'started_at', j.started_at, 'ended_at', jobs.now(), 'outcome', 'cancelled',
               'error', null))
             else j.attempts end
     where j.id = any (p_ids) and j.state in ('ready', 'running', 'parked', 'interrupted')
    returning j.id, j.state, j.settle_watched
  )
  -- result waiters of watched jobs hear of it (a saga's cancel first unwinds: not yet)
  select jobs.notify_settled(array(
    select moved.id from moved where moved.settle_watched and moved.state = 'cancelled'))
$$;

-- Requeue and promote make jobs runnable now, so they wake their queues' workers.
create or replace function jobs.apply_requeue(p_ids bigint[])
returns void
language sql
volatile
set search_path = ''
as $$
  with moved as (
    update jobs.job as j
       set state = 'ready', attempt = 0, run_at = jobs.now(), finished_at = null,
           lease_expires_at = null, result = null, blocked_on = null,
           -- the waiter that watched it heard it settle; a new one watches it again
           settle_watched = false
     where j.id = any (p_ids) and j.state in ('failed', 'dead', 'cancelled')
    returning j.queue
  )
  select jobs.wake(array(select distinct moved.queue from moved))
$$;

-- jobs.requeue(ids): failed/dead/cancelled jobs -> ready, attempt 0, now.
-- Refuses the whole call, changing nothing, when any id is missing (job_not_found),
-- succeeded (job_not_requeueable) or still live (job_live); then one statement.
create or replace function jobs.requeue(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_id    bigint;
  v_state jobs.job_state;
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0 then
    perform jobs.raise_error('invalid_argument', 'requeue needs at least one job id');
  end if;
  if pg_catalog.array_position(p_ids, null) is not null then
    perform jobs.raise_error('job_not_found', 'no job has id null');
  end if;
  -- LOCK in id order, then GUARD.
  perform 1 from jobs.job j where j.id = any (p_ids) order by j.id for update;
  select i.id into v_id from pg_catalog.unnest(p_ids) i(id)
   where not exists (select 1 from jobs.job j where j.id = i.id) limit 1;
  if v_id is not null then
    perform jobs.raise_error('job_not_found', pg_catalog.format('no job has id %s', v_id));
  end if;
  perform jobs.check_tenant(p_ids);
  select j.id, j.state into v_id, v_state from jobs.job j
   where j.id = any (p_ids) and j.state = 'succeeded' order by j.id limit 1;
  if v_id is not null then
    perform jobs.raise_error('job_not_requeueable',
      pg_catalog.format('job %s succeeded; a success is not run again', v_id),
      null, 'enqueue a new job with a new key to run it again');
  end if;
  select j.id, j.state into v_id, v_state from jobs.job j
   where j.id = any (p_ids) and j.state in ('ready', 'running', 'parked', 'interrupted')
   order by j.id limit 1;
  if v_id is not null then
    perform jobs.raise_error('job_live',
      pg_catalog.format('job %s is %s: it will run without a requeue', v_id, v_state));
  end if;
  -- WRITE
  perform jobs.apply_requeue(p_ids);
end
$$;

-- ---------------------------------------------------------------------------
-- Queues: pause / resume. A paused queue keeps accepting jobs; claims skip it.
-- ---------------------------------------------------------------------------
create or replace function jobs.pause_queue(p_queue text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.pause_queue');  -- (sql/15_tenancy.sql)
  if p_queue is null or p_queue = '' then
    perform jobs.raise_error('invalid_argument', 'queue is required');
  end if;
  insert into jobs.queue as q (name, paused, updated_at) values (p_queue, true, jobs.now())
  on conflict (name) do update set paused = true, updated_at = excluded.updated_at;
end
$$;

create or replace function jobs.resume_queue(p_queue text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.resume_queue');  -- (sql/15_tenancy.sql)
  if p_queue is null or p_queue = '' then
    perform jobs.raise_error('invalid_argument', 'queue is required');
  end if;
  update jobs.queue as q set paused = false, updated_at = jobs.now() where q.name = p_queue;
  perform jobs.wake(array[p_queue]);
end
$$;

create or replace function jobs.job_payload(p_id bigint)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jobs.check_tenant(array[p_id]);
  select j.payload from jobs.job j where j.id = p_id
$$;

comment on function jobs.job_payload(bigint) is
  'The payload of one job, NOT redacted (null when it does not exist): grant it only to whom may read secrets.';

-- ---------------------------------------------------------------------------
-- jobs.declared_queues() -> every queue the database knows of without reading a job:
-- a pause switch (jobs.queue), a job type's queue (jobs.job_type: every worker writes
-- its declared jobs' queues as it starts), a registered worker's queues (jobs.worker),
-- a queue limit (jobs.limit, scope queue), a schedule's queue (jobs.schedule, option
-- "queue") and a queue's own retention rule (jobs.retention). jobs.queue_gauges lists
-- these and every queue holding a live or dead job, so the dashboard and the metrics
-- list one set of queues, and a declared queue whose jobs all finished stays listed
-- (with zeros) instead of vanishing. Read-only; reads those small tables, never jobs.job.
-- ---------------------------------------------------------------------------
create or replace function jobs.declared_queues()
returns table (queue text)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.declared_queues');  -- (sql/15_tenancy.sql)
  return query
  select d.name
    from (select q.name from jobs.queue q
          union
          select t.queue from jobs.job_type t where t.queue is not null
          union
          select u.name from jobs.worker w cross join pg_catalog.unnest(w.queues) as u(name)
          union
          select l.target from jobs.limit l where l.scope = 'queue' and l.target is not null
          union
          select s.options->>'queue' from jobs.schedule s
           where pg_catalog.jsonb_typeof(s.options->'queue') = 'string'
          union
          select r.queue from jobs.retention r where r.queue <> '*') as d(name)
   order by d.name;
end
$$;

comment on function jobs.declared_queues() is
  'Every queue named by a pause switch, job type, worker, queue limit, schedule or retention rule (no job read).';

-- ---------------------------------------------------------------------------
-- jobs.queue_stats_v2(): one row per queue that has jobs, or that
-- jobs.declared_queues() names (zeros when it holds none): the set the dashboard and
-- the metrics list too. It reads only partial indexes: of the live rows (ready,
-- interrupted, running, parked), of the dead ones, and job_finished_idx for the
-- succeeded, failed and cancelled rows that finished within the last
-- jobs.queue_stats_window (a setting; default 24 hours). Its cost follows the backlog
-- and the recent throughput, not the table's history.
-- (v2: jobs.queue_stats() of version 1 has no `limited` column, and a released
-- function's result never changes: it stays, as these columns but the last.)
-- ---------------------------------------------------------------------------
create or replace function jobs.queue_stats_v2()
returns table (
  queue           text,
  paused          boolean,
  ready           bigint,
  running         bigint,
  parked          bigint,
  interrupted     bigint,
  succeeded       bigint,
  failed          bigint,
  dead            bigint,
  cancelled       bigint,
  oldest_ready_s  double precision,
  unserved        bigint,
  limited         bigint
)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.queue_stats_v2');  -- (sql/15_tenancy.sql)
  with window_start as materialized (
    select jobs.now() - coalesce(nullif(pg_catalog.current_setting('jobs.queue_stats_window', true),
                                        ''), '24 hours')::interval as since
  ),
  listed as (  -- each branch reads one partial index (sql/00_schema.sql)
    select c.queue, c.name, c.state, c.run_at, c.blocked_on, c.deferred_by from jobs.job c
     where c.state in ('ready', 'interrupted') and c.blocked_on is null
    union all
    select b.queue, b.name, b.state, b.run_at, b.blocked_on, b.deferred_by from jobs.job b
     where b.blocked_on is not null and b.state in ('ready', 'interrupted')
    union all
    select r.queue, r.name, r.state, r.run_at, r.blocked_on, r.deferred_by from jobs.job r
     where r.state = 'running'
    union all
    select p.queue, p.name, p.state, p.run_at, p.blocked_on, p.deferred_by from jobs.job p
     where p.state = 'parked'
    union all
    select d.queue, d.name, d.state, d.run_at, d.blocked_on, d.deferred_by from jobs.job d
     where d.state = 'dead'
    union all
    select f.queue, f.name, f.state, f.run_at, f.blocked_on, f.deferred_by from jobs.job f
     where f.finished_at is not null
       and f.finished_at >= (select w.since from window_start w)
       and f.state in ('succeeded', 'failed', 'cancelled')
  ),
  unserved as (  -- as jobs.unserved_jobs(), over the rows read above
    select j.queue, pg_catalog.count(*) as waiting
      from listed j
     where j.state in ('ready', 'interrupted')
       and not exists (select 1 from jobs.worker w
                        where w.expires_at > jobs.now()
                          and j.queue = any (w.queues)
                          and j.name = any (w.names))
     group by j.queue
  ),
  full_limits as (  -- global and queue limits with no free slot (sql/35_limits.sql)
    select l.scope, l.target
      from jobs.limit l
     where l.scope in ('global', 'queue') and l.concurrency is not null
       and l.concurrency <= (select pg_catalog.count(*) from jobs.slot s
                              where s.grp = l.name || '|')
  ),
  held as (
    select exists (select from full_limits f where f.scope = 'global') as everywhere,
           array(select f.target from full_limits f where f.scope = 'queue') as queues
  ),
  counts as (
    select j.queue,
           pg_catalog.count(*) filter (where j.state = 'ready') as ready,
           pg_catalog.count(*) filter (where j.state = 'running') as running,
           pg_catalog.count(*) filter (where j.state = 'parked') as parked,
           pg_catalog.count(*) filter (where j.state = 'interrupted') as interrupted,
           pg_catalog.count(*) filter (where j.state = 'succeeded') as succeeded,
           pg_catalog.count(*) filter (where j.state = 'failed') as failed,
           pg_catalog.count(*) filter (where j.state = 'dead') as dead,
           pg_catalog.count(*) filter (where j.state = 'cancelled') as cancelled,
           pg_catalog.min(j.run_at) filter (where j.state in ('ready', 'interrupted')
                                              and j.run_at <= jobs.now()
                                              and j.blocked_on is null) as oldest_ready_at,
           pg_catalog.count(*) filter (where j.state in ('ready', 'interrupted')
                                         and (j.blocked_on is not null
                                              or (j.deferred_by is not null
                                                  and j.run_at > jobs.now())
                                              or (j.run_at <= jobs.now()
                                                  and (h.everywhere or j.queue = any (h.queues)))
                                             )) as limited
      from listed j
     cross join held h
     group by j.queue
  ),
  names as (
    select c.queue from counts c union select d.queue from jobs.declared_queues() d
  )
  select n.queue, coalesce(q.paused, false),
         coalesce(c.ready, 0), coalesce(c.running, 0), coalesce(c.parked, 0),
         coalesce(c.interrupted, 0), coalesce(c.succeeded, 0), coalesce(c.failed, 0),
         coalesce(c.dead, 0), coalesce(c.cancelled, 0),
         coalesce(extract(epoch from jobs.now() - c.oldest_ready_at)::double precision, 0),
         coalesce(u.waiting, 0), coalesce(c.limited, 0)
    from names n
    left join counts c on c.queue = n.queue
    left join jobs.queue q on q.name = n.queue
    left join unserved u on u.queue = n.queue
   order by n.queue
$$;

comment on function jobs.queue_stats_v2() is
  'Per queue: paused, counts by state (succeeded, failed, cancelled: those finished within jobs.queue_stats_window, default 24 hours), age in seconds of the oldest runnable job, how many waiting jobs no live worker declares (unserved), and how many wait on a limit (limited).';

-- jobs.queue_stats(): version 1's shape of jobs.queue_stats_v2() (without `limited`),
-- kept for the clients of version 1.
create or replace function jobs.queue_stats()
returns table (
  queue           text,
  paused          boolean,
  ready           bigint,
  running         bigint,
  parked          bigint,
  interrupted     bigint,
  succeeded       bigint,
  failed          bigint,
  dead            bigint,
  cancelled       bigint,
  oldest_ready_s  double precision,
  unserved        bigint
)
language sql
stable
set search_path = ''
as $$
  select s.queue, s.paused, s.ready, s.running, s.parked, s.interrupted, s.succeeded,
         s.failed, s.dead, s.cancelled, s.oldest_ready_s, s.unserved
    from jobs.queue_stats_v2() s
$$;

comment on function jobs.queue_stats() is
  'Version 1''s jobs.queue_stats_v2(): the same rows without the limited column.';

-- === sql/92_introspection.sql ===

-- Why p_path is not a redaction path (null when it is one).
create or replace function jobs.redaction_path_problem(p_path text)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_segment text;
begin
  if p_path is null or p_path = '' then
    return 'a path is a non-empty string';
  end if;
  foreach v_segment in array pg_catalog.string_to_array(p_path, '.') loop
    if v_segment !~ '^(\*|[^.\[\]*]+)(\[\])*$' then
      return pg_catalog.format(
        'path %L: segment %L is not a key, ''*'', or a key followed by []', p_path, v_segment);
    end if;
  end loop;
  return null;
end
$$;

comment on function jobs.redaction_path_problem(text) is
  'Why a text is not a redaction path (null when it is one).';

-- 'items[].ssn' -> {items,[],ssn}
create or replace function jobs.redaction_path_steps(p_path text)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_segment text;
  v_base    text;
  v_steps   text[] := '{}';
begin
  foreach v_segment in array pg_catalog.string_to_array(p_path, '.') loop
    v_base := pg_catalog.replace(v_segment, '[]', '');
    if v_base <> '' then
      v_steps := v_steps || v_base;
    end if;
    for i in 1 .. (pg_catalog.length(v_segment) - pg_catalog.length(v_base)) / 2 loop
      v_steps := v_steps || '[]'::text;
    end loop;
  end loop;
  return v_steps;
end
$$;

comment on function jobs.redaction_path_steps(text) is
  'A redaction path as its steps: ''items[].ssn'' -> {items,[],ssn}.';

-- p_value with the value at the path p_steps replaced by "[redacted]" (JSON nulls stay).
create or replace function jobs.redact_at(p_value jsonb, p_steps text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_head text := p_steps[1];
  v_rest text[] := p_steps[2:];
  v_type text := pg_catalog.jsonb_typeof(p_value);
begin
  if p_value is null or v_type = 'null' then
    return p_value;
  end if;
  if v_head is null then
    return '"[redacted]"'::jsonb;
  end if;
  if v_head = '[]' then
    if v_type <> 'array' then
      return p_value;
    end if;
    return coalesce((select pg_catalog.jsonb_agg(jobs.redact_at(e.value, v_rest) order by e.n)
                       from pg_catalog.jsonb_array_elements(p_value) with ordinality e(value, n)),
                    '[]'::jsonb);
  end if;
  if v_type <> 'object' then
    return p_value;
  end if;
  if v_head = '*' then
    return coalesce((select pg_catalog.jsonb_object_agg(e.key, jobs.redact_at(e.value, v_rest))
                       from pg_catalog.jsonb_each(p_value) e),
                    '{}'::jsonb);
  end if;
  if not p_value ? v_head then
    return p_value;
  end if;
  return pg_catalog.jsonb_set(p_value, array[v_head], jobs.redact_at(p_value->v_head, v_rest));
end
$$;

comment on function jobs.redact_at(jsonb, text[]) is
  'A JSON value with the value at one path (as steps) replaced by "[redacted]".';

-- A redaction path as a strict jsonpath that reaches every scalar under it:
-- 'items[].ssn' -> strict $."items"[*]."ssn".** (jsonb_path_query runs it in C).
create or replace function jobs.redaction_jsonpath(p_path text)
returns jsonpath
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_step text;
  v_path text := 'strict $';
begin
  foreach v_step in array jobs.redaction_path_steps(p_path) loop
    v_path := v_path || case v_step
      when '[]' then '[*]'
      when '*' then '.*'
      else '."' || pg_catalog.replace(pg_catalog.replace(v_step, '\', '\\'), '"', '\"') || '"'
    end;
  end loop;
  return (v_path || '.**')::jsonpath;
end
$$;

comment on function jobs.redaction_jsonpath(text) is
  'A redaction path as the strict jsonpath of every scalar under it.';

-- The payload with each path's value "[redacted]". p_paths null (the job's name has no
-- job type): the whole payload is "[redacted]", unless it is empty.
create or replace function jobs.redact_payload(p_payload jsonb, p_paths text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_path  text;
  v_value jsonb := p_payload;
begin
  if p_paths is null then
    return case when p_payload is null or p_payload = '{}'::jsonb then p_payload
                else '"[redacted]"'::jsonb end;
  end if;
  foreach v_path in array p_paths loop
    v_value := jobs.redact_at(v_value, jobs.redaction_path_steps(v_path));
  end loop;
  return v_value;
end
$$;

comment on function jobs.redact_payload(jsonb, text[]) is
  'A payload with the value at each path "[redacted]"; all of it when the paths are null (unknown type).';

-- The sensitive values a payload holds at p_paths, at least 3 characters long, longest
-- first (so a value that contains another is replaced whole).
create or replace function jobs.redaction_secrets(p_payload jsonb, p_paths text[])
returns text[]
language sql
immutable
set search_path = ''
as $$
  select coalesce(pg_catalog.array_agg(s.v order by pg_catalog.length(s.v) desc, s.v), '{}')
    from (select distinct l.value #>> '{}' as v
            from pg_catalog.unnest(coalesce(p_paths, '{}')) p(path),
                 pg_catalog.jsonb_path_query(p_payload, jobs.redaction_jsonpath(p.path),
                                             '{}', true) l(value)
           where pg_catalog.jsonb_typeof(l.value) in ('string', 'number', 'boolean')
             and pg_catalog.length(l.value #>> '{}') >= 3) s
$$;

comment on function jobs.redaction_secrets(jsonb, text[]) is
  'The sensitive values (as text, 3 characters or more, longest first) a payload holds at the paths.';

create or replace function jobs.redact_text(p_text text, p_secrets text[])
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_secret text;
  v_text   text := p_text;
begin
  if p_text is null or p_secrets is null then
    return p_text;
  end if;
  foreach v_secret in array p_secrets loop
    v_text := pg_catalog.replace(v_text, v_secret, '[redacted]');
  end loop;
  return v_text;
end
$$;

comment on function jobs.redact_text(text, text[]) is
  'A text with every one of the secrets replaced by [redacted].';

-- Every string inside p_value (object keys too) with the secrets replaced; a number
-- that is one of them becomes "[redacted]".
create or replace function jobs.redact_strings(p_value jsonb, p_secrets text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value is null or p_secrets is null or pg_catalog.cardinality(p_secrets) = 0 then
    return p_value;
  end if;
  case pg_catalog.jsonb_typeof(p_value)
    when 'string' then
      return pg_catalog.to_jsonb(jobs.redact_text(p_value #>> '{}', p_secrets));
    when 'number' then
      return case when (p_value #>> '{}') = any (p_secrets) then '"[redacted]"'::jsonb
                  else p_value end;
    when 'object' then
      return coalesce((select pg_catalog.jsonb_object_agg(jobs.redact_text(e.key, p_secrets),
                                                          jobs.redact_strings(e.value, p_secrets))
                         from pg_catalog.jsonb_each(p_value) e), '{}'::jsonb);
    when 'array' then
      return coalesce((select pg_catalog.jsonb_agg(jobs.redact_strings(e.value, p_secrets) order by e.n)
                         from pg_catalog.jsonb_array_elements(p_value) with ordinality e(value, n)),
                      '[]'::jsonb);
    else
      return p_value;
  end case;
end
$$;

comment on function jobs.redact_strings(jsonb, text[]) is
  'A JSON value with every secret replaced inside its strings (and a number equal to one).';

-- A job's output (progress, last_error, result) with the sensitive values of its payload
-- replaced; what jobs.job_view shows. Nothing to do for a null output or a type without
-- sensitive paths, so the secrets are read only for the outputs that need them.
create or replace function jobs.redact_job_output(p_value jsonb, p_payload jsonb, p_paths text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value is null or p_paths is null or pg_catalog.cardinality(p_paths) = 0 then
    return p_value;
  end if;
  return jobs.redact_strings(p_value, jobs.redaction_secrets(p_payload, p_paths));
end
$$;

comment on function jobs.redact_job_output(jsonb, jsonb, text[]) is
  'A job output (progress, last_error, result) with the sensitive values of its payload at the paths replaced.';

-- jobs.redact(name, payload): the payload as every view shows it. (This and the next
-- are PL/pgSQL so that an upgrade may create them before the functions they call.)
create or replace function jobs.redact(p_name text, p_payload jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return jobs.redact_payload(p_payload,
                             (select t.sensitive_paths from jobs.job_type t where t.name = p_name));
end
$$;

comment on function jobs.redact(text, jsonb) is
  'The payload of a job of this name as views show it: sensitive paths "[redacted]" (all of it for an unknown name).';

-- jobs.redact_output(name, payload, value): an error record, result, progress or step
-- value with the sensitive values of that payload replaced.
create or replace function jobs.redact_output(p_name text, p_payload jsonb, p_value jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return jobs.redact_strings(p_value, jobs.redaction_secrets(p_payload,
           (select t.sensitive_paths from jobs.job_type t where t.name = p_name)));
end
$$;

comment on function jobs.redact_output(text, jsonb, jsonb) is
  'A value a job produced (error, result, progress) with the sensitive values of its payload replaced.';

-- Why p_def is not a job type definition (null when it is one):
--   {"queue": text, "sensitive": [path, ...], "personal": [path, ...],
--    "payload_schema": {...}, "retry": {...}, "timeout_s": number,
--    "origin": "declared" | "api"}, every field optional.
create or replace function jobs.job_type_problem(p_name text, p_def jsonb)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_field   text;
  v_problem text;
begin
  if p_name is null or p_name = '' or pg_catalog.octet_length(p_name) > 200 then
    return 'a job type needs a name of at most 200 bytes';
  end if;
  if p_def is null or pg_catalog.jsonb_typeof(p_def) <> 'object' then
    return 'a job type definition is a JSON object';
  end if;
  if p_def @? jobs.too_deep() then
    return 'a job type definition must be nested less than 100 levels deep';
  end if;
  if pg_catalog.octet_length(p_def->>'queue') > 200 then
    return 'queue must be at most 200 bytes';
  end if;
  select k into v_field from pg_catalog.jsonb_object_keys(p_def) k
   where k not in ('queue', 'sensitive', 'personal', 'payload_schema', 'retry', 'timeout_s',
                   'origin')
   limit 1;
  if v_field is not null then
    return pg_catalog.format('unknown field %L (fields: queue, sensitive, personal, '
                             'payload_schema, retry, timeout_s, origin)', v_field);
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'queue'), 'string') not in ('string', 'null') then
    return 'queue must be a string';
  end if;
  foreach v_field in array array['sensitive', 'personal'] loop
    if coalesce(pg_catalog.jsonb_typeof(p_def->v_field), 'array') <> 'array' then
      return pg_catalog.format('%s must be an array of paths', v_field);
    end if;
    if exists (select 1 from pg_catalog.jsonb_array_elements(coalesce(p_def->v_field, '[]')) e
                where pg_catalog.jsonb_typeof(e) <> 'string') then
      return pg_catalog.format('%s must hold strings', v_field);
    end if;
    select jobs.redaction_path_problem(e) into v_problem
      from pg_catalog.jsonb_array_elements_text(coalesce(p_def->v_field, '[]')) e
     where jobs.redaction_path_problem(e) is not null
     limit 1;
    if v_problem is not null then
      return pg_catalog.format('%s: %s', v_field, v_problem);
    end if;
  end loop;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'payload_schema'), 'object') not in ('object', 'null')
     or coalesce(pg_catalog.jsonb_typeof(p_def->'retry'), 'object') not in ('object', 'null') then
    return 'payload_schema and retry must be JSON objects';
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'timeout_s'), 'number') not in ('number', 'null')
     or (p_def->>'timeout_s')::double precision <= 0 then
    return 'timeout_s must be a positive number';
  end if;
  if coalesce(p_def->>'origin', 'api') not in ('declared', 'api') then
    return 'origin must be declared or api';
  end if;
  return null;
end
$$;

comment on function jobs.job_type_problem(text, jsonb) is
  'Why a job type definition is refused (null when it is fine).';

-- jobs.job_type_write(name, definition, widen) -> true when the type is new. Private:
-- what job_type_put (replace) and job_type_declare (widen) share. A new type is
-- registered as given. Replacing a known one writes every field; widening one only
-- adds: its sensitive and personal paths become the union of the stored and the given
-- ones, its queue and origin are kept, and its schema, retry policy and timeout
-- (descriptions) follow the code. Errors: invalid_job_type (SJ017), nothing written.
create or replace function jobs.job_type_write(p_name text, p_def jsonb, p_widen boolean)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_problem text := jobs.job_type_problem(p_name, p_def);
  v_new     boolean;
begin
  if v_problem is not null then
    perform jobs.raise_error('invalid_job_type', v_problem);
  end if;
  insert into jobs.job_type as t (name, queue, sensitive_paths, personal_paths, payload_schema,
                                  retry, timeout_s, origin, updated_at)
  values (p_name, p_def->>'queue',
          array(select distinct e from pg_catalog.jsonb_array_elements_text(
                  coalesce(p_def->'sensitive', '[]')) e order by e),
          array(select distinct e from pg_catalog.jsonb_array_elements_text(
                  coalesce(p_def->'personal', '[]')) e order by e),
          pg_catalog.jsonb_strip_nulls(p_def)->'payload_schema',
          pg_catalog.jsonb_strip_nulls(p_def)->'retry',
          (p_def->>'timeout_s')::double precision,
          case when p_widen then 'declared' else coalesce(p_def->>'origin', 'api') end, jobs.now())
  on conflict (name) do update
     set queue = case when p_widen then coalesce(t.queue, excluded.queue) else excluded.queue end,
         sensitive_paths = case when p_widen
                             then array(select distinct e from pg_catalog.unnest(
                                    t.sensitive_paths || excluded.sensitive_paths) e order by e)
                             else excluded.sensitive_paths end,
         personal_paths = case when p_widen
                            then array(select distinct e from pg_catalog.unnest(
                                   t.personal_paths || excluded.personal_paths) e order by e)
                            else excluded.personal_paths end,
         payload_schema = excluded.payload_schema, retry = excluded.retry,
         timeout_s = excluded.timeout_s,
         origin = case when p_widen then t.origin else excluded.origin end,
         updated_at = excluded.updated_at
  returning (xmax = 0) into v_new;
  return v_new;
end
$$;

comment on function jobs.job_type_write(text, jsonb, boolean) is
  'Private: register a job type, replacing a known one or (widen) only adding to it; true when new.';

-- jobs.job_type_put(name, definition): register (or replace) a job type; true when it
-- is new. An operator's: it may narrow what a type hides, or move it to another queue.
-- Errors: invalid_job_type (SJ017), nothing written.
create or replace function jobs.job_type_put(p_name text, p_def jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.job_type_put');  -- (sql/15_tenancy.sql)
  return jobs.job_type_write(p_name, p_def, false);
end
$$;

comment on function jobs.job_type_put(text, jsonb) is
  'Register (or replace) a job type and its sensitive and personal paths; true when it is new. SJ017 when refused.';

-- jobs.job_type_declare(name, definition): what a worker writes of the jobs it serves
-- as it starts. A new job type is registered as given (origin 'declared'); a known one
-- only gains: its sensitive and personal paths become the union of the stored and the
-- given ones, and its schema, retry policy and timeout (descriptions) follow the code.
-- What would expose or move a job (dropping a sensitive path, another queue) is an
-- operator's (jobs.job_type_put): a worker's login cannot narrow what every reader's
-- view hides. True when it is new. Errors: invalid_job_type (SJ017), nothing written.
create or replace function jobs.job_type_declare(p_name text, p_def jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.job_type_declare');  -- (sql/15_tenancy.sql)
  return jobs.job_type_write(p_name, p_def, true);
end
$$;

comment on function jobs.job_type_declare(text, jsonb) is
  'A worker''s registration of a job type it serves: new as given, known only widened (redaction kept); true when new.';

-- jobs.job_type_remove(name). Errors: job_type_not_found (SJ016).
create or replace function jobs.job_type_remove(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.job_type_remove');  -- (sql/15_tenancy.sql)
  delete from jobs.job_type t where t.name = p_name;
  if not found then
    perform jobs.raise_error('job_type_not_found', pg_catalog.format('no job type named %L', p_name));
  end if;
end
$$;

comment on function jobs.job_type_remove(text) is
  'Remove a job type (its jobs then show no payload). SJ016 when there is none.';

create or replace function jobs.job_types()
returns table (name text, queue text, sensitive_paths text[], personal_paths text[],
               payload_schema jsonb, retry jsonb, timeout_s double precision, origin text,
               updated_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.job_types');  -- (sql/15_tenancy.sql)
  select t.name, t.queue, t.sensitive_paths, t.personal_paths, t.payload_schema, t.retry,
         t.timeout_s, t.origin, t.updated_at
    from jobs.job_type t
   order by t.name
$$;

comment on function jobs.job_types() is 'Every registered job type with its sensitive and personal paths.';

-- jobs.personal_data(): the job types whose payload holds personal data, and where,
-- with how many jobs of each are stored (for a data-subject export or erase).
create or replace function jobs.personal_data()
returns table (name text, personal_paths text[], jobs bigint)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.personal_data');  -- (sql/15_tenancy.sql)
  select t.name, t.personal_paths,
         (select pg_catalog.count(*) from jobs.job j where j.name = t.name)
    from jobs.job_type t
   where pg_catalog.cardinality(t.personal_paths) > 0
   order by t.name
$$;

comment on function jobs.personal_data() is
  'Job types whose payload holds personal data: their paths and how many jobs are stored.';

-- ---------------------------------------------------------------------------
-- The read side: every view of a job redacts.
-- ---------------------------------------------------------------------------
create or replace view jobs.job_view as
  select j.id, j.name, j.queue, j.tenant, j.key, j.state, j.priority, j.run_at, j.attempt,
         j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.dead_letter,
         -- which claim of the job this is (its token's high bits), never the token: a
         -- live token is its worker's proof (sql/00_schema.sql, "Fencing tokens")
         j.timeout_s, j.claim >> 32 as claim, j.lease_expires_at, j.worker,
         jobs.redact_job_output(j.progress, j.payload, t.sensitive_paths) as progress,
         jobs.redact_job_output(j.last_error, j.payload, t.sensitive_paths) as last_error,
         jobs.redact_job_output(j.result, j.payload, t.sensitive_paths) as result,
         j.traceparent, j.created_at, j.started_at, j.finished_at,
         jobs.redact_payload(j.payload, t.sensitive_paths) as payload,
         j.parent_id, j.parent_step
    from jobs.job j
    left join jobs.job_type t on t.name = j.name
   -- a tenant-bound session sees its tenant's jobs only (sql/15_tenancy.sql); each
   -- sub-select runs once per query
   where (select jobs.bound_tenant()) is null or j.tenant = (select jobs.bound_tenant());

comment on view jobs.job_view is
  'Every job (of the session''s tenant, when bound), redacted: sensitive payload paths "[redacted]", their values hidden in progress, last_error and result.';

-- jobs.list_jobs(filter, after_id, limit): a page of jobs, newest first, redacted.
-- Filter fields: state, queue, name, tenant, key (a string or an array of strings),
-- created_after, created_before, finished_after, finished_before (timestamps). Keyset
-- pagination: pass the last id of a page as p_after_id for the next one.
create or replace function jobs.list_jobs(
  p_filter   jsonb default '{}',
  p_after_id bigint default null,
  p_limit    integer default 50
)
returns setof jobs.job_view
language plpgsql
stable
set search_path = ''
as $$
declare
  v_states jobs.job_state[];
  v_times  timestamptz[];
  v_field  text;
begin
  if p_filter is null or pg_catalog.jsonb_typeof(p_filter) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'filter must be a JSON object');
  end if;
  p_filter := jobs.tenant_filter(p_filter);  -- a bound session: its tenant only
  select k into v_field from pg_catalog.jsonb_object_keys(p_filter) k
   where k not in ('state', 'queue', 'name', 'tenant', 'key', 'created_after', 'created_before',
                   'finished_after', 'finished_before')
   limit 1;
  if v_field is not null then
    perform jobs.raise_error('invalid_argument', pg_catalog.format(
      'unknown filter field %L (fields: state, queue, name, tenant, key, created_after, '
      'created_before, finished_after, finished_before)', v_field));
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('limit must be between 1 and 1000, got %s', p_limit));
  end if;
  begin
    v_states := jobs.filter_values(p_filter, 'state')::jobs.job_state[];
  exception when invalid_text_representation then
    perform jobs.raise_error('invalid_argument', 'filter.state names an unknown state',
      null, 'states: ready, running, parked, succeeded, failed, dead, cancelled, interrupted');
  end;
  begin
    v_times := array[(p_filter->>'created_after')::timestamptz,
                     (p_filter->>'created_before')::timestamptz,
                     (p_filter->>'finished_after')::timestamptz,
                     (p_filter->>'finished_before')::timestamptz];
  exception when invalid_datetime_format or datetime_field_overflow then
    perform jobs.raise_error('invalid_argument', 'filter times must be ISO 8601 timestamps');
  end;
  return query
    select v.id, v.name, v.queue, v.tenant, v.key, v.state, v.priority, v.run_at, v.attempt,
           v.max_attempts, v.retry_base_s, v.retry_cap_s, v.retry_jitter, v.dead_letter,
           v.timeout_s, v.claim, v.lease_expires_at, v.worker, v.progress, v.last_error,
           v.result, v.traceparent, v.created_at, v.started_at, v.finished_at, v.payload,
           v.parent_id, v.parent_step
      from jobs.job_view v
     where (p_after_id is null or v.id < p_after_id)
       and (v_states is null or v.state = any (v_states))
       and (p_filter->'queue' is null or v.queue = any (jobs.filter_values(p_filter, 'queue')))
       and (p_filter->'name' is null or v.name = any (jobs.filter_values(p_filter, 'name')))
       and (p_filter->'tenant' is null or v.tenant = any (jobs.filter_values(p_filter, 'tenant')))
       and (p_filter->'key' is null or v.key = any (jobs.filter_values(p_filter, 'key')))
       and (v_times[1] is null or v.created_at >= v_times[1])
       and (v_times[2] is null or v.created_at < v_times[2])
       and (v_times[3] is null or v.finished_at >= v_times[3])
       and (v_times[4] is null or v.finished_at < v_times[4])
     order by v.id desc
     limit p_limit;
end
$$;

comment on function jobs.list_jobs(jsonb, bigint, integer) is
  'A page of jobs, newest first, redacted; filter by state, queue, name, tenant, key and times; keyset by after_id.';

-- jobs.job_detail(id): one job as JSON, redacted: {"job": its job_view row, "attempts":
-- [...], "steps": [...], "children": [...], "waits": [...]}; null when no job has that
-- id. "attempts" is the job's attempt history (jobs.job.attempts: the last 20 attempts
-- that ended without success, oldest first; [] when none), redacted as last_error is.
-- PL/pgSQL: an upgrade creates it before it replaces jobs.job_view.
create or replace function jobs.job_detail(p_id bigint)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return (
  select pg_catalog.jsonb_build_object(
    'job', pg_catalog.to_jsonb(v),
    'attempts', coalesce(jobs.redact_strings(j.attempts, s.secrets), '[]'::jsonb),
    'steps', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'name', st.name, 'ordinal', st.ordinal, 'kind', st.kind,
               'value', jobs.redact_strings(st.value, s.secrets), 'created_at', st.created_at)
             order by st.ordinal)
        from jobs.step st where st.job_id = j.id), '[]'::jsonb),
    'children', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'id', c.id, 'name', c.name, 'state', c.state, 'parent_step', c.parent_step,
               'attempt', c.attempt, 'finished_at', c.finished_at) order by c.id)
        from jobs.job c where c.parent_id = j.id), '[]'::jsonb),
    'waits', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'step', w.step, 'events', w.names, 'specs', jobs.redact_strings(w.specs, s.secrets),
               'deadline', w.deadline, 'created_at', w.created_at) order by w.created_at, w.step)
        from jobs.event_wait w where w.job_id = j.id), '[]'::jsonb))
    from jobs.job j
    join jobs.job_view v on v.id = j.id
    left join jobs.job_type t on t.name = j.name
   cross join lateral (select jobs.redaction_secrets(j.payload, t.sensitive_paths) as secrets) s
   where j.id = p_id);
end
$$;

comment on function jobs.job_detail(bigint) is
  'One job as JSON, redacted: its job_view row, attempt history, steps, children and open event waits (null when missing).';

-- === sql/93_metrics.sql ===

-- ---------------------------------------------------------------------------
-- jobs.queue_gauges() -> one row per queue that has a live or dead job, or that
-- jobs.declared_queues() names (zeros when it holds nothing):
--   ready           ready or interrupted, due now (run_at <= now), waiting for a worker
--                   or for a limit's slot
--   scheduled       ready or interrupted with run_at in the future (a delay, a retry's
--                   backoff, a rate limit's deferral)
--   running, parked, dead   counts by state
--   blocked         of `ready`, those waiting for a concurrency limit's slot (blocked_on)
--   oldest_ready_s  age (by jobs.now()) of the oldest due job not waiting for a slot; 0: none
--   demand          what the fleet should have slots for: running + the due jobs not
--                   waiting for a slot (0 of those while the queue is paused). Adding
--                   workers beyond it only adds idle slots.
-- Read-only, no locks. Each count reads one partial index: ready and scheduled
-- job_claimable_idx and job_blocked_idx, running job_lease_idx, parked job_parked_idx,
-- dead job_dead_idx.
-- ---------------------------------------------------------------------------
create or replace function jobs.queue_gauges()
returns table (
  queue          text,
  paused         boolean,
  ready          bigint,
  scheduled      bigint,
  running        bigint,
  parked         bigint,
  dead           bigint,
  blocked        bigint,
  oldest_ready_s double precision,
  demand         bigint
)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.queue_gauges');  -- (sql/15_tenancy.sql)
  with clock as materialized (  -- jobs.now() once, not once per row
    select jobs.now() as at
  ),
  waiting as (
    select w.queue,
           pg_catalog.count(*) filter (where w.run_at <= k.at) as ready,
           pg_catalog.count(*) filter (where w.run_at > k.at) as scheduled,
           pg_catalog.count(*) filter (where w.run_at <= k.at
                                         and w.blocked_on is not null) as blocked,
           pg_catalog.min(w.run_at) filter (where w.run_at <= k.at
                                              and w.blocked_on is null) as oldest_at
      from (select c.queue, c.run_at, c.blocked_on from jobs.job c
             where c.state in ('ready', 'interrupted') and c.blocked_on is null
            union all
            select b.queue, b.run_at, b.blocked_on from jobs.job b
             where b.blocked_on is not null and b.state in ('ready', 'interrupted')) w
     cross join clock k
     group by w.queue
  ),
  running as (
    select r.queue, pg_catalog.count(*) as n from jobs.job r
     where r.state = 'running' group by r.queue
  ),
  parked as (
    select p.queue, pg_catalog.count(*) as n from jobs.job p
     where p.state = 'parked' group by p.queue
  ),
  dead as (
    select d.queue, pg_catalog.count(*) as n from jobs.job d
     where d.state = 'dead' group by d.queue
  ),
  names as (
    select w.queue from waiting w union select r.queue from running r
    union select p.queue from parked p union select d.queue from dead d
    union select dq.queue from jobs.declared_queues() dq
  )
  select n.queue, coalesce(q.paused, false),
         coalesce(w.ready, 0), coalesce(w.scheduled, 0), coalesce(r.n, 0), coalesce(p.n, 0),
         coalesce(d.n, 0), coalesce(w.blocked, 0),
         coalesce(extract(epoch from k.at - w.oldest_at)::double precision, 0),
         coalesce(r.n, 0) + case when coalesce(q.paused, false) then 0
                                 else coalesce(w.ready, 0) - coalesce(w.blocked, 0) end
    from names n
    cross join clock k
    left join waiting w on w.queue = n.queue
    left join running r on r.queue = n.queue
    left join parked p on p.queue = n.queue
    left join dead d on d.queue = n.queue
    left join jobs.queue q on q.name = n.queue
   order by n.queue
$$;

comment on function jobs.queue_gauges() is
  'Per queue (every declared queue, and every queue with a live or dead job), from the live rows'' indexes: ready (due), scheduled (future), running, parked, dead, blocked on a limit, oldest ready age in seconds, and demand (running + due jobs a worker could take).';

-- ---------------------------------------------------------------------------
-- jobs.limit_gauges() -> one row per limit (and 'sqljobs.throttle' for the throttled
-- groups of every job): jobs.limit_stats() summed over the limit's groups, so a metric
-- label is the limit's name and never a group key (a tenant, a payload value).
--   groups       groups in use or waiting
--   running      jobs holding a slot of the limit
--   concurrency  slots per group (null: a rate limit only)
--   waiting      jobs waiting for a slot (or held back by a full global or queue limit)
--   deferred     jobs a rate deferred (run_at ahead)
--   recent_starts  starts inside the rate window, over its groups
-- A declared limit with nothing in use is listed with zeros. (PL/pgSQL, so that a
-- revision may create it before jobs.limit_stats: its body is bound at the first call.)
-- ---------------------------------------------------------------------------
create or replace function jobs.limit_gauges()
returns table (limit_name text, groups bigint, running bigint, concurrency integer,
               waiting bigint, deferred bigint, recent_starts bigint)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.limit_gauges');  -- (sql/15_tenancy.sql)
  return query
  with used as (
    select s.limit_name, pg_catalog.count(*) as groups, pg_catalog.sum(s.running) as running,
           pg_catalog.sum(s.waiting) as waiting, pg_catalog.sum(s.deferred) as deferred,
           pg_catalog.sum(s.recent_starts) as recent_starts
      from jobs.limit_stats() s
     group by s.limit_name
  ),
  names as (
    select u.limit_name from used u union select l.name from jobs.limit l
  )
  select n.limit_name, coalesce(u.groups, 0), coalesce(u.running, 0)::bigint, l.concurrency,
         coalesce(u.waiting, 0)::bigint, coalesce(u.deferred, 0)::bigint,
         coalesce(u.recent_starts, 0)::bigint
    from names n
    left join used u on u.limit_name = n.limit_name
    left join jobs.limit l on l.name = n.limit_name
   order by n.limit_name;
end
$$;

comment on function jobs.limit_gauges() is
  'Per limit: jobs.limit_stats() summed over its groups (groups, running, concurrency per group, waiting, deferred, recent starts).';

-- ---------------------------------------------------------------------------
-- jobs.stats(window_s) -> one row per queue with a job finished in the last window_s
-- seconds (finished_at in (now - window_s, now]):
--   succeeded, failed, dead, cancelled   finished in the window, by final state
--   per_s           all of those per second of the window
--   wait_p50_s, wait_p95_s   enqueue-to-start: first_started_at - created_at (a delay
--                   or run_at given at enqueue counts as waiting); jobs never started
--                   (cancelled while waiting) are left out
--   run_p50_s, run_p95_s     the last attempt's run: finished_at - started_at, of the
--                   succeeded, failed and dead jobs
-- Read-only; reads job_finished_idx over the window. Errors: invalid_argument (SJ001)
-- when window_s is not a positive finite number.
-- ---------------------------------------------------------------------------
create or replace function jobs.stats(p_window_s double precision default 300)
returns table (
  queue      text,
  succeeded  bigint,
  failed     bigint,
  dead       bigint,
  cancelled  bigint,
  per_s      double precision,
  wait_p50_s double precision,
  wait_p95_s double precision,
  run_p50_s  double precision,
  run_p95_s  double precision
)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_now timestamptz := jobs.now();
begin
  perform jobs.fleet_only('jobs.stats');  -- (sql/15_tenancy.sql)
  -- (PostgreSQL orders NaN above every number, so this refuses it too; bounded so that
  -- now - window stays a timestamp)
  if not coalesce(p_window_s > 0 and p_window_s <= 1e9, false) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('the stats window must be a positive number of seconds, at most 1e9, not %s',
                        coalesce(p_window_s::text, 'null')));
  end if;
  return query
  with recent as (
    select f.queue, f.state,
           extract(epoch from f.first_started_at - f.created_at)::double precision as wait_s,
           case when f.state in ('succeeded', 'failed', 'dead')
                then extract(epoch from f.finished_at - f.started_at)::double precision
           end as run_s
      from jobs.job f
     where f.finished_at is not null
       and f.finished_at > v_now - pg_catalog.make_interval(secs => p_window_s)
       and f.finished_at <= v_now
  )
  select r.queue,
         pg_catalog.count(*) filter (where r.state = 'succeeded'),
         pg_catalog.count(*) filter (where r.state = 'failed'),
         pg_catalog.count(*) filter (where r.state = 'dead'),
         pg_catalog.count(*) filter (where r.state = 'cancelled'),
         pg_catalog.count(*) / p_window_s,
         pg_catalog.percentile_cont(0.5) within group (order by r.wait_s),
         pg_catalog.percentile_cont(0.95) within group (order by r.wait_s),
         pg_catalog.percentile_cont(0.5) within group (order by r.run_s),
         pg_catalog.percentile_cont(0.95) within group (order by r.run_s)
    from recent r
   group by r.queue
   order by r.queue;
end
$$;

comment on function jobs.stats(double precision) is
  'Per queue over the last window_s seconds: jobs finished by state, per second, and p50/p95 of enqueue-to-start and of run time; SJ001 for a bad window.';

-- === sql/95_retention.sql ===

-- ---------------------------------------------------------------------------
-- jobs.retention_defaults() -> the built-in policy (jsonb, seconds).
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_defaults()
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select '{"succeeded": 86400, "failed": 2592000, "dead": 2592000, "cancelled": 604800,
           "awaited": 3600, "events": 604800}'::jsonb
$$;

comment on function jobs.retention_defaults() is
  'The built-in retention policy: succeeded 1 day, cancelled 7 days, failed and dead 30 days, awaited 1 hour, events 7 days.';

-- ---------------------------------------------------------------------------
-- jobs.retention_age(value, what) -> seconds: a policy value read. JSON null or absent:
-- null (inherit); "forever": 'Infinity'; a number >= 0. Anything else raises
-- invalid_retention (SJ014) naming `what`.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_age(p_value jsonb, p_what text)
returns double precision
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_value is null or pg_catalog.jsonb_typeof(p_value) = 'null' then
    return null;
  elsif p_value = '"forever"'::jsonb then
    return 'Infinity'::double precision;
  elsif pg_catalog.jsonb_typeof(p_value) = 'number' and (p_value #>> '{}')::numeric >= 0 then
    return (p_value #>> '{}')::double precision;
  end if;
  perform jobs.raise_error('invalid_retention',
    pg_catalog.format('%s must be a number of seconds >= 0, "forever" or null, not %s',
                      p_what, p_value::text));
  return null;
end
$$;

comment on function jobs.retention_age(jsonb, text) is
  'Read one retention age: null inherits, "forever" is Infinity, else seconds >= 0 (SJ014 otherwise).';

-- ---------------------------------------------------------------------------
-- jobs.retention_check(policy, queues_allowed): refuse a malformed policy object before
-- any write. Keys: succeeded, failed, dead, cancelled, awaited, events (and, when
-- queues_allowed, "queues": {queue: policy without queues}). An unknown key raises
-- unknown_retention_key (SJ015); a bad value or a policy that is not an object
-- invalid_retention (SJ014).
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_check(p_policy jsonb, p_queues_allowed boolean)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_key  text;
  v_q    text;
begin
  if p_policy is null or pg_catalog.jsonb_typeof(p_policy) <> 'object' then
    perform jobs.raise_error('invalid_retention', 'a retention policy must be a JSON object');
  end if;
  for v_key in select k from pg_catalog.jsonb_object_keys(p_policy) k order by 1 loop
    if v_key = 'queues' and p_queues_allowed then
      if pg_catalog.jsonb_typeof(p_policy->'queues') <> 'object' then
        perform jobs.raise_error('invalid_retention', 'queues must be an object {queue: policy}');
      end if;
      for v_q in select k from pg_catalog.jsonb_object_keys(p_policy->'queues') k order by 1 loop
        if v_q = '' or v_q = '*' then
          perform jobs.raise_error('invalid_retention',
            'a queue override needs a queue name (the top level is every queue''s)');
        end if;
        perform jobs.retention_check(p_policy->'queues'->v_q, false);
        if p_policy->'queues'->v_q ? 'events' then
          perform jobs.raise_error('invalid_retention',
            'events have no queue: give their age at the top level');
        end if;
      end loop;
    elsif v_key in ('succeeded', 'failed', 'dead', 'cancelled', 'awaited', 'events') then
      perform jobs.retention_age(p_policy->v_key, v_key);
    else
      perform jobs.raise_error('unknown_retention_key',
        pg_catalog.format('%L is not a retention key', v_key), null,
        'keys: succeeded, failed, dead, cancelled, awaited, events'
        || case when p_queues_allowed then ', queues' else '' end);
    end if;
  end loop;
end
$$;

comment on function jobs.retention_check(jsonb, boolean) is
  'Refuse a malformed retention policy: SJ015 for an unknown key, SJ014 for a bad value.';

-- ---------------------------------------------------------------------------
-- jobs.retention_put(queue, policy) -> the queue's row as stored. queue null or '*':
-- the default of every queue. Sets the keys given (JSON null: inherit again) and keeps
-- the others. Errors: SJ014, SJ015 (jobs.retention_check); events only on '*'.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_put(p_queue text, p_policy jsonb)
returns table (queue text, succeeded_s double precision, failed_s double precision,
               dead_s double precision, cancelled_s double precision,
               awaited_s double precision, events_s double precision)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue text := coalesce(p_queue, '*');
begin
  perform jobs.fleet_only('jobs.retention_put');  -- (sql/15_tenancy.sql)
  -- GUARD ('' names no queue: it is not another way to write '*')
  perform jobs.check_name(v_queue, 'queue');
  perform jobs.retention_check(p_policy, false);
  if v_queue <> '*' and p_policy ? 'events' then
    perform jobs.raise_error('invalid_retention',
      'events have no queue: set their age on the default (queue ''*'')');
  end if;
  -- WRITE (upsert; a key not given keeps its stored value)
  insert into jobs.retention as r (queue, succeeded_s, failed_s, dead_s, cancelled_s,
                                   awaited_s, events_s, updated_at)
  values (v_queue,
          jobs.retention_age(p_policy->'succeeded', 'succeeded'),
          jobs.retention_age(p_policy->'failed', 'failed'),
          jobs.retention_age(p_policy->'dead', 'dead'),
          jobs.retention_age(p_policy->'cancelled', 'cancelled'),
          jobs.retention_age(p_policy->'awaited', 'awaited'),
          jobs.retention_age(p_policy->'events', 'events'),
          jobs.now())
  on conflict on constraint retention_pkey do update
     set succeeded_s = case when p_policy ? 'succeeded' then excluded.succeeded_s else r.succeeded_s end,
         failed_s    = case when p_policy ? 'failed' then excluded.failed_s else r.failed_s end,
         dead_s      = case when p_policy ? 'dead' then excluded.dead_s else r.dead_s end,
         cancelled_s = case when p_policy ? 'cancelled' then excluded.cancelled_s else r.cancelled_s end,
         awaited_s   = case when p_policy ? 'awaited' then excluded.awaited_s else r.awaited_s end,
         events_s    = case when p_policy ? 'events' then excluded.events_s else r.events_s end,
         updated_at  = excluded.updated_at;
  return query
    select r.queue, r.succeeded_s, r.failed_s, r.dead_s, r.cancelled_s, r.awaited_s, r.events_s
      from jobs.retention r where r.queue = v_queue;
end
$$;

comment on function jobs.retention_put(text, jsonb) is
  'Store retention ages for a queue (or ''*'', every queue); keys not given are kept.';

-- ---------------------------------------------------------------------------
-- jobs.retention_remove(queue) -> true when a stored row was removed ('*' included:
-- the built-in defaults apply again). Idempotent.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_remove(p_queue text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.retention_remove');  -- (sql/15_tenancy.sql)
  perform jobs.check_name(coalesce(p_queue, '*'), 'queue');
  delete from jobs.retention r where r.queue = coalesce(p_queue, '*');
  return found;
end
$$;

comment on function jobs.retention_remove(text) is
  'Remove a queue''s stored retention row (or ''*''); answers whether one existed.';

-- ---------------------------------------------------------------------------
-- jobs.retention_policy(policy) -> the ages in effect, resolved (no nulls; 'Infinity':
-- forever): one row for '*' and one per queue that a stored row or the given call
-- policy overrides, '*' first. p_policy is what a jobs.purge call would be given.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_policy(p_policy jsonb default null)
returns table (queue text, succeeded_s double precision, failed_s double precision,
               dead_s double precision, cancelled_s double precision,
               awaited_s double precision, events_s double precision)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_p jsonb := coalesce(p_policy, '{}');
begin
  perform jobs.fleet_only('jobs.retention_policy');  -- (sql/15_tenancy.sql)
  perform jobs.retention_check(v_p, true);
  return query
    with qs as (
      select '*'::text as queue
      union select r.queue from jobs.retention r
      union select k from pg_catalog.jsonb_object_keys(coalesce(v_p->'queues', '{}')) k
    )
    select qs.queue,
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'succeeded', 'succeeded'), q.succeeded_s,
                    jobs.retention_age(v_p->'succeeded', 'succeeded'), d.succeeded_s,
                    (b->>'succeeded')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'failed', 'failed'), q.failed_s,
                    jobs.retention_age(v_p->'failed', 'failed'), d.failed_s,
                    (b->>'failed')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'dead', 'dead'), q.dead_s,
                    jobs.retention_age(v_p->'dead', 'dead'), d.dead_s,
                    (b->>'dead')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'cancelled', 'cancelled'), q.cancelled_s,
                    jobs.retention_age(v_p->'cancelled', 'cancelled'), d.cancelled_s,
                    (b->>'cancelled')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'awaited', 'awaited'), q.awaited_s,
                    jobs.retention_age(v_p->'awaited', 'awaited'), d.awaited_s,
                    (b->>'awaited')::double precision),
           -- events have no queue: the '*' row's age for every row
           coalesce(jobs.retention_age(v_p->'events', 'events'),
                    d.events_s, (b->>'events')::double precision)
      from qs
      cross join jobs.retention_defaults() b
      left join jobs.retention q on q.queue = qs.queue and qs.queue <> '*'
      left join jobs.retention d on d.queue = '*'
     order by qs.queue <> '*', qs.queue;
end
$$;

comment on function jobs.retention_policy(jsonb) is
  'The retention ages in effect (resolved; Infinity = forever): ''*'' and each overridden queue.';

-- ---------------------------------------------------------------------------
-- jobs.purge_cutoff(now, age_s) -> the instant before which a row is old enough
-- ('-infinity' for forever).
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_cutoff(p_now timestamptz, p_age_s double precision)
returns timestamptz
language sql
immutable
set search_path = ''
as $$
  select case when p_age_s >= 'Infinity'::double precision then '-infinity'::timestamptz
              else p_now - pg_catalog.make_interval(secs => p_age_s) end
$$;

comment on function jobs.purge_cutoff(timestamptz, double precision) is
  'now - age, or -infinity when the age is forever (jobs.purge).';

-- ---------------------------------------------------------------------------
-- jobs.purge_unreferenced(id, parent_id) -> true when no live job refers to this one:
-- none of its children is live, and its parent (if any) is not live. Two index probes
-- (job_parent_idx, job_pkey) per row: written as a function so that the planner cannot
-- turn them into anti joins over a scan of every live job.
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_unreferenced(p_id bigint, p_parent_id bigint)
returns boolean
language sql
stable
set search_path = ''
as $$
  select not exists (select 1 from jobs.job c
                      where c.parent_id = p_id
                        and c.state in ('ready', 'running', 'parked', 'interrupted'))
     and (p_parent_id is null
          or not exists (select 1 from jobs.job p
                          where p.id = p_parent_id
                            and p.state in ('ready', 'running', 'parked', 'interrupted')))
$$;

comment on function jobs.purge_unreferenced(bigint, bigint) is
  'True when no live job refers to this one (no live child, no live parent): jobs.purge''s reference rule.';

-- ---------------------------------------------------------------------------
-- jobs.purge(max, dry_run, policy) -> (what, deleted, remaining), one row each for
-- 'job', 'outbox' and 'event'.
--
-- Contract:
--   * Deletes at most p_max (1..100000) jobs and events in all, oldest first, by the
--     rules at the top of this file; a job's steps, event waits and outbox row go with
--     it ('outbox' counts those). Answers what it deleted and how many jobs / events
--     are still eligible, counted up to p_max per state so the call stays bounded
--     (outbox: null, they go with their jobs). Call again while remaining > 0.
--   * p_dry_run: deletes nothing, answers deleted = 0 and the exact eligible counts.
--   * p_policy overrides the stored policy for this call (see the top of this file).
-- Locks: the deleted rows only (for update skip locked), in one short transaction.
-- Errors: invalid_retention (SJ014) for p_max outside 1..100000 or a bad age;
--         unknown_retention_key (SJ015) for a key that is not a final state, awaited,
--         events or queues.
-- ---------------------------------------------------------------------------
create or replace function jobs.purge(
  p_max     integer default 1000,
  p_dry_run boolean default false,
  p_policy  jsonb default null
)
returns table (what text, deleted bigint, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now      timestamptz := jobs.now();
  v_left     integer;
  v_state    jobs.job_state;
  v_queues   text[];        -- the queues with their own ages ('*' excluded)
  v_cuts     timestamptz[]; -- per queue: the cutoff of v_state
  v_awaits   timestamptz[]; -- per queue: the awaited cutoff
  v_dcut     timestamptz;   -- every other queue: the cutoff of v_state
  v_dawait   timestamptz;
  v_maxcut   timestamptz;   -- the latest cutoff of v_state over all queues (index bound)
  v_ecut     timestamptz;   -- events: created before this
  v_jobs     bigint := 0;
  v_outbox   bigint := 0;
  v_events   bigint := 0;
  v_jrest    bigint := 0;
  v_erest    bigint := 0;
  v_n        bigint;
  v_o        bigint;
  v_bound    bigint;
  v_cap      bigint;        -- a counted remainder stops here (dry runs count it all)
begin
  perform jobs.fleet_only('jobs.purge');  -- (sql/15_tenancy.sql)
  -- GUARD
  if p_max is null or p_max not between 1 and 100000 then
    perform jobs.raise_error('invalid_retention',
      pg_catalog.format('max must be between 1 and 100000, not %s', coalesce(p_max::text, 'null')));
  end if;
  if p_dry_run is null then
    perform jobs.raise_error('invalid_retention', 'dry_run must be true or false');
  end if;
  v_left := p_max;
  v_cap := p_max;

  -- JOBS, one final state at a time (the policy is resolved once per state).
  foreach v_state in array array['succeeded', 'cancelled', 'failed', 'dead']::jobs.job_state[] loop
    select pg_catalog.array_agg(p.queue order by p.queue) filter (where p.queue <> '*'),
           pg_catalog.array_agg(jobs.purge_cutoff(v_now, a.age) order by p.queue)
             filter (where p.queue <> '*'),
           pg_catalog.array_agg(jobs.purge_cutoff(v_now, p.awaited_s) order by p.queue)
             filter (where p.queue <> '*'),
           pg_catalog.max(jobs.purge_cutoff(v_now, a.age)) filter (where p.queue = '*'),
           pg_catalog.max(jobs.purge_cutoff(v_now, p.awaited_s)) filter (where p.queue = '*'),
           pg_catalog.max(jobs.purge_cutoff(v_now, a.age)),
           pg_catalog.max(jobs.purge_cutoff(v_now, p.events_s))
      into v_queues, v_cuts, v_awaits, v_dcut, v_dawait, v_maxcut, v_ecut
      from jobs.retention_policy(p_policy) p
     cross join lateral (select case v_state when 'succeeded' then p.succeeded_s
                                             when 'failed' then p.failed_s
                                             when 'dead' then p.dead_s
                                             else p.cancelled_s end as age) a;
    continue when v_maxcut = '-infinity';
    v_queues := coalesce(v_queues, '{}');

    if not p_dry_run and v_left > 0 then
      -- DELETE at most v_left of them, oldest first; rows others hold are skipped.
      with victims as (
        select j.id from jobs.job j
         where j.state = v_state and j.finished_at is not null and j.finished_at < v_maxcut
           and j.finished_at < coalesce(v_cuts[pg_catalog.array_position(v_queues, j.queue)], v_dcut)
           and (not j.settle_watched
                or j.finished_at < coalesce(v_awaits[pg_catalog.array_position(v_queues, j.queue)],
                                            v_dawait))
           and jobs.purge_unreferenced(j.id, j.parent_id)
         order by j.state, j.finished_at  -- job_retention_idx's order: read, not sorted
         limit v_left
           for update of j skip locked
      ), gone as (
        delete from jobs.job j using victims v
         where j.id = v.id and j.state = v_state
        returning j.id
      ), staged as (
        -- the outbox row that created the job carries its id
        delete from jobs.outbox o using gone g
         where o.id = g.id and o.published_at is not null
        returning o.id
      )
      select (select pg_catalog.count(*) from gone), (select pg_catalog.count(*) from staged)
        into v_n, v_o;
      v_jobs := v_jobs + v_n;
      v_outbox := v_outbox + v_o;
      v_left := v_left - v_n::integer;
    end if;
    -- COUNT what is (still) eligible, by the same rules: all of it in a dry run, else
    -- up to v_cap (a call stays bounded however large the backlog; rows others held
    -- stay eligible)
    select pg_catalog.count(*) into v_n from (
      select 1 from jobs.job j
       where j.state = v_state and j.finished_at is not null and j.finished_at < v_maxcut
         and j.finished_at < coalesce(v_cuts[pg_catalog.array_position(v_queues, j.queue)], v_dcut)
         and (not j.settle_watched
              or j.finished_at < coalesce(v_awaits[pg_catalog.array_position(v_queues, j.queue)],
                                          v_dawait))
         and jobs.purge_unreferenced(j.id, j.parent_id)
       limit case when p_dry_run then null else v_cap end) e;
    v_jrest := v_jrest + v_n;
  end loop;

  -- EVENTS: by age, never one a waiting job may still look back to.
  if v_ecut is null then
    select jobs.purge_cutoff(v_now, p.events_s) into v_ecut
      from jobs.retention_policy(p_policy) p where p.queue = '*';
  end if;
  v_ecut := least(v_ecut, (select pg_catalog.min(coalesce(j.first_started_at, j.created_at))
                             from jobs.event_wait w join jobs.job j on j.id = w.job_id
                            where j.state in ('ready', 'running', 'parked', 'interrupted')));
  if v_ecut > '-infinity' then
    -- Events are deleted oldest first, so the first event (by id) not old enough bounds
    -- the old ones: every smaller id is older (ids are taken in time order; an event
    -- written late by a long transaction only waits longer).
    select pg_catalog.min(e.id) into v_bound from jobs.event e where e.created_at >= v_ecut;
    select pg_catalog.count(*) into v_erest
      from (select 1 from jobs.event e where v_bound is null or e.id < v_bound
             limit case when p_dry_run then null else v_cap end) x;
    if not p_dry_run and v_left > 0 and v_erest > 0 then
      with victims as (
        select e.id from jobs.event e
         where (v_bound is null or e.id < v_bound) and e.created_at < v_ecut
         order by e.id
         limit v_left
           for update skip locked
      ), gone as (
        delete from jobs.event e using victims v where e.id = v.id returning e.id
      )
      select pg_catalog.count(*) into v_n from gone;
      v_events := v_n;
      v_erest := v_erest - v_n;  -- at the cap: still at least this many
    end if;
  end if;

  -- Lock rows (jobs.lock_key) unused for a day: not counted, at most 1,000 a call; one
  -- locked now is skipped (and one deleted under a locker is made again by it).
  if not p_dry_run then
    delete from jobs.lock_key k
     using (select o.key from jobs.lock_key o
             where o.created_at < v_now - interval '1 day'
             limit 1000
               for update skip locked) as old
     where k.key = old.key;
  end if;

  return query values ('job'::text, v_jobs, v_jrest),
                      ('outbox'::text, v_outbox, null::bigint),
                      ('event'::text, v_events, v_erest);
end
$$;

comment on function jobs.purge(integer, boolean, jsonb) is
  'Retention: delete at most p_max finished jobs (with their steps, waits, outbox rows) and old events; answers deleted and still eligible.';

-- jobs.retention_sweep(max) -> jobs.purge(max) under the stored policy: what the
-- scheduler's leader runs every period (sql/98_roles.sql grants it to the scheduler's
-- role, which may not pass a policy of its own: only an operator deletes by other ages).
create or replace function jobs.retention_sweep(p_max integer default 1000)
returns table (what text, deleted bigint, remaining bigint)
language sql
volatile
set search_path = ''
as $$
  select p.what, p.deleted, p.remaining from jobs.purge(p_max, false, null) p
$$;

comment on function jobs.retention_sweep(integer) is
  'One bounded retention batch under the stored policy (jobs.purge without an override).';

-- === sql/97_dashboard.sql ===

-- ---------------------------------------------------------------------------
-- jobs.finished_by_queue(minutes, bucket_minutes) -> per bucket of `bucket_minutes` of
-- the last `minutes`, and per queue: the jobs that finished in it, by final state
-- (succeeded, failed, dead, cancelled). Buckets are aligned on multiples of their
-- length since the epoch (5 minutes: :00, :05, ...), and the window ends with the
-- bucket holding the current minute (so it is partly ahead of now). Only the (bucket,
-- queue) pairs where something finished are returned, oldest first, then by queue;
-- `bucket` is the bucket's start. Reads the finished rows of the window
-- through job_finished_idx, as jobs.stats() does: its cost follows the throughput
-- times the window. Errors: invalid_argument (SJ001) when minutes is outside 1..1440,
-- or bucket_minutes is not a divisor of minutes.
-- ---------------------------------------------------------------------------
create or replace function jobs.finished_by_queue(p_minutes integer default 60,
                                                  p_bucket_minutes integer default 1)
returns table (bucket timestamptz, queue text, succeeded bigint, failed bigint, dead bigint,
               cancelled bigint)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_end   timestamptz;
  v_start timestamptz;
begin
  perform jobs.fleet_only('jobs.finished_by_queue');  -- (sql/15_tenancy.sql)
  if p_minutes is null or p_minutes not between 1 and 1440 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('minutes must be between 1 and 1440, got %s', p_minutes));
  end if;
  if p_bucket_minutes is null or p_bucket_minutes < 1 or p_minutes % p_bucket_minutes <> 0 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('bucket_minutes must divide minutes (%s), got %s', p_minutes,
                        p_bucket_minutes));
  end if;
  -- the end of the bucket holding the current minute
  v_end := pg_catalog.to_timestamp((pg_catalog.ceil(
             extract(epoch from pg_catalog.date_trunc('minute', jobs.now()) + interval '1 minute')
             / (60 * p_bucket_minutes)) * 60 * p_bucket_minutes)::double precision);
  v_start := v_end - pg_catalog.make_interval(mins => p_minutes);
  return query
  select v_start + pg_catalog.make_interval(mins => f.n * p_bucket_minutes),
         f.queue,
         pg_catalog.count(*) filter (where f.state = 'succeeded'),
         pg_catalog.count(*) filter (where f.state = 'failed'),
         pg_catalog.count(*) filter (where f.state = 'dead'),
         pg_catalog.count(*) filter (where f.state = 'cancelled')
    from (select j.queue, j.state,
                 pg_catalog.floor(extract(epoch from j.finished_at - v_start)
                                  / (60 * p_bucket_minutes))::integer as n
            from jobs.job j
           where j.finished_at is not null
             and j.finished_at >= v_start
             and j.finished_at < v_end
             and j.state in ('succeeded', 'failed', 'dead', 'cancelled')) f
   group by f.n, f.queue
   order by f.n, f.queue;
end
$$;

comment on function jobs.finished_by_queue(integer, integer) is
  'Per bucket of the last N minutes (1..1440; buckets of a divisor of N minutes) and per queue: jobs finished succeeded, failed, dead and cancelled; only pairs with some.';

-- ---------------------------------------------------------------------------
-- jobs.finished_per_minute(minutes) -> one row per minute of the last `minutes`
-- (oldest first, minutes with nothing finished included as zeros): succeeded, and
-- failed (failed or dead: an attempt that ended the job without success), over every
-- queue: jobs.finished_by_queue(minutes, 1) summed per minute.
-- ---------------------------------------------------------------------------
create or replace function jobs.finished_per_minute(p_minutes integer default 60)
returns table (minute timestamptz, succeeded bigint, failed bigint)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_end timestamptz := pg_catalog.date_trunc('minute', jobs.now()) + interval '1 minute';
begin
  perform jobs.fleet_only('jobs.finished_per_minute');  -- (sql/15_tenancy.sql)
  if p_minutes is null or p_minutes not between 1 and 1440 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('minutes must be between 1 and 1440, got %s', p_minutes));
  end if;
  return query
  select m.minute,
         coalesce(pg_catalog.sum(f.succeeded), 0)::bigint,
         coalesce(pg_catalog.sum(f.failed + f.dead), 0)::bigint
    from pg_catalog.generate_series(v_end - pg_catalog.make_interval(mins => p_minutes),
                                    v_end - interval '1 minute', interval '1 minute') as m(minute)
    left join jobs.finished_by_queue(p_minutes, 1) f on f.bucket = m.minute
   group by m.minute
   order by m.minute;
end
$$;

comment on function jobs.finished_per_minute(integer) is
  'Per minute of the last N (1..1440, oldest first, zeros included): jobs that succeeded, and that failed or went dead.';

-- === sql/98_roles.sql ===

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
      ('sqljobs_producer', 'jobs.watch_outcome(bigint)'),
      ('sqljobs_producer', 'jobs.watch_token(bigint)'),
      -- worker: runs jobs
      ('sqljobs_worker', 'jobs.claim(text[],text,integer,double precision,jsonb)'),
      ('sqljobs_worker', 'jobs.ack(bigint,bigint,jsonb)'),
      ('sqljobs_worker', 'jobs.ack_many(bigint[],bigint[],jsonb[])'),
      ('sqljobs_worker', 'jobs.nack(bigint,bigint,jsonb,text,double precision)'),
      ('sqljobs_worker', 'jobs.nack_many(bigint[],bigint[],jsonb[],text[],double precision[])'),
      ('sqljobs_worker', 'jobs.heartbeat(bigint,bigint,double precision)'),
      ('sqljobs_worker', 'jobs.heartbeat_many(bigint[],bigint[],double precision)'),
      ('sqljobs_worker', 'jobs.progress(bigint,bigint,jsonb)'),
      ('sqljobs_worker', 'jobs.step_put(bigint,bigint,text,jsonb,double precision,jsonb)'),
      ('sqljobs_worker', 'jobs.step_sleep(bigint,bigint,text,timestamp with time zone,double precision)'),
      ('sqljobs_worker', 'jobs.step_invoke(bigint,bigint,text[],jsonb,double precision)'),
      ('sqljobs_worker', 'jobs.step_unwound(bigint,bigint)'),
      ('sqljobs_worker', 'jobs.step_wait(bigint,bigint,text,jsonb,double precision,double precision)'),
      ('sqljobs_worker', 'jobs.job_steps(bigint)'),
      ('sqljobs_worker', 'jobs.emit_event(text,jsonb)'),
      ('sqljobs_worker', 'jobs.enqueue(text,text,jsonb,jsonb)'),
      ('sqljobs_worker', 'jobs.enqueue_many(jsonb)'),
      ('sqljobs_worker', 'jobs.enqueue_batch(jsonb,text[],jsonb)'),
      ('sqljobs_worker', 'jobs.stage(text,text,jsonb,jsonb)'),
      ('sqljobs_worker', 'jobs.stage_many(jsonb)'),
      ('sqljobs_worker', 'jobs.watch_outcome(bigint)'),
      ('sqljobs_worker', 'jobs.watch_token(bigint)'),
      ('sqljobs_worker', 'jobs.wake_tokens(text[])'),
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
      ('sqljobs_operator', 'jobs.promote(bigint)'),
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
      -- reader: views and read functions only (redacted: no raw payload)
      ('sqljobs_reader', 'jobs.queue_stats()'), ('sqljobs_reader', 'jobs.queue_stats_v2()'),
      ('sqljobs_reader', 'jobs.list_jobs(jsonb,bigint,integer)'),
      ('sqljobs_reader', 'jobs.job_detail(bigint)'),
      ('sqljobs_reader', 'jobs.job_steps(bigint)'),
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
