-- sqljobs: the ledger of the data factories (docs/howto-backfills.md).
--
-- A backfill (`app.backfill(...)` in Python) is an ordinary job whose handler walks a
-- source in batches; these functions are the part of it that must hold whatever the
-- client does: the LEDGER, jobs.backfill, one row per (environment, name, scope), says
-- what RAN (the registry in code says what EXISTS; their difference is "pending").
--
-- Who writes what:
--   * the running job (sqljobs_worker), fenced on its claim like jobs.progress:
--     backfill_begin (the gate: environment, requires, checksum, another live run),
--     backfill_advance (one batch: cursor and counts, idempotent per batch) and
--     backfill_finish (the count check after the last batch);
--   * the operator (sqljobs_operator): backfill_pause, backfill_resume, backfill_cancel;
--   * everyone who may read (sqljobs_reader): jobs.backfills(), the ONE projection.
--
-- States of a ledger row (status):
--
--   running ──pause──▶ paused ──resume──▶ running
--      │  ╲                │
--      │   ╲──cancel──▶ cancelled ◀──cancel──┘
--      ├──finish (count ok)──▶ completed
--      └──finish (count short)──▶ stalled
--
-- A run whose job ended without finishing (failed, dead, cancelled by jobs.cancel) keeps
-- status running/paused here; jobs.backfills() shows the job's state instead. A new run
-- of the same (environment, name, scope) continues from the stored cursor, unless
-- `rerun` asks to start over; a completed row is never run again silently: the same
-- checksum answers 'done', another checksum is refused (backfill_checksum_changed).
--
-- Tenancy: a row carries the tenant of the job that began it; a bound session reads
-- only its tenant's rows and is refused another tenant's (tenant_refused, SJ018).
--
-- SQLSTATEs: SJ001 invalid_argument, SJ004 lease_lost (the claim does not hold),
-- SJ018 tenant_refused, SJ040 backfill_environment_refused, SJ041
-- backfill_requires_unmet, SJ042 backfill_checksum_changed, SJ043 backfill_busy,
-- SJ044 backfill_not_found, SJ045 backfill_state; SJ046 backfill_stalled is the
-- client's, from backfill_finish's answer (never raised here).

create table if not exists jobs.backfill (
  environment text        not null,
  name        text        not null,
  scope       text        not null default '',
  tenant      text,                         -- the tenant of the job that began it
  checksum    text        not null,         -- of the declaration that last ran it
  status      text        not null
              check (status in ('running', 'paused', 'completed', 'stalled', 'cancelled')),
  job_id      bigint,                       -- the job running (or that last ran) it
  job_batch   integer     not null default 0,  -- batches applied by job_id (the fence of advance)
  batches     bigint      not null default 0,
  rows_done   bigint      not null default 0,
  expected    bigint,                       -- the declared count, checked by finish
  cursor      jsonb,                        -- where the next batch starts (null: the start)
  started_by  text        not null,
  started_at  timestamptz not null,
  updated_at  timestamptz not null,
  finished_at timestamptz,
  primary key (environment, name, scope)
);

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
       select 1 from jobs.job j where j.id = v_job
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
  if exists (select 1 from jobs.job j where j.id = v_job
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
