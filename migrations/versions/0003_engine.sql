-- sqljobs schema version 3 (engine): upgrades version 2 in place.
-- Revision sqljobs_0003. The source of every function below is sql/.
--
-- What changes, and why: ...
-- Locks: ... Workers: need not drain / must drain.
--
-- The DDL an upgrade needs (tables, columns, indexes, types) goes here by hand;
-- the functions, views, triggers and comments are generated below it.

-- ---------------------------------------------------------------------------
-- jobs.backfill: the ledger of the backfills (sql/85_factories.sql). A new, empty
-- table: no lock on anything that exists; workers need not drain.
-- ---------------------------------------------------------------------------
create table jobs.backfill (
  environment text        not null,
  name        text        not null,
  scope       text        not null default '',
  tenant      text,
  checksum    text        not null,
  status      text        not null
              check (status in ('running', 'paused', 'completed', 'stalled', 'cancelled')),
  job_id      bigint,
  job_batch   integer     not null default 0,
  batches     bigint      not null default 0,
  rows_done   bigint      not null default 0,
  expected    bigint,
  cursor      jsonb,
  started_by  text        not null,
  started_at  timestamptz not null,
  updated_at  timestamptz not null,
  finished_at timestamptz,
  primary key (environment, name, scope)
);

comment on table jobs.backfill is
  'The backfill ledger: what ran, per environment, name and scope (sql/85_factories.sql).';

-- ===========================================================================
-- Generated from sql/ by `make revision`: every function, view, trigger and comment
-- that differs from the previous schema version, as sql/ writes it. Do not edit
-- below this line: edit sql/ and run `make revision` again.
-- ===========================================================================

-- === sql/00_schema.sql ===

-- ---------------------------------------------------------------------------
-- Version. Bump with each schema change that ships a new Alembic revision; the
-- client refuses to run against an older schema (sqljobs/_version.py).
-- ---------------------------------------------------------------------------
create or replace function jobs.schema_version()
returns integer
language sql
immutable
set search_path = ''
as $$ select 3 $$;

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
    ('SJ031', 'schedule_not_found',  'no schedule has that name'),
    ('SJ040', 'backfill_environment_refused', 'the backfill may not run in this environment'),
    ('SJ041', 'backfill_requires_unmet', 'a backfill this one requires has not completed in this environment'),
    ('SJ042', 'backfill_checksum_changed', 'the backfill completed under another checksum; it is not run again silently'),
    ('SJ043', 'backfill_busy',       'another live job is running this backfill'),
    ('SJ044', 'backfill_not_found',  'no backfill of that name and scope has run in this environment'),
    ('SJ045', 'backfill_state',      'the backfill is not in a state that allows this verb'),
    ('SJ046', 'backfill_stalled',    'the backfill ended with fewer rows than its declared count')
$$;

-- === sql/85_factories.sql ===

comment on table jobs.backfill is
  'The backfill ledger: what ran, per environment, name and scope (sql/85_factories.sql).';

-- jobs.backfill_job(id, claim, name, scope): the tenant of the running backfill job `id`
-- after checking that `claim` holds it and that it is the backfill (name, scope): its
-- name is the backfill's and its payload's scope is `scope`. Refuses lease_lost (SJ004)
-- otherwise, and a bound session another tenant's job (tenant_refused). Locks nothing.
create or replace function jobs.backfill_job(p_id bigint, p_claim bigint, p_name text,
                                             p_scope text)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text;
begin
  perform jobs.check_tenant(array[p_id]);
  select j.tenant into v_tenant from jobs.job j
   where j.id = p_id and j.claim = p_claim and j.state = 'running'
     and j.name = p_name and coalesce(j.payload->>'scope', '') = coalesce(p_scope, '');
  if not found then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('job %s is not the running backfill %s (scope %L) under claim %s',
                        p_id, p_name, p_scope, p_claim));
  end if;
  return v_tenant;
end
$$;

comment on function jobs.backfill_job(bigint, bigint, text, text) is
  'The tenant of a running backfill job under its claim; SJ004 when the claim or the backfill does not match.';

-- jobs.backfill_begin(id, claim, name, scope, environment, environments, requires,
--                     checksum, expected, rerun, started_by)
--   -> (verdict, cursor, batches, rows_done)
-- The gate of one run, called by the backfill job at the start of every run (it is
-- idempotent for the same job). GUARD: the claim (backfill_job); `environment` must be
-- one of `environments` when that is not null (backfill_environment_refused); every
-- name in `requires` must have a completed row in this environment, of this scope or
-- of scope '' (backfill_requires_unmet). LOCK: the ledger row (for update; the row is
-- created first when missing). VERDICT:
--   'run'  the run goes on from `cursor` (null: from the start): a new row; the same
--          job again (a replay); or a new job after one that ended without finishing
--          (its cursor and counts kept, the new checksum recorded), or `rerun`;
--   'done' the row is completed under the same checksum: nothing to do.
-- Refuses backfill_checksum_changed for a completed row of another checksum (unless
-- `rerun`), backfill_busy while another job of this row is live, and a bound session
-- another tenant's row (tenant_refused).
create or replace function jobs.backfill_begin(
  p_id bigint, p_claim bigint, p_name text, p_scope text, p_environment text,
  p_environments text[], p_requires text[], p_checksum text, p_expected bigint,
  p_rerun boolean, p_started_by text)
returns table (verdict text, cursor jsonb, batches bigint, rows_done bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_tenant    text;
  v_owner     text;     -- the row's tenant
  v_status    text;
  v_job       bigint;
  v_checksum  text;
  v_cursor    jsonb;
  v_batches   bigint;
  v_rows      bigint;
  v_missing   text;
  v_now       timestamptz := jobs.now();
begin
  -- GUARD -----------------------------------------------------------------------
  if p_environment is null or p_environment = '' or p_checksum is null or p_checksum = ''
     or p_started_by is null or p_expected < 0 then
    perform jobs.raise_error('invalid_argument',
      'backfill_begin needs an environment, a checksum, started_by and a count >= 0');
  end if;
  perform jobs.check_name(p_name, 'backfill name');
  v_tenant := jobs.backfill_job(p_id, p_claim, p_name, p_scope);
  if p_environments is not null and not (p_environment = any (p_environments)) then
    perform jobs.raise_error('backfill_environment_refused',
      pg_catalog.format('backfill %s may run in %s, not in %s', p_name,
                        pg_catalog.array_to_string(p_environments, ', '), p_environment));
  end if;
  select r.name into v_missing from pg_catalog.unnest(coalesce(p_requires, '{}')) r(name)
   where not exists (select from jobs.backfill b
                      where b.environment = p_environment and b.name = r.name
                        and b.scope in (coalesce(p_scope, ''), '') and b.status = 'completed')
   limit 1;
  if v_missing is not null then
    perform jobs.raise_error('backfill_requires_unmet',
      pg_catalog.format('backfill %s requires %s, which has not completed in %s', p_name,
                        v_missing, p_environment),
      null, 'run the required backfill first');
  end if;
  -- LOCK ------------------------------------------------------------------------
  insert into jobs.backfill as b (environment, name, scope, tenant, checksum, status, job_id,
                                  expected, started_by, started_at, updated_at)
  values (p_environment, p_name, coalesce(p_scope, ''), v_tenant, p_checksum, 'running', p_id,
          p_expected, p_started_by, v_now, v_now)
  on conflict on constraint backfill_pkey do nothing;
  select b.tenant, b.status, b.job_id, b.checksum, b.cursor, b.batches, b.rows_done
    into strict v_owner, v_status, v_job, v_checksum, v_cursor, v_batches, v_rows
    from jobs.backfill b
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '')
     for update;
  if v_owner is distinct from v_tenant and jobs.bound_tenant() is not null then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('backfill %s (scope %L) belongs to another tenant', p_name, p_scope));
  end if;
  -- VERDICT ---------------------------------------------------------------------
  if v_job = p_id then  -- this job's row: a new one, or a replay of this run
    return query select 'run'::text, v_cursor, v_batches, v_rows;
    return;
  end if;
  if v_status = 'completed' and not coalesce(p_rerun, false) then
    if v_checksum = p_checksum then
      return query select 'done'::text, v_cursor, v_batches, v_rows;
      return;
    end if;
    perform jobs.raise_error('backfill_checksum_changed',
      pg_catalog.format('backfill %s completed in %s under checksum %s; it is now %s',
                        p_name, p_environment, v_checksum, p_checksum),
      null, 'start it with rerun to run it again, or leave it completed');
  end if;
  if v_status in ('running', 'paused') and exists (
       select from jobs.job j where j.id = v_job
          and j.state in ('ready', 'running', 'parked', 'interrupted')) then
    perform jobs.raise_error('backfill_busy',
      pg_catalog.format('backfill %s (scope %L) is being run by job %s', p_name, p_scope,
                        v_job));
  end if;
  -- WRITE -----------------------------------------------------------------------
  update jobs.backfill b
     set job_id = p_id, job_batch = 0, status = 'running', checksum = p_checksum,
         expected = p_expected, tenant = v_tenant, started_by = p_started_by,
         updated_at = v_now, finished_at = null,
         cursor    = case when p_rerun then null else b.cursor end,
         batches   = case when p_rerun then 0 else b.batches end,
         rows_done = case when p_rerun then 0 else b.rows_done end,
         started_at = case when p_rerun or b.status = 'completed' then v_now else b.started_at end
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '')
  returning b.cursor, b.batches, b.rows_done into v_cursor, v_batches, v_rows;
  return query select 'run'::text, v_cursor, v_batches, v_rows;
end
$$;

comment on function jobs.backfill_begin(bigint, bigint, text, text, text, text[], text[], text, bigint, boolean, text) is
  'The gate of a backfill run (environment, requires, checksum, busy): verdict run|done and where to start.';

-- jobs.backfill_advance(id, claim, name, scope, environment, batch, cursor, rows)
--   -> the row's status after it ('running', 'paused', 'cancelled')
-- Records that the job's batch number `batch` (1, 2, ... within this job) is handled:
-- the cursor after it and `rows` more rows. IDEMPOTENT per batch: a batch at or below
-- the last one recorded for this job changes nothing (a run repeated after a crash
-- between this call and its step's store counts it once). Fenced like backfill_begin
-- (lease_lost), and the row must be this job's (lease_lost otherwise). Locks the row.
create or replace function jobs.backfill_advance(
  p_id bigint, p_claim bigint, p_name text, p_scope text, p_environment text,
  p_batch integer, p_cursor jsonb, p_rows bigint)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_status text;
begin
  if p_batch is null or p_batch < 1 or p_rows is null or p_rows < 0 then
    perform jobs.raise_error('invalid_argument', 'a batch number >= 1 and rows >= 0 are needed');
  end if;
  perform jobs.check_value(p_cursor, 'cursor');
  perform jobs.backfill_job(p_id, p_claim, p_name, p_scope);
  update jobs.backfill b
     set cursor = case when p_batch > b.job_batch then p_cursor else b.cursor end,
         rows_done = b.rows_done + case when p_batch > b.job_batch then p_rows else 0 end,
         batches = b.batches + case when p_batch > b.job_batch then 1 else 0 end,
         job_batch = greatest(b.job_batch, p_batch),
         updated_at = jobs.now()
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '')
     and b.job_id = p_id
  returning b.status into v_status;
  if v_status is null then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('backfill %s (scope %L) in %s is not run by job %s', p_name, p_scope,
                        p_environment, p_id));
  end if;
  return v_status;
end
$$;

comment on function jobs.backfill_advance(bigint, bigint, text, text, text, integer, jsonb, bigint) is
  'Record one handled batch of a backfill (cursor, rows), once per batch; answers the row''s status.';

-- jobs.backfill_status(id, claim, name, scope, environment) -> the row's status, read
-- under the job's claim (what a paused run checks after a resume). Fenced as above.
create or replace function jobs.backfill_status(
  p_id bigint, p_claim bigint, p_name text, p_scope text, p_environment text)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  v_status text;
begin
  perform jobs.backfill_job(p_id, p_claim, p_name, p_scope);
  select b.status into v_status from jobs.backfill b
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '')
     and b.job_id = p_id;
  if v_status is null then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('backfill %s (scope %L) in %s is not run by job %s', p_name, p_scope,
                        p_environment, p_id));
  end if;
  return v_status;
end
$$;

comment on function jobs.backfill_status(bigint, bigint, text, text, text) is
  'The ledger status of the backfill a running job holds (fenced on its claim).';

-- jobs.backfill_finish(id, claim, name, scope, environment) -> 'completed' | 'stalled'
-- After the last batch: the count check. The row becomes 'stalled' when a count was
-- declared and fewer rows were handled, else 'completed'; finished_at is set. A stall
-- is answered, not raised, so that the status is kept; the client raises
-- BackfillStalled (SJ046) from it. Idempotent for a finished row of this job. Fenced.
create or replace function jobs.backfill_finish(
  p_id bigint, p_claim bigint, p_name text, p_scope text, p_environment text)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_status text;
begin
  perform jobs.backfill_job(p_id, p_claim, p_name, p_scope);
  update jobs.backfill b
     set status = case when b.status in ('completed', 'stalled') then b.status
                       when b.expected is not null and b.rows_done < b.expected then 'stalled'
                       else 'completed' end,
         finished_at = coalesce(b.finished_at, jobs.now()),
         updated_at = jobs.now()
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '')
     and b.job_id = p_id
  returning b.status into v_status;
  if v_status is null then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('backfill %s (scope %L) in %s is not run by job %s', p_name, p_scope,
                        p_environment, p_id));
  end if;
  return v_status;
end
$$;

comment on function jobs.backfill_finish(bigint, bigint, text, text, text) is
  'The count check after a backfill''s last batch: completed, or stalled when short of the declared count.';

-- jobs.backfill_row(name, scope, environment) -> (status, job_id): the ledger row,
-- locked for update, for the operator's verbs. Refuses backfill_not_found, and a bound
-- session another tenant's row (tenant_refused).
create or replace function jobs.backfill_row(p_name text, p_scope text, p_environment text,
                                             out status text, out job_id bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_owner  text;
  v_tenant text := jobs.bound_tenant();
begin
  select b.status, b.job_id, b.tenant into status, job_id, v_owner from jobs.backfill b
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '')
     for update;
  if not found then
    perform jobs.raise_error('backfill_not_found',
      pg_catalog.format('no backfill %s (scope %L) has run in %s', p_name, p_scope, p_environment));
  end if;
  if v_tenant is not null and v_owner is distinct from v_tenant then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('backfill %s (scope %L) belongs to another tenant', p_name, p_scope));
  end if;
end
$$;

comment on function jobs.backfill_row(text, text, text) is
  'The status and job of a backfill ledger row, locked for an operator verb; SJ044 when none, SJ018 another tenant''s.';

-- jobs.backfill_pause(name, scope, environment): running -> paused. The run stops
-- after the batch in hand (its next backfill_advance answers 'paused') and parks,
-- waiting for the event 'sqljobs.backfill' that backfill_resume emits. Refuses
-- backfill_not_found, backfill_state (not running) and tenant_refused.
create or replace function jobs.backfill_pause(p_name text, p_scope text, p_environment text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_status text;
  v_job    bigint;
begin
  select r.status, r.job_id into v_status, v_job
    from jobs.backfill_row(p_name, p_scope, p_environment) r;
  if v_status <> 'running' then
    perform jobs.raise_error('backfill_state',
      pg_catalog.format('backfill %s (scope %L) is %s; only a running one pauses', p_name,
                        p_scope, v_status));
  end if;
  update jobs.backfill b set status = 'paused', updated_at = jobs.now()
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '');
end
$$;

comment on function jobs.backfill_pause(text, text, text) is
  'Pause a running backfill after its current batch; SJ044 none, SJ045 not running.';

-- jobs.backfill_resume(name, scope, environment): paused -> running, and emits the event
-- 'sqljobs.backfill' {"action": "resume", environment, name, scope} that wakes the
-- parked run. Refuses backfill_not_found, backfill_state (not paused), tenant_refused.
create or replace function jobs.backfill_resume(p_name text, p_scope text, p_environment text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_status text;
  v_job    bigint;
begin
  select r.status, r.job_id into v_status, v_job
    from jobs.backfill_row(p_name, p_scope, p_environment) r;
  if v_status <> 'paused' then
    perform jobs.raise_error('backfill_state',
      pg_catalog.format('backfill %s (scope %L) is %s; only a paused one resumes', p_name,
                        p_scope, v_status));
  end if;
  update jobs.backfill b set status = 'running', updated_at = jobs.now()
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '');
  perform jobs.emit_event('sqljobs.backfill', pg_catalog.jsonb_build_object(
    'action', 'resume', 'environment', p_environment, 'name', p_name,
    'scope', coalesce(p_scope, '')));
end
$$;

comment on function jobs.backfill_resume(text, text, text) is
  'Resume a paused backfill (wakes its parked run); SJ044 none, SJ045 not paused.';

-- jobs.backfill_cancel(name, scope, environment): running|paused -> cancelled, and
-- cancels its job when that is still live (jobs.cancel's rules: the running run is told
-- to stop, a parked one is cancelled at once). A later run starts again from the
-- stored cursor. Refuses backfill_not_found, backfill_state (completed, stalled or
-- cancelled already) and tenant_refused. Lock order: the ledger row, then the job.
create or replace function jobs.backfill_cancel(p_name text, p_scope text, p_environment text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_status text;
  v_job    bigint;
begin
  select r.status, r.job_id into v_status, v_job
    from jobs.backfill_row(p_name, p_scope, p_environment) r;
  if v_status not in ('running', 'paused') then
    perform jobs.raise_error('backfill_state',
      pg_catalog.format('backfill %s (scope %L) is %s; only a running or paused one cancels',
                        p_name, p_scope, v_status));
  end if;
  update jobs.backfill b set status = 'cancelled', updated_at = jobs.now(),
                             finished_at = jobs.now()
   where b.environment = p_environment and b.name = p_name and b.scope = coalesce(p_scope, '');
  if exists (select from jobs.job j where j.id = v_job
                and j.state in ('ready', 'running', 'parked', 'interrupted')) then
    perform jobs.cancel(v_job);
  end if;
end
$$;

comment on function jobs.backfill_cancel(text, text, text) is
  'Cancel a running or paused backfill and its live job; SJ044 none, SJ045 already final.';

-- jobs.backfills(environment) -> the ledger as read by people and tools (the CLI, the
-- dashboard, describe): every row of `environment` (null: every environment), with the
-- state of its job. `status` is the row's, except a running or paused row whose job
-- ended without finishing shows that job's state (failed, dead, cancelled). A bound
-- session sees its tenant's rows only. Reads; locks nothing.
create or replace function jobs.backfills(p_environment text default null)
returns table (environment text, name text, scope text, tenant text, checksum text,
               status text, job_id bigint, job_state text, batches bigint,
               rows_done bigint, expected bigint, cursor jsonb, started_by text,
               started_at timestamptz, updated_at timestamptz, finished_at timestamptz)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
begin
  return query
  select b.environment, b.name, b.scope, b.tenant, b.checksum,
         case when b.status in ('running', 'paused')
                   and j.state in ('failed', 'dead', 'cancelled', 'succeeded')
              then j.state::text else b.status end,
         b.job_id, j.state::text, b.batches, b.rows_done, b.expected, b.cursor, b.started_by,
         b.started_at, b.updated_at, b.finished_at
    from jobs.backfill b
    left join jobs.job j on j.id = b.job_id
   where (p_environment is null or b.environment = p_environment)
     and (v_tenant is null or b.tenant = v_tenant)
   order by b.environment, b.name, b.scope;
end
$$;

comment on function jobs.backfills(text) is
  'The backfill ledger with each row''s job state (one environment, or all); a bound session sees its tenant''s.';

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
      ('sqljobs_worker', 'jobs.backfill_begin(bigint,bigint,text,text,text,text[],text[],text,bigint,boolean,text)'),
      ('sqljobs_worker', 'jobs.backfill_advance(bigint,bigint,text,text,text,integer,jsonb,bigint)'),
      ('sqljobs_worker', 'jobs.backfill_status(bigint,bigint,text,text,text)'),
      ('sqljobs_worker', 'jobs.backfill_finish(bigint,bigint,text,text,text)'),
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
      ('sqljobs_operator', 'jobs.backfill_pause(text,text,text)'),
      ('sqljobs_operator', 'jobs.backfill_resume(text,text,text)'),
      ('sqljobs_operator', 'jobs.backfill_cancel(text,text,text)'),
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
      ('sqljobs_reader', 'jobs.backfills(text)'),
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

select jobs.install_roles();
