-- sqljobs: schema, types, tables, indexes, clock and version.
--
-- Everything lives in the `jobs` schema. Tables are private storage: the functions
-- (sql/20_* .. sql/90_*) and the read-only views are the public API. Every function
-- pins `search_path = ''` and qualifies every name, so a host's search_path can never
-- change what a function means.
--
-- This file is re-runnable: each statement either creates what is missing or is a
-- `create or replace`. The one Alembic revision (migrations/versions/0001_install.py)
-- runs sql/*.sql in file-name order.

create schema if not exists jobs;

comment on schema jobs is
  'sqljobs: a durable job system whose engine is PL/pgSQL. Call the functions; tables are private.';

-- ---------------------------------------------------------------------------
-- The job state machine (docs/reference/states.md draws it).
-- ---------------------------------------------------------------------------
do $$
begin
  if not exists (select 1 from pg_catalog.pg_type t
                 join pg_catalog.pg_namespace n on n.oid = t.typnamespace
                 where n.nspname = 'jobs' and t.typname = 'job_state') then
    create type jobs.job_state as enum (
      'ready',        -- LIVE. Waiting for run_at to pass and a worker to claim it.
      'running',      -- LIVE. Claimed under a claim token and a lease; a worker runs it.
      'parked',       -- LIVE. Suspended (durable sleep, event wait, child job); not an attempt.
      'succeeded',    -- FINAL. The handler returned; `result` holds its return value.
      'failed',       -- FINAL. Failed for good without dead-lettering (terminal error, or
                      --        retries exhausted under a policy with dead_letter = false).
      'dead',         -- FINAL. Dead-lettered: retries exhausted. `jobs.requeue` redrives it.
      'cancelled',    -- FINAL. Cancelled by an operator or the API before it finished.
      'interrupted'   -- WAITING. A drain cut-off stopped its run and sent it back, uncounted;
                      --          claimed again like `ready`, but shows why it ran twice.
    );
  end if;
end
$$;

comment on type jobs.job_state is
  'Job states; LIVE = ready, running, parked (and interrupted, which waits like ready).';

-- One counter for job ids, shared by jobs.job and the outbox, so a staged row's id
-- is the id of the job it becomes.
create sequence if not exists jobs.job_id_seq as bigint;

-- ---------------------------------------------------------------------------
-- jobs.job: every job, live and finished (docs/design/finished-jobs.md says why one
-- table). The claim only ever reads `job_claimable_idx`, a partial index holding
-- nothing but claimable rows, so finished rows never slow it down.
-- ---------------------------------------------------------------------------
create table if not exists jobs.job (
  id               bigint primary key default pg_catalog.nextval('jobs.job_id_seq'),
  name             text not null,                  -- the declared job type
  queue            text not null default 'default',
  tenant           text,                           -- null: not tenant-scoped
  key              text not null,                  -- idempotency key (required)
  payload          jsonb not null default '{}',
  priority         smallint not null default 0,    -- lower runs first
  run_at           timestamptz not null,           -- not before; for parked: wake-up time
  state            jobs.job_state not null default 'ready',
  attempt          integer not null default 0,     -- attempts started (moved by claim)
  max_attempts     integer not null default 25,
  retry_base_s     double precision not null default 1,    -- backoff: base * 2^(attempt-1)
  retry_cap_s      double precision not null default 3600, -- capped here
  retry_jitter     text not null default 'full',           -- none | full | equal
  dead_letter      boolean not null default true,  -- exhausted -> dead (true) or failed
  timeout_s        double precision,               -- per attempt; enforced by the worker
  claim            bigint not null default 0,      -- claim token: moved by every claim
  lease_expires_at timestamptz,                    -- set while running
  worker           text,                           -- who holds the claim
  progress         jsonb,
  last_error       jsonb,
  result           jsonb,
  traceparent      text,
  created_at       timestamptz not null,
  started_at       timestamptz,                    -- start of the latest attempt
  finished_at      timestamptz,                    -- set on entering a final state
  constraint job_priority_range check (priority between -32768 and 32767),
  constraint job_attempts_positive check (max_attempts >= 1),
  constraint job_jitter_mode check (retry_jitter in ('none', 'full', 'equal'))
) with (fillfactor = 70);  -- room for HOT updates of progress and heartbeats

comment on table jobs.job is 'Private storage of every job; use the jobs.* functions.';

-- Idempotency namespace: (name, tenant or '', key). Covers finished rows too, so a
-- key is answered (deduped) for as long as its job is retained.
create unique index if not exists job_key_idx
  on jobs.job (name, (coalesce(tenant, '')), key);

-- The claim seeks this, per queue, in (priority, run_at, id) order.
create index if not exists job_claimable_idx
  on jobs.job (queue, priority, run_at, id)
  where state in ('ready', 'interrupted');

-- Lapsed-lease recovery seeks this: running rows by lease expiry.
create index if not exists job_lease_idx
  on jobs.job (lease_expires_at)
  where state = 'running';

-- Parked rows with a wake-up time, by that time.
create index if not exists job_parked_idx
  on jobs.job (run_at)
  where state = 'parked';

-- Operator filters and retention sweep finished rows by age.
create index if not exists job_finished_idx
  on jobs.job (finished_at)
  where finished_at is not null;

-- ---------------------------------------------------------------------------
-- jobs.queue: per-queue switches. A queue needs no row to be used; a row exists once
-- an operator paused it or set a limit.
-- ---------------------------------------------------------------------------
create table if not exists jobs.queue (
  name        text primary key,
  paused      boolean not null default false,
  updated_at  timestamptz not null
);

comment on table jobs.queue is 'Private: per-queue pause state; use jobs.pause_queue/resume_queue.';

-- ---------------------------------------------------------------------------
-- Clock. Every function reads time through jobs.now(), so tests (and pgTAP, where
-- now() is frozen for the whole transaction) can set `jobs.fake_now`.
-- ---------------------------------------------------------------------------
-- PL/pgSQL, not SQL: a SQL function with a SET clause is parsed and planned again in
-- every transaction that calls it (about 35 us against 6 us, on the enqueue path).
create or replace function jobs.now()
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
begin
  return coalesce(nullif(pg_catalog.current_setting('jobs.fake_now', true), '')::timestamptz,
                  pg_catalog.now());
end
$$;

comment on function jobs.now() is
  'Current time: the session setting jobs.fake_now when set, else now().';

-- ---------------------------------------------------------------------------
-- Version. Bump with each schema change that ships a new Alembic revision; the
-- client refuses to run against an older schema (sqljobs/_version.py).
-- ---------------------------------------------------------------------------
create or replace function jobs.schema_version()
returns integer
language sql
immutable
set search_path = ''
as $$ select 1 $$;

comment on function jobs.schema_version() is 'The installed sqljobs schema version.';
