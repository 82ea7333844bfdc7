-- sqljobs schema version 1 (released with sqljobs 0.1.0): the whole schema as installed
-- by Alembic revision sqljobs_0001.
--
-- FROZEN. A released revision is never edited (migrations/versions/RELEASED holds its
-- checksum; tests/test_migrations.py checks it). Later changes are new revisions that
-- upgrade one version to the next in place (docs/design/schema-upgrades.md). The
-- source developers edit is sql/; a fresh install runs every revision in turn, and a
-- test proves that equals sql/.

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
--
-- The job spec (docs/reference/sql.md, "Job specs") is read off this table: every
-- column but the engine's own (jobs.define_spec in sql/20_enqueue.sql names those) is
-- a spec field a caller may set, and its DEFAULT here is the field's default. Adding a
-- spec field is adding a column here (and its field to sqljobs.JobSpec).
-- ---------------------------------------------------------------------------
create table if not exists jobs.job (
  id               bigint primary key default pg_catalog.nextval('jobs.job_id_seq'),
  -- spec fields: set by the caller, defaulted here
  name             text not null,                  -- the declared job type
  queue            text not null default 'default',
  tenant           text,                           -- null: not tenant-scoped
  key              text not null,                  -- idempotency key (required)
  payload          jsonb not null default '{}',
  priority         smallint not null default 0,    -- lower runs first
  run_at           timestamptz not null,           -- not before (default: now + delay_s)
  max_attempts     integer not null default 25,
  retry_base_s     double precision not null default 1,    -- backoff: base * 2^(attempt-1)
  retry_cap_s      double precision not null default 3600, -- capped here
  retry_jitter     text not null default 'full',           -- none | full | equal
  dead_letter      boolean not null default true,  -- exhausted -> dead (true) or failed
  timeout_s        double precision,               -- per attempt; enforced by the worker
  traceparent      text,                           -- W3C traceparent of the producer span
  -- the engine's own: moved by the functions only
  state            jobs.job_state not null default 'ready',  -- for parked: run_at = wake-up
  attempt          integer not null default 0,     -- attempts started (moved by claim)
  claim            bigint not null default 0,      -- claim token: moved by every claim
  lease_expires_at timestamptz,                    -- set while running
  worker           text,                           -- who holds the claim
  progress         jsonb,
  last_error       jsonb,
  result           jsonb,
  created_at       timestamptz not null,
  started_at       timestamptz,                    -- start of the latest attempt
  finished_at      timestamptz,                    -- set on entering a final state
  first_started_at timestamptz,                    -- the first claim: an event wait's cursor
  step_seq         integer not null default 0,     -- moved by every step write (sql/50_steps.sql)
  compensable      boolean not null default false, -- a step with a compensation was stored
  compensating     boolean not null default false, -- unwinding its saga (never buried)
  parent_id        bigint,                         -- a child job: the parent awaiting it
  parent_step      text,                           --   and the parent's step
  settle_watched   boolean not null default false  -- someone awaits its result (40_settle)
) with (fillfactor = 70);  -- room for HOT updates of progress and heartbeats
-- No CHECK constraints: every value a caller gives is checked once, by
-- jobs.spec_problem, before any write (a CHECK would repeat those rules, and cost a
-- parse of its expression on every insert).

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

-- A child's settlement finds its parent's other children (sql/50_steps.sql).
create index if not exists job_parent_idx on jobs.job (parent_id) where parent_id is not null;

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
-- jobs.worker: the workers registry (sql/45_workers.sql).
-- ---------------------------------------------------------------------------
create table if not exists jobs.worker (
  id           text primary key,            -- the id the worker claims under (jobs.job.worker)
  started_at   timestamptz not null,
  heartbeat_at timestamptz not null,
  expires_at   timestamptz not null,        -- live while expires_at > jobs.now()
  queues       text[] not null,
  names        text[] not null,             -- the job names it can run (its claim filter)
  concurrency  integer not null,
  host         text,
  pid          integer,
  info         jsonb not null default '{}', -- free-form: client version, lease, poll interval
  constraint worker_concurrency_positive check (concurrency >= 1)
);

comment on table jobs.worker is
  'Private: live workers and their last heartbeat; use jobs.worker_heartbeat/worker_stop/workers.';

-- ---------------------------------------------------------------------------
-- jobs.step: one row per stored step of a job.
--   kind: run (a step.run result), sleep ({"until": time}), event ({"event", "payload",
--   "id"}), timeout ({"timeout": true}: an event wait that timed out), child ({"job_id",
--   "state", "result", "error"}: an invoked child job's outcome), undo (a compensation
--   ran; name 'sqljobs.undo:<step>'), unwind (name 'sqljobs.unwind': the job is
--   unwinding; {"state": the final state to settle in, "error": why}).
-- ---------------------------------------------------------------------------
create table if not exists jobs.step (
  job_id     bigint not null references jobs.job (id) on delete cascade,
  name       text not null,
  ordinal    integer not null,          -- order of first writing within the job
  kind       text not null,
  value      jsonb,
  event_id   bigint,                    -- kind = event: the event it consumed
  created_at timestamptz not null,
  primary key (job_id, name),
  constraint step_kind check (kind in ('run', 'sleep', 'event', 'timeout', 'child', 'undo',
                                       'unwind'))
);

comment on table jobs.step is 'Private: stored durable steps of jobs; written by jobs.step_* functions.';

-- ---------------------------------------------------------------------------
-- jobs.event: emitted events.
-- ---------------------------------------------------------------------------
create table if not exists jobs.event (
  id         bigint generated always as identity primary key,
  name       text not null,
  payload    jsonb not null default '{}',
  created_at timestamptz not null
);

comment on table jobs.event is 'Private: emitted events; use jobs.emit_event.';

-- A wait looks back by name from its cursor.
create index if not exists event_name_idx on jobs.event (name, created_at, id);

-- ---------------------------------------------------------------------------
-- jobs.event_wait: open event waits, one per (job, step); removed once resolved.
--   specs: [{"event": name, "match": {...}}, ...]  (first of several)
--   names: the event names of specs (for the emit's index lookup)
-- ---------------------------------------------------------------------------
create table if not exists jobs.event_wait (
  job_id     bigint not null references jobs.job (id) on delete cascade,
  step       text not null,
  specs      jsonb not null,
  names      text[] not null,
  deadline   timestamptz not null,     -- 'infinity': no timeout
  created_at timestamptz not null,
  primary key (job_id, step)
);

comment on table jobs.event_wait is 'Private: open event waits of parked jobs; written by jobs.step_wait.';

create index if not exists event_wait_names_idx on jobs.event_wait using gin (names);

-- ---------------------------------------------------------------------------
-- jobs.outbox: staged jobs waiting for a relay (sql/70_outbox.sql).
-- ---------------------------------------------------------------------------
create table if not exists jobs.outbox (
  id               bigint primary key default pg_catalog.nextval('jobs.job_id_seq'),
  name             text not null,
  tenant           text,
  key              text not null,
  ordering_key     text,                  -- null: no ordering among these rows
  spec             jsonb not null,        -- the job spec (validated at stage; no ordering_key)
  staged_at        timestamptz not null,
  claimed_by       text,                  -- relay holding the row (until published)
  claim            bigint not null default 0,  -- fencing token: moved by every claim
  lease_expires_at timestamptz,
  published_at     timestamptz,
  job_id           bigint,                -- the job it became: id, or an existing job's id
  outcome          text,                  -- created | deduped (set at publish)
  constraint outbox_outcome check (outcome in ('created', 'deduped'))
);

comment on table jobs.outbox is
  'Private: staged jobs waiting for a relay; use jobs.stage / jobs.relay.';

-- One unpublished staged row per idempotency key (stage dedupes on it).
create unique index if not exists outbox_key_idx
  on jobs.outbox (name, (coalesce(tenant, '')), key)
  where published_at is null;

-- The relay's claim seeks unpublished rows in id order.
create index if not exists outbox_pending_idx
  on jobs.outbox (id)
  where published_at is null;

-- The ordering check: unpublished rows of one ordering key, in id order.
create index if not exists outbox_ordering_idx
  on jobs.outbox (ordering_key, id)
  where published_at is null and ordering_key is not null;

-- A relay's held rows.
create index if not exists outbox_claimed_idx
  on jobs.outbox (claimed_by)
  where published_at is null and claimed_by is not null;

-- Retention sweeps published rows by age.
create index if not exists outbox_published_idx
  on jobs.outbox (published_at)
  where published_at is not null;

-- ---------------------------------------------------------------------------
-- jobs.schedule and jobs.leader: cron schedules and leader leases (sql/80_schedule.sql).
-- ---------------------------------------------------------------------------
create table if not exists jobs.schedule (
  name          text primary key,             -- the schedule's name (a task: its job's name)
  job_name      text not null,                -- the job type each occurrence enqueues
  cron          text not null,                -- 5 fields, or 6 with seconds first
  timezone      text not null default 'UTC',  -- IANA zone the cron is read in
  catch_up      text not null default 'latest',
  options       jsonb not null default '{}',  -- enqueue options: queue, priority, retry...
  payload       jsonb not null default '{}',
  paused        boolean not null default false,
  origin        text not null default 'api',  -- declared (@app.task) | api (added at run time)
  watermark     timestamptz not null,         -- occurrences <= this are done
  last_fired_at timestamptz,                  -- the latest occurrence fired
  created_at    timestamptz not null,
  updated_at    timestamptz not null,
  constraint schedule_catch_up check (catch_up in ('all', 'latest', 'none')),
  constraint schedule_origin check (origin in ('declared', 'api'))
);

comment on table jobs.schedule is
  'Private: cron schedules; use jobs.schedule_put / pause / resume / remove / schedules().';

create table if not exists jobs.leader (
  role             text primary key,          -- e.g. 'scheduler'
  holder           text,                      -- who holds the lease (null: released)
  token            bigint not null default 0, -- fencing token: moved by every new holder
  lease_expires_at timestamptz,
  acquired_at      timestamptz
);

comment on table jobs.leader is 'Private: leader leases; use jobs.leader_acquire / leader_release.';

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

-- sqljobs: error codes.
--
-- One SQLSTATE class for the whole product: `SJ`. Each code has a stable symbolic name;
-- the Python client maps each SQLSTATE to one exception class (sqljobs/errors.py) and
-- never parses message text. docs/reference/errors.md is the same table for people; a
-- test keeps the three in step.
--
--   SQLSTATE  name                  raised when
--   SJ001     invalid_argument      an argument is missing, malformed or out of range
--   SJ002     payload_too_large     a payload is larger than jobs.max_payload_bytes
--   SJ003     duplicate_job         on_conflict = 'error' and the key already has a job
--   SJ004     lease_lost            a fenced call's claim token or state no longer holds
--   SJ005     queues_required       jobs.claim was given no queue
--   SJ006     job_not_found         an operator verb names a job that does not exist
--   SJ007     job_not_requeueable   requeue of a job that succeeded
--   SJ008     job_live              requeue of a job that is still live (ready/running/…)
--   SJ009     job_running           remove or promote of a job that a worker is running
--   SJ010     job_finished          cancel or promote of a job already in a final state
--   SJ011     reserved_step_name    a step name starting with 'sqljobs.' (the runtime's own)
--   SJ030     not_leader            a scheduler fire whose leader token is not the live lease's
--   SJ031     schedule_not_found    a schedule verb names a schedule that does not exist

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
    ('SJ030', 'not_leader',          'the leader token does not hold the live lease'),
    ('SJ031', 'schedule_not_found',  'no schedule has that name')
$$;

comment on function jobs.error_codes() is 'The sqljobs SQLSTATE table: code, symbolic name, meaning.';

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

comment on function jobs.raise_error(text, text, text, text) is
  'Raise the coded sqljobs error p_name (see jobs.error_codes()).';

-- The largest payload accepted, in bytes of its jsonb text form. A session or a role
-- may lower or raise it with `set jobs.max_payload_bytes = ...`.
-- PL/pgSQL for the same reason as jobs.now() (sql/00_schema.sql).
create or replace function jobs.max_payload_bytes()
returns integer
language plpgsql
stable
set search_path = ''
as $$
begin
  return coalesce(nullif(pg_catalog.current_setting('jobs.max_payload_bytes', true), '')::integer,
                  1048576);
end
$$;

comment on function jobs.max_payload_bytes() is
  'Payload size limit in bytes (setting jobs.max_payload_bytes, default 1 MiB).';

-- sqljobs: enqueue.
--
-- A job spec is a jsonb object. Its fields are the columns of jobs.job that a caller
-- may set (sql/00_schema.sql; jobs.spec_fields() lists them with their types), plus two
-- that only steer the enqueue:
--
--   delay_s      float   run_at = now + delay_s; exclusive with run_at
--   on_conflict  text    'return' (default): answer the existing job as deduped;
--                        'error': raise duplicate_job (SJ003)
--
-- `name` and `key` are required; every other field takes its column's DEFAULT
-- (jobs.spec_defaults()), and a field given as JSON null does too. run_at defaults to
-- now (+ delay_s). Values must be of their column's JSON type (text: a string; a whole
-- number within the column's range; a number; true/false; a time as an ISO 8601
-- string) and within the rules of jobs.spec_problem; anything else is invalid_argument.
--
-- Idempotency namespace: (name, coalesce(tenant, ''), key). A second enqueue in it
-- answers the existing job, live or finished, with outcome 'deduped'.
--
-- Wake-ups: one pg_notify('jobs_wake', <queue>) per queue that got a job runnable now,
-- per call; PostgreSQL folds repeats within one transaction. `set jobs.notify = off`
-- turns it off for a session (workers also poll).

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
                             'compensating', 'parent_id', 'parent_step', 'settle_watched'];
  -- the fields that only steer an enqueue (not columns)
  v_steering jsonb := '{"delay_s": "double precision", "on_conflict": "text"}';
  v_fields   jsonb := '{}';
  v_defaults jsonb := '{}';
  v_columns  text[] := '{}';  -- spec columns the insert names (run_at is computed)
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
  if pg_catalog.to_regtype('jobs.job_spec') is null then
    execute 'create type jobs.job_spec as (' ||
            (select pg_catalog.string_agg(pg_catalog.format('%I %s', f.key, f.value #>> '{}'),
                                          ', ' order by f.key)
               from pg_catalog.jsonb_each(v_fields) f) || ')';
  else
    for v_col in
      select f.key as name, f.value #>> '{}' as type
        from pg_catalog.jsonb_each(v_fields) f
       where not exists (select from pg_catalog.pg_attribute a
                          where a.attrelid = 'jobs.job_spec'::pg_catalog.regclass
                            and a.attname = f.key and not a.attisdropped)
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
                coalesce(v_r.run_at,
                         p_now + pg_catalog.make_interval(secs => coalesce(v_r.delay_s, 0))),
                p_now)
        on conflict (name, (coalesce(tenant, '')), key) do nothing
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
               coalesce((s.r).run_at,
                        p_now + pg_catalog.make_interval(secs => coalesce((s.r).delay_s, 0))),
               p_now
          from sorted s
        on conflict (name, (coalesce(tenant, '')), key) do nothing
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
end
$define$;

comment on function jobs.define_spec() is
  'Derive the job spec (fields, defaults, the insert) from the columns of jobs.job.';

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
-- jobs.wake(queues): one pg_notify('jobs_wake', queue) per queue, unless the session
-- set jobs.notify = off. PostgreSQL delivers them at commit and folds repeats within
-- a transaction, so a transaction wakes each queue once however many calls it makes.
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
    perform pg_catalog.pg_notify('jobs_wake', v_queue);
  end loop;
end
$$;

comment on function jobs.wake(text[]) is
  'Notify jobs_wake once per queue (off when the session sets jobs.notify = off).';

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
--     outcome 'deduped'.
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
begin
  -- GUARD: every refusal happens here, before the first write.
  perform jobs.check_specs(p_specs);

  -- ONE SPEC (jobs.enqueue, most client calls): the same steps for one row, without the
  -- batch statements' set-up.
  if pg_catalog.jsonb_array_length(p_specs) = 1 then
    v_spec := p_specs->0;
    v_strict := v_spec->>'on_conflict' = 'error';
    if v_strict then
      perform jobs.refuse_duplicate(1, jobs.job_of_key(v_spec->>'name', v_spec->>'tenant',
                                                       v_spec->>'key'), v_spec->>'key');
    end if;
    select c.id, c.queue, c.run_at into v_id, v_queue, v_run_at
      from jobs.insert_jobs(p_specs, v_now) c;
    ord := 1;
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
    -- first (this later statement sees it).
    id := jobs.job_of_key(v_spec->>'name', v_spec->>'tenant', v_spec->>'key');
    if v_strict then
      perform jobs.refuse_duplicate(1, id, v_spec->>'key');
    end if;
    outcome := 'deduped';
    return next;
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
      select coalesce(e.id, jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key'))
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

comment on function jobs.enqueue_many(jsonb) is
  'Enqueue a jsonb array of job specs; one (ord, id, outcome) per spec in input order.';

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

-- ---------------------------------------------------------------------------
-- jobs.enqueue(name, key, payload, options) -> (id, outcome): one job.
-- options takes every spec field but name, key and payload; it is exactly a one-spec
-- jobs.enqueue_many: the same refusals, answer and wake-up.
-- ---------------------------------------------------------------------------
create or replace function jobs.enqueue(
  p_name    text,
  p_key     text,
  p_payload jsonb default '{}',
  p_options jsonb default '{}'
)
returns table (id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query
    select m.id, m.outcome
      from jobs.enqueue_many(jobs.one_spec(p_name, p_key, p_payload, p_options)) m;
end
$$;

comment on function jobs.enqueue(text, text, jsonb, jsonb) is
  'Enqueue one job; answers its id and created | deduped.';

select jobs.define_spec();

-- sqljobs: claim.
--
-- jobs.claim(queues, worker, limit, lease_s, options) -> up to `limit` running jobs.
--
-- One call, one autocommit statement from the client, three phases:
--   RECOVER  running jobs in these queues whose lease lapsed (at most 100 per call, by
--            job_lease_idx): back to ready with the attempt counted, or, when that was
--            the final attempt, buried as dead (failed when dead_letter is off) and
--            never returned (a compensating job always goes back to ready: its saga
--            unwind must finish). Parked jobs whose wake-up time passed become ready.
--   PICK     per unpaused queue, the first `limit` claimable rows in (priority, run_at,
--            id) order from job_claimable_idx, `for update skip locked`; then the first
--            `limit` of those across queues. Finished rows are never read.
--   CLAIM    each picked job: running, attempt + 1, claim + 1 (the new claim token),
--            lease_expires_at = now + lease_s, worker recorded; first_started_at set
--            on the first claim (the event-wait cursor, sql/60_events.sql). Answers
--            the claim time (started_at) and the job's stored steps (sql/50_steps.sql).
--
-- options: {"names": [..]} claims only those job names (a worker claims what it can
--          run; others wait for a worker that knows them).
--          {"recover": false} skips the RECOVER phase: a busy worker claiming again as
--          slots free leaves recovery to its periodic (poll) claims, which keep the
--          default true — recovery stays within lease TTL + one poll.
-- Locks: row locks only, all taken with skip locked; no lock waits.
-- Errors: queues_required (SJ005) for no queue; invalid_argument (SJ001) for a missing
--         worker, limit outside 1..1000, lease_s <= 0, or a bad option.

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
-- `id = any(array(...))` on job_pkey, never by joining a scan of jobs.job.
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
declare
  v_now    timestamptz := jobs.now();
  v_queues text[];
  v_names  text[];
  v_unwind_ids    bigint[];
  v_unwind_seqs   integer[];
  v_unwind_states jobs.job_state[];
  v_unwind_errors jsonb[];
begin
  -- GUARD
  if p_queues is null or pg_catalog.cardinality(p_queues) = 0 then
    perform jobs.raise_error('queues_required', 'claim needs at least one queue',
                             null, 'pass the queues this worker serves');
  end if;
  if p_worker is null or p_worker = '' then
    perform jobs.raise_error('invalid_argument', 'worker is required');
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('limit must be between 1 and 1000, got %s', p_limit));
  end if;
  if p_lease_s is null or p_lease_s <= 0 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive, got %s', p_lease_s));
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
      select l.id, jobs.retry_state(l.attempt, l.max_attempts, l.dead_letter) as next_state
        from jobs.job l
       where l.state = 'running' and l.lease_expires_at < v_now
         and l.queue = any (p_queues)
       order by l.lease_expires_at
       limit 100
         for update skip locked
    ), moved as (
      update jobs.job as j
         set state = case when j.compensable or j.compensating then 'ready'
                          else n.next_state end,
             run_at = v_now,
             lease_expires_at = null,
             finished_at = case when n.next_state = 'ready' or j.compensable or j.compensating
                                then null else v_now end,
             compensating = j.compensating or (j.compensable and n.next_state <> 'ready'),
             step_seq = j.step_seq + case when j.compensable and not j.compensating
                                               and n.next_state <> 'ready' then 1 else 0 end,
             last_error = pg_catalog.jsonb_build_object(
               'kind', 'lease_expired',
               'message', pg_catalog.format('the lease of worker %s expired during attempt %s',
                                            j.worker, j.attempt),
               'attempt', j.attempt,
               'at', v_now)
        from lapsed n
       where j.id = n.id
      returning j.id, j.step_seq, n.next_state, j.last_error,
                j.compensable and n.next_state <> 'ready' as starts_unwind
    )
    select pg_catalog.array_agg(m.id), pg_catalog.array_agg(m.step_seq),
           pg_catalog.array_agg(m.next_state), pg_catalog.array_agg(m.last_error)
      into v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors
      from moved m
     where m.starts_unwind;
    perform jobs.record_unwinds(v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors);

    -- Wake parked jobs whose time came (durable sleeps, wait timeouts).
    update jobs.job as j
       set state = 'ready'
      from (select p.id
              from jobs.job p
             where p.state = 'parked' and p.run_at <= v_now and p.queue = any (p_queues)
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

  -- CLAIM
  return query
    with picked as materialized (
      select c.id, c.priority, c.run_at
        from pg_catalog.unnest(v_queues) as q(name)
        cross join lateral (
          select r.id, r.priority, r.run_at
            from jobs.job r
           where r.state in ('ready', 'interrupted')
             and r.queue = q.name
             and r.run_at <= v_now
             and (v_names is null or r.name = any (v_names))
           order by r.priority, r.run_at, r.id
           limit p_limit
             for update skip locked) as c
       order by c.priority, c.run_at, c.id
       limit p_limit
    ),
    claimed as (
      update jobs.job as j
         set state = 'running',
             attempt = j.attempt + 1,
             claim = j.claim + 1,
             worker = p_worker,
             lease_expires_at = v_now + pg_catalog.make_interval(secs => p_lease_s),
             started_at = v_now,
             first_started_at = coalesce(j.first_started_at, v_now)
        from picked
       where j.id = any (array(select p.id from picked p)) and j.id = picked.id
      returning j.id, j.name, j.queue, j.tenant, j.key, j.payload, j.priority, j.attempt,
                j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.claim,
                j.lease_expires_at, j.timeout_s, j.progress,
                j.traceparent, j.created_at, picked.run_at as picked_run_at, j.step_seq
    )
    select c.id, c.name, c.queue, c.tenant, c.key, c.payload, c.priority, c.attempt,
           c.max_attempts, c.retry_base_s, c.retry_cap_s, c.retry_jitter, c.claim,
           c.lease_expires_at, c.timeout_s, c.progress,
           c.traceparent, c.created_at, v_now,
           -- Stored steps (sql/50_steps.sql), read only for jobs that ever wrote one.
           case when c.step_seq > 0 then
             (select pg_catalog.jsonb_object_agg(s.name, s.value)
                from jobs.step s where s.job_id = c.id)
           end
      from claimed c
     order by c.priority, c.picked_run_at, c.id;
end
$$;

comment on function jobs.claim(text[], text, integer, double precision, jsonb) is
  'Claim up to p_limit jobs from p_queues under a new claim token and a lease; recovers lapsed leases.';

-- sqljobs: settle a claimed job — ack, nack, heartbeat, progress, and their batches.
--
-- FENCE: every function here changes a job only while state = 'running' AND its claim
-- token equals the caller's. A stale caller (its lease lapsed and the job was
-- recovered or re-claimed, or an operator cancelled it) changes nothing:
--   * ack / nack raise lease_lost (SJ004);
--   * ack_many / nack_many / heartbeat_many answer ok = false for that job;
--   * heartbeat / progress answer false.
-- Locks: one row lock per settled job, taken by the update; batches lock in id order.

-- ---------------------------------------------------------------------------
-- jobs.backoff_s(attempt, base_s, cap_s, jitter) -> seconds before the next attempt.
-- delay = least(cap, base * 2^(attempt - 1));  none: delay;  full: uniform [0, delay];
-- equal: delay/2 + uniform [0, delay/2]. Computed here so every client agrees.
-- ---------------------------------------------------------------------------
create or replace function jobs.backoff_s(
  p_attempt integer,
  p_base_s  double precision,
  p_cap_s   double precision,
  p_jitter  text
)
returns double precision
language sql
volatile
set search_path = ''
as $$
  select case p_jitter
           when 'none'  then d.delay
           when 'full'  then pg_catalog.random() * d.delay
           when 'equal' then d.delay / 2 + pg_catalog.random() * d.delay / 2
         end
    from (select case
                   -- At the cap already? Asked in logs, because 2^(attempt - 1) overflows a
                   -- double from attempt 1025 on (a job may have max_attempts > 1024).
                   when p_base_s > 0 and p_cap_s > 0
                        and (greatest(p_attempt, 1) - 1) * pg_catalog.ln(2::double precision)
                            >= pg_catalog.ln(p_cap_s) - pg_catalog.ln(p_base_s)
                     then p_cap_s
                   else least(p_cap_s,
                              p_base_s * pg_catalog.power(2::double precision,
                                                          greatest(p_attempt, 1) - 1))
                 end as delay) d
$$;

comment on function jobs.backoff_s(integer, double precision, double precision, text) is
  'Backoff in seconds after attempt p_attempt: exponential, capped, with jitter none|full|equal.';

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

-- ---------------------------------------------------------------------------
-- Result waiters. A caller awaiting a job's result (app.result) marks the job watched
-- (jobs.watch_outcome); settling a watched job notifies 'jobs_settled' once per call
-- with the watched ids, comma-separated ('*' past NOTIFY's 8000-byte limit: re-check
-- everything). Settling jobs nobody watches notifies nothing: a notifying commit takes
-- a database-wide lock, which a busy worker must not pay per batch for no listener.
-- Skipped when the session sets jobs.notify = off.
-- ---------------------------------------------------------------------------

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
  v_payload := pg_catalog.array_to_string(p_ids, ',');
  if pg_catalog.octet_length(v_payload) > 7900 then
    v_payload := '*';
  end if;
  perform pg_catalog.pg_notify('jobs_settled', v_payload);
end
$$;

comment on function jobs.notify_settled(bigint[]) is
  'Notify jobs_settled once with these (watched) ids, or * when too many; off with jobs.notify = off.';

-- jobs.watch_outcome(id) -> (id, state, result, last_error): the job as it is now, and
-- from now on its settlement notifies 'jobs_settled' (a waiter LISTENs first, then
-- calls this, so no settlement falls between). No row: no such job.
create or replace function jobs.watch_outcome(p_id bigint)
returns table (id bigint, state jobs.job_state, result jsonb, last_error jsonb)
language plpgsql
volatile
set search_path = ''
as $$
begin
  update jobs.job as j set settle_watched = true
   where j.id = p_id and not j.settle_watched
     and j.state in ('ready', 'running', 'parked', 'interrupted');
  return query select j.id, j.state, j.result, j.last_error from jobs.job j where j.id = p_id;
end
$$;

comment on function jobs.watch_outcome(bigint) is
  'The job''s state, result and last error; marks it watched so its settlement notifies jobs_settled.';

-- ---------------------------------------------------------------------------
-- jobs.ack_many(ids, claims, results) -> (id, ok) per input, in input order.
-- running -> succeeded, storing the result (jsonb; null allowed). results may be
-- null (no results at all). ok = false: the fence did not hold, nothing changed.
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
           lease_expires_at = null
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

comment on function jobs.ack_many(bigint[], bigint[], jsonb[]) is
  'Settle running jobs as succeeded with their results; fenced per job, answers ok per job.';

-- jobs.ack(id, claim, result): one job; raises lease_lost (SJ004) when the fence fails.
create or replace function jobs.ack(p_id bigint, p_claim bigint, p_result jsonb default null)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if not (select a.ok from jobs.ack_many(array[p_id], array[p_claim], array[p_result]) a) then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
end
$$;

comment on function jobs.ack(bigint, bigint, jsonb) is
  'Settle one running job as succeeded; raises lease_lost (SJ004) when the fence fails.';

-- jobs.lease_lost(id, claim): raise SJ004 describing where the job is now.
create or replace function jobs.lease_lost(p_id bigint, p_claim bigint)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_state jobs.job_state;
  v_claim bigint;
begin
  select j.state, j.claim into v_state, v_claim from jobs.job j where j.id = p_id;
  perform jobs.raise_error('lease_lost',
    pg_catalog.format('job %s is no longer held by claim %s', p_id, p_claim),
    case when v_state is null then 'the job no longer exists'
         else pg_catalog.format('the job is %s under claim %s', v_state, v_claim) end,
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

comment on function jobs.retry_state(integer, integer, boolean) is
  'Where a failed attempt leads: ready while attempts remain, else dead (or failed without dead-letter).';

-- ---------------------------------------------------------------------------
-- jobs.record_unwinds(ids, ordinals, states, errors): store the 'sqljobs.unwind' step of
-- each job that starts unwinding its saga (docs/design/sagas.md): the final state it
-- will settle in once its compensations ran, and why. The caller moves the job itself
-- (compensating = true, step_seq to the ordinal). A recorded unwind is kept as is.
-- ---------------------------------------------------------------------------
create or replace function jobs.record_unwinds(p_ids bigint[], p_ordinals integer[],
                                               p_states jobs.job_state[], p_errors jsonb[])
returns void
language sql
volatile
set search_path = ''
as $$
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at)
  select u.id, 'sqljobs.unwind', u.ordinal, 'unwind',
         pg_catalog.jsonb_build_object('state', u.state, 'error', u.error), jobs.now()
    from unnest(p_ids, p_ordinals, p_states, p_errors) as u(id, ordinal, state, error)
  on conflict (job_id, name) do nothing
$$;

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
--              claimed again like ready.
-- errors: jsonb per job (null allowed), stored in last_error with attempt and time; an
--         error that is not an object is stored as {"message": error, ...}. A null error
--         leaves last_error as it was.
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
  if exists (select 1 from pg_catalog.unnest(p_delays_s) d where d < 0 or d >= 'Infinity') then
    perform jobs.raise_error('invalid_argument', 'delays_s must be finite and not negative');
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
             n.next_state in ('failed', 'dead') and j.compensable and not j.compensating
               as unwinds,
             case
               when i.mode = 'retry' then
                 v_now + pg_catalog.make_interval(secs => coalesce(i.delay_s,
                   jobs.backoff_s(j.attempt, j.retry_base_s, j.retry_cap_s, j.retry_jitter)))
               when i.mode = 'park' then
                 coalesce(v_now + pg_catalog.make_interval(secs => i.delay_s), 'infinity')
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
             last_error = case when t.error is null then j.last_error
                               else case when pg_catalog.jsonb_typeof(t.error) = 'object' then t.error
                                         else pg_catalog.jsonb_build_object('message', t.error) end
                                    || pg_catalog.jsonb_build_object('attempt', t.attempt, 'at', v_now)
                          end
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

comment on function jobs.nack_many(bigint[], bigint[], jsonb[], text[], double precision[]) is
  'Settle running jobs that did not succeed (retry, fail, park, shed, interrupt); fenced per job.';

-- jobs.nack(id, claim, error, mode, delay_s) -> the job's new state; raises lease_lost.
create or replace function jobs.nack(
  p_id      bigint,
  p_claim   bigint,
  p_error   jsonb default null,
  p_mode    text default 'retry',
  p_delay_s double precision default null
)
returns jobs.job_state
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_ok    boolean;
  v_state jobs.job_state;
begin
  select n.ok, n.state into v_ok, v_state
    from jobs.nack_many(array[p_id], array[p_claim], array[p_error], array[p_mode],
                        array[p_delay_s]) n;
  if not v_ok then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
  return v_state;
end
$$;

comment on function jobs.nack(bigint, bigint, jsonb, text, double precision) is
  'Settle one running job that did not succeed; answers its new state; raises lease_lost (SJ004).';

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
  v_now timestamptz := jobs.now();
begin
  perform jobs.check_batch(p_ids, p_claims, null::text[]);
  if p_lease_s is null or p_lease_s <= 0 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive, got %s', p_lease_s));
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

comment on function jobs.heartbeat_many(bigint[], bigint[], double precision) is
  'Extend the leases of running jobs still held under these claims; ok = false means lost.';

-- jobs.heartbeat(id, claim, lease_s) -> true while the lease is still this claim's.
create or replace function jobs.heartbeat(p_id bigint, p_claim bigint, p_lease_s double precision default 30)
returns boolean
language sql
volatile
set search_path = ''
as $$
  select h.ok from jobs.heartbeat_many(array[p_id], array[p_claim], p_lease_s) h
$$;

comment on function jobs.heartbeat(bigint, bigint, double precision) is
  'Extend one lease; false when the job is no longer held under this claim.';

-- jobs.progress(id, claim, progress) -> true when recorded; false when the fence failed.
create or replace function jobs.progress(p_id bigint, p_claim bigint, p_progress jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  update jobs.job as j
     set progress = p_progress
   where j.id = p_id and j.claim = p_claim and j.state = 'running';
  return found;
end
$$;

comment on function jobs.progress(bigint, bigint, jsonb) is
  'Record progress of a running job under its claim; false when the fence failed.';

-- sqljobs: the workers table — who is serving which queues and job names.
--
-- A worker registers on start and then heartbeats (jobs.worker_heartbeat, an upsert),
-- and removes its row on a clean exit (jobs.worker_stop). A worker that dies without
-- stopping simply stops heartbeating: its row is LIVE while expires_at > jobs.now()
-- and is forgotten (deleted) by any later heartbeat once it has been expired for an
-- hour, so the table stays as small as the fleet.
--
-- This registry is advisory: it answers "who is out there" (`sqljobs workers`) and
-- "which ready jobs can no live worker run" (jobs.unserved_jobs). Job safety never
-- depends on it — leases and claim tokens on jobs.job do that.

-- ---------------------------------------------------------------------------
-- jobs.worker_heartbeat(id, queues, names, concurrency, ttl_s, host, pid, info)
--   -> the worker's expires_at.
-- Inserts the worker's row on first call (started_at = now), updates it afterwards
-- (started_at kept), and sets expires_at = now + ttl_s. Then forgets rows that have
-- been expired for more than an hour (at most 100 per call).
-- Idempotent: repeating a call changes only the times.
-- Locks: the worker's own row (upsert); expired rows with skip locked.
-- Errors: invalid_argument (SJ001) for a missing id, no queue, null names,
--         concurrency < 1, or ttl_s <= 0.
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
  if p_id is null or p_id = '' then
    perform jobs.raise_error('invalid_argument', 'worker id is required');
  end if;
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
  if p_ttl_s is null or p_ttl_s <= 0 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('ttl_s must be positive, got %s', p_ttl_s));
  end if;

  -- UPSERT
  v_expires := v_now + pg_catalog.make_interval(secs => p_ttl_s);
  insert into jobs.worker as w
         (id, started_at, heartbeat_at, expires_at, queues, names, concurrency, host, pid, info)
  values (p_id, v_now, v_now, v_expires, p_queues, p_names, p_concurrency, p_host, p_pid,
          coalesce(p_info, '{}'))
  on conflict (id) do update
     set heartbeat_at = excluded.heartbeat_at,
         expires_at   = excluded.expires_at,
         queues       = excluded.queues,
         names        = excluded.names,
         concurrency  = excluded.concurrency,
         host         = excluded.host,
         pid          = excluded.pid,
         info         = excluded.info;

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

comment on function jobs.worker_heartbeat(text, text[], text[], integer, double precision, text, integer, jsonb) is
  'Register or refresh a worker (upsert); live until now + ttl_s. Answers expires_at.';

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
begin
  delete from jobs.worker w where w.id = p_id;
  return found;
end
$$;

comment on function jobs.worker_stop(text) is
  'Deregister a worker; true when it was registered.';

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
  select w.id, w.started_at, w.heartbeat_at, w.expires_at, w.queues, w.names,
         w.concurrency, w.host, w.pid,
         (select pg_catalog.count(*) from jobs.job j
           where j.state = 'running' and j.worker = w.id) as running
    from jobs.worker w
   where w.expires_at > jobs.now()
   order by w.started_at, w.id
$$;

comment on function jobs.workers() is
  'Live workers (heartbeat not expired) with their queues, job names and running count.';

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

comment on function jobs.unserved_jobs() is
  'Waiting jobs, per queue and name, that no live worker declares (so none will claim them).';

-- sqljobs: durable steps — put, sleep.
--
-- A job's handler records the outcome of each named step of its run in jobs.step. When
-- the job runs again (a retry, a wake-up after a sleep or an event wait, a crash
-- recovered by its lease), jobs.claim hands back every stored step of the job in its
-- `steps` column, so the handler replays them without a round trip and runs only what
-- was never stored.
--
-- FENCE: every function here writes only while the job is `running` under the caller's
-- claim token (the same fence as ack/nack); otherwise it raises lease_lost (SJ004) and
-- writes nothing. A run that lost its lease or was cancelled can store no more steps.
--
-- Costs: jobs.step_put is ONE statement from the client: it checks the fence, extends
-- the lease, stores the step and answers the stored value. A put of a step that is
-- already stored answers what is stored (idempotent; the first write wins).
-- Locks: the job row (by the fenced update), then the step row (by its insert).
-- Retention: steps go with their job (foreign key, on delete cascade), so the remove
-- verbs and retention purge them with it.

-- Columns of jobs.job this concern reads and moves (declared in sql/00_schema.sql):
--   step_seq          a counter moved by every step write: the next step's ordinal; the
--                     claim reads the steps table only for jobs where it is > 0
--   first_started_at  the first claim of the job (set once by jobs.claim): the cursor
--                     from which an event wait looks back (sql/60_events.sql)
--   compensable       a step with a compensation was stored: a final failure or a cancel
--                     unwinds the job instead of settling it at once (sagas, below)
--   compensating      the job is unwinding: claimable (ready) until its compensations
--                     ran; lease recovery sends it back to ready, never buries it

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
  v_seq integer;
begin
  if p_lease_s is not null and (p_lease_s <= 0 or p_lease_s >= 'Infinity') then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive, got %s', p_lease_s));
  end if;
  update jobs.job as j
     set step_seq = j.step_seq + 1,
         lease_expires_at = case when p_lease_s is null then j.lease_expires_at
                                 else jobs.now() + pg_catalog.make_interval(secs => p_lease_s) end
   where j.id = p_id and j.claim = p_claim and j.state = 'running'
  returning j.step_seq into v_seq;
  if v_seq is null then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
  return v_seq;
end
$$;

-- Shared guard: a step name is a non-empty string of at most 200 characters, and not
-- one of the runtime's own ('sqljobs.' ...: a saga's unwind and undo records), which
-- only these functions write (reserved_step_name SJ011).
create or replace function jobs.check_step_name(p_name text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_name is null or p_name = '' or pg_catalog.length(p_name) > 200 then
    perform jobs.raise_error('invalid_argument',
      'a step name must be a non-empty string of at most 200 characters');
  end if;
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

comment on function jobs.step_put(bigint, bigint, text, jsonb, double precision, jsonb) is
  'Store a durable step of a running job under its claim (first write wins); answers the stored value.';

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
     or p_delay_s < 0 or p_delay_s >= 'Infinity' then
    perform jobs.raise_error('invalid_argument',
      'a sleep needs exactly one of until (a finite time) or delay_s (finite, not negative)');
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

comment on function jobs.step_sleep(bigint, bigint, text, timestamptz, double precision) is
  'Durable sleep: store the wake-up time once, park the job until then; parked = false once it passed.';

-- ---------------------------------------------------------------------------
-- jobs.job_steps(id) -> the stored steps of a job, in ordinal order (the read side).
-- ---------------------------------------------------------------------------
create or replace function jobs.job_steps(p_id bigint)
returns table (name text, ordinal integer, kind text, value jsonb, created_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select s.name, s.ordinal, s.kind, s.value, s.created_at
    from jobs.step s where s.job_id = p_id order by s.ordinal
$$;

comment on function jobs.job_steps(bigint) is 'The stored steps of one job, in the order they were first written.';

-- ===========================================================================
-- Child jobs: a step that enqueues other jobs and parks its job until they settle.
-- ===========================================================================
--   parent_id, parent_step  set on a child by jobs.step_invoke: the parent job and the
--                           step awaiting it. A child's FINAL settlement (succeeded,
--                           failed, dead, cancelled — by ack, nack, lease recovery or
--                           an operator) or its removal makes a parked parent ready
--                           (trigger job_child_settled). The trigger's WHEN clause is
--                           evaluated for every state change but calls nothing for a
--                           job without a parent: the hot ack path pays one null test.

-- Wakes the parent of a child that reached a final state (or was removed), and
-- notifies the parent's queue (jobs.wake) so a worker claims it at once. Only child
-- jobs pay that notifying commit; PostgreSQL folds repeats within one transaction.
create or replace function jobs.child_settled()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_parent bigint := case when tg_op = 'DELETE' then old.parent_id else new.parent_id end;
  v_queue  text;
begin
  update jobs.job as p
     set state = 'ready', run_at = jobs.now()
   where p.id = v_parent and p.state = 'parked'
  returning p.queue into v_queue;
  if v_queue is not null then
    perform jobs.wake(array[v_queue]);
  end if;
  return null;
end
$$;

drop trigger if exists job_child_settled on jobs.job;
create trigger job_child_settled
  after update of state on jobs.job
  for each row
  when (new.parent_id is not null
        and new.state in ('succeeded', 'failed', 'dead', 'cancelled')
        and old.state is distinct from new.state)
  execute function jobs.child_settled();

drop trigger if exists job_child_removed on jobs.job;
create trigger job_child_removed
  after delete on jobs.job
  for each row
  when (old.parent_id is not null)
  execute function jobs.child_settled();

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

  -- ENQUEUE the child of every step not stored yet (created, or found by its key).
  select pg_catalog.array_agg(u.n order by u.ord),
         pg_catalog.jsonb_agg(case when p_specs->(u.ord::integer - 1) ? 'key'
                                   then p_specs->(u.ord::integer - 1)
                                   else p_specs->(u.ord::integer - 1)
                                        || pg_catalog.jsonb_build_object('key', p_id || ':' || u.n)
                              end order by u.ord)
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

comment on function jobs.step_invoke(bigint, bigint, text[], jsonb, double precision) is
  'Durable child jobs: enqueue once per step, park until every child settled; answers each outcome.';

-- ===========================================================================
-- Sagas: unwinding a job's completed compensable steps (docs/design/sagas.md).
-- ===========================================================================
-- A job that stored a compensable step (step_put option "compensable") does not settle
-- at once when it fails for good or is cancelled. Instead it enters the COMPENSATING
-- phase (job.compensating = true, an 'sqljobs.unwind' step records the final state
-- and error it will settle in), and a run — the failing run itself, or any later run
-- after a crash, a drain or a cancel — replays the stored steps to learn their
-- compensations and runs them in reverse order, each stored as its own step
-- ('sqljobs.undo:<step>', option "undo") so a crash mid-unwind never repeats a finished
-- one. jobs.step_unwound then settles the job in the recorded final state.
--   * nack (any settle)  of a compensable running job that would end failed or dead ->
--                        compensating, still running under its claim (sql/40_settle.sql)
--   * cancel (any verb)  of a compensable, live job -> ready + compensating (trigger
--                        job_cancel_unwinds), so a worker claims it to unwind; the
--                        old run's fence no longer holds. Cancelling a job that is
--                        already compensating changes nothing: its unwind finishes.
--   * lease recovery     of a compensable job on its final attempt -> ready + compensating;
--                        of a compensating job -> ready, never buried (sql/30_claim.sql)
--   * jobs.step_unwound  compensating, running job -> its recorded final state

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
  v_unwind jsonb;
  v_state  jobs.job_state;
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
  returning j.state into v_state;
  perform jobs.notify_settled(array[p_id]);
  return v_state;
end
$$;

comment on function jobs.step_unwound(bigint, bigint) is
  'Saga: settle a job whose compensations all ran in the final state its unwind recorded.';

-- Cancelling a compensable job unwinds it (see above).
create or replace function jobs.cancel_unwinds()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  if old.compensating then
    -- already unwinding: the unwind finishes and settles the job
    new.state := old.state;
    new.finished_at := old.finished_at;
    new.lease_expires_at := old.lease_expires_at;
    return new;
  end if;
  perform jobs.record_unwinds(array[old.id], array[old.step_seq + 1], '{cancelled}',
    array[pg_catalog.jsonb_build_object('kind', 'cancelled', 'message', 'the job was cancelled')]);
  new.step_seq := old.step_seq + 1;
  new.state := 'ready';
  new.run_at := jobs.now();
  new.finished_at := null;
  new.lease_expires_at := null;
  new.compensating := true;
  perform jobs.wake(array[old.queue]);
  return new;
end
$$;

drop trigger if exists job_cancel_unwinds on jobs.job;
create trigger job_cancel_unwinds
  before update of state on jobs.job
  for each row
  -- (jobs.step_unwound's own settlement clears compensating: not a cancel)
  when (new.state = 'cancelled' and old.state <> 'cancelled' and old.compensable
        and new.compensating = old.compensating)
  execute function jobs.cancel_unwinds();

-- sqljobs: events — emit, durable event waits, wake.
--
-- jobs.emit_event(name, payload) records an event and wakes, at once, EVERY parked job
-- with an open wait that the event matches (broadcast: one event is seen by every
-- matching waiter; each waiting job consumes it once). Callable from plain SQL anywhere,
-- e.g. in the transaction that made the change the event announces: it counts, and
-- wakes, only if that transaction commits.
--
-- A wait is a durable step (jobs.step_wait): it resolves with the first matching event
-- emitted since the job's FIRST claim (first_started_at: the cursor), not consumed by an
-- earlier step of the same job, and not after the wait's deadline; or, once the
-- deadline passed with no such event, with a timeout. Either outcome is stored as the
-- step, so a replay answers the same thing. An event emitted after the job started but
-- before the wait was registered is therefore not lost.
--
-- Match: jsonb containment, `payload @> match` ({} matches every payload).
--
-- Locks (why no event falls between a wait and an emit): both take a transaction-level
-- advisory lock per event name — an emit SHARE (emits never block each other), a wait
-- EXCLUSIVE, in name order — so a wait's look-back and an emit's wake-up never run
-- concurrently for one name: either the emit commits first and the wait sees the event,
-- or the wait (and its park) commits first and the emit sees the wait and wakes it.
-- An emit inside a long transaction holds its share lock until commit, delaying waits
-- on that name (not other emits). Lock order: the job row (fence), then the advisory
-- locks. A transaction that emits several names may deadlock with a wait on the same
-- names (PostgreSQL aborts one; the client retries the wait).
-- Retention: event waits go with their job (on delete cascade); events themselves are
-- purged by age with jobs.purge_events.

-- The advisory lock key of an event name (one per name; a hash collision only
-- serializes two names more than needed).
create or replace function jobs.event_lock_key(p_name text)
returns bigint
language sql
immutable
set search_path = ''
as $$ select pg_catalog.hashtextextended('sqljobs.event:' || p_name, 0) $$;

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
begin
  -- GUARD
  if p_name is null or p_name = '' then
    perform jobs.raise_error('invalid_argument', 'an event needs a name');
  end if;
  if p_payload is null or pg_catalog.jsonb_typeof(p_payload) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'an event payload must be a JSON object');
  end if;
  if pg_catalog.octet_length(p_payload::text) > jobs.max_payload_bytes() then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('event payload is larger than %s bytes', jobs.max_payload_bytes()));
  end if;
  -- LOCK (share: emits of one name run side by side; waits on it wait for us)
  perform pg_catalog.pg_advisory_xact_lock_shared(jobs.event_lock_key(p_name));
  -- WRITE
  insert into jobs.event as e (name, payload, created_at)
  values (p_name, p_payload, jobs.now())
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
    returning j.queue
  )
  select array(select distinct woken.queue from woken) into v_queues;
  perform jobs.wake(v_queues);
  return v_id;
end
$$;

comment on function jobs.emit_event(text, jsonb) is
  'Record an event; wake every parked job waiting for a matching one. Answers the event id.';

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
  v_name     text;
  v_cursor   timestamptz;
  v_deadline timestamptz;
  v_event    record;
begin
  -- GUARD
  perform jobs.check_step_name(p_name);
  if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array'
     or pg_catalog.jsonb_array_length(p_specs) = 0
     or exists (select 1 from pg_catalog.jsonb_array_elements(p_specs) x
                 where pg_catalog.jsonb_typeof(x) <> 'object'
                    or pg_catalog.jsonb_typeof(x->'event') is distinct from 'string'
                    or x->>'event' = ''
                    or (x ? 'match' and pg_catalog.jsonb_typeof(x->'match') <> 'object')) then
    perform jobs.raise_error('invalid_argument',
      'specs must be a non-empty array of {"event": name, "match": object}');
  end if;
  if p_timeout_s < 0 or p_timeout_s >= 'Infinity' then
    perform jobs.raise_error('invalid_argument', 'timeout_s must be finite and not negative');
  end if;
  -- FENCE (locks the job row)
  v_seq := jobs.hold_step(p_id, p_claim, p_lease_s);
  select s.value into v_value from jobs.step s where s.job_id = p_id and s.name = p_name;
  if found then
    return query select v_value, false;
    return;
  end if;
  -- LOCK every name, exclusive, in name order.
  v_names := array(select distinct x->>'event' from pg_catalog.jsonb_array_elements(p_specs) x
                    order by 1);
  foreach v_name in array v_names loop
    perform pg_catalog.pg_advisory_xact_lock(jobs.event_lock_key(v_name));
  end loop;
  -- REGISTER once (a later call keeps the first deadline).
  insert into jobs.event_wait as w (job_id, step, specs, names, deadline, created_at)
  values (p_id, p_name, p_specs, v_names,
          case when p_timeout_s is null then 'infinity'
               else v_now + pg_catalog.make_interval(secs => p_timeout_s) end,
          v_now)
  on conflict (job_id, step) do nothing;
  select w.deadline, w.specs into v_deadline, p_specs
    from jobs.event_wait w where w.job_id = p_id and w.step = p_name;
  select coalesce(j.first_started_at, j.created_at) into v_cursor from jobs.job j where j.id = p_id;
  -- LOOK BACK
  select e.id, e.name, e.payload into v_event
    from jobs.event e
   where e.name = any (v_names)
     and e.created_at >= v_cursor
     and e.created_at <= v_deadline
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

comment on function jobs.step_wait(bigint, bigint, text, jsonb, double precision, double precision) is
  'Durable event wait: the first matching event since the job started, or a timeout, stored as a step; parks until then.';

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

comment on function jobs.purge_events(timestamptz, integer) is
  'Delete at most p_max events created before p_before; answers how many.';

-- sqljobs: the transactional outbox (docs/howto-outbox.md, docs/design/outbox-and-scheduler.md).
--
-- A service that must not talk to the worker fleet stages jobs in its OWN transaction
-- (jobs.stage / jobs.stage_many); a relay publishes them as jobs later (jobs.relay).
-- A staged row exists only if the stager's transaction commits, so a rollback stages
-- nothing and nothing is relayed.
--
-- Identity: a staged row's id comes from jobs.job_id_seq and IS the id of the job it
-- becomes, so the stager can store it at once. Staging shares the job's idempotency
-- namespace (name, coalesce(tenant, ''), key): staging a key that already has a job, or
-- an unpublished staged row, answers that id with outcome 'deduped' and writes nothing.
-- (One race is left to the relay: a job enqueued directly for a key whose staged row
-- is not yet published; that row publishes as 'deduped' and records the job's id.)
--
-- Ordering: a spec may carry `ordering_key` (text). Rows of one ordering key are staged
-- under a transaction-scoped advisory lock on that key, so their ids follow commit
-- order; the relay publishes them in id order and never has two of them in flight in
-- two relays at once. Rows without an ordering key are unordered.
--
-- Relay (jobs.relay(batch, relay_id, lease_s)): each call is one transaction that
--   1. PUBLISHES the rows this relay claimed on its previous call: enqueues them as one
--      batch under their own ids (a key that already has a job answers 'deduped', so a
--      repeated publish never makes a second job) and marks them published; fenced on
--      claimed_by = relay_id, so rows another relay has since taken over are left alone;
--   2. CLAIMS the next batch under a lease (claimed_by, claim token + 1, lease expiry).
-- The claim commits, so a relay that dies holding a batch leaves it leased; once the
-- lease lapses another relay claims it (a new token) and publishes it. A relay loop
-- calls jobs.relay again at once while it holds rows; jobs.relay(0, ...) only publishes
-- (the drain's first phase).
--
-- Wake-ups: jobs.stage notifies channel 'jobs_outbox' (PostgreSQL folds repeats within
-- a transaction); the relay publishes through jobs.wake (channel jobs_wake) per queue.
-- `set jobs.notify = off` silences both.
--
-- Retention: published rows stay until jobs.purge_outbox deletes them (bounded batches).

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
-- Locks: a transaction advisory lock per distinct ordering key (in key order), held to
--   commit, so one key's rows are staged one transaction at a time; then the insert,
--   in (name, tenant, key) order.
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
           else 'ordering_key must be a non-empty string' end)
    into v_problem
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
   where pg_catalog.jsonb_typeof(e.spec) = 'object'
     and (e.spec ? 'on_conflict'
          or (e.spec ? 'ordering_key' and pg_catalog.jsonb_typeof(e.spec->'ordering_key') <> 'null'
              and (pg_catalog.jsonb_typeof(e.spec->'ordering_key') <> 'string'
                   or e.spec->>'ordering_key' = '')))
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

  -- LOCK ACQUISITION: one advisory lock per ordering key, in a fixed order.
  perform pg_catalog.pg_advisory_xact_lock(
            pg_catalog.hashtextextended('sqljobs.outbox:' || k.ordering_key, 0))
     from (select distinct e.spec->>'ordering_key' as ordering_key
             from pg_catalog.jsonb_array_elements(p_specs) as e(spec)
            where e.spec->>'ordering_key' is not null
            order by 1) k;

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

comment on function jobs.stage_many(jsonb) is
  'Stage jobs in the caller''s transaction; one (ord, id, staged | deduped) per spec.';

-- ---------------------------------------------------------------------------
-- jobs.stage(name, key, payload, options) -> (id, outcome): one staged job.
-- A thin wrapper over stage_many; options takes every spec field but name, key and
-- payload (ordering_key included). Same refusals, same locks.
-- ---------------------------------------------------------------------------
create or replace function jobs.stage(
  p_name    text,
  p_key     text,
  p_payload jsonb default '{}',
  p_options jsonb default '{}'
)
returns table (id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query
    select m.id, m.outcome
      from jobs.stage_many(jobs.one_spec(p_name, p_key, p_payload, p_options)) m;
end
$$;

comment on function jobs.stage(text, text, jsonb, jsonb) is
  'Stage one job in the caller''s transaction; answers its (future job) id and staged | deduped.';

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
--            is claimed with it, so one key is never in flight in two relays.
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
  -- GUARD
  if p_batch is null or p_batch < 0 or p_batch > 10000 then
    perform jobs.raise_error('invalid_argument', 'batch must be between 0 and 10000');
  end if;
  if p_relay_id is null or p_relay_id = '' then
    perform jobs.raise_error('invalid_argument', 'relay_id is required');
  end if;
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s < 'Infinity'::double precision) then
    perform jobs.raise_error('invalid_argument', 'lease_s must be positive and finite');
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
      select o.id, o.ordering_key
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
      select c.ordering_key, pg_catalog.array_agg(c.id) as ids
        from cand c
       where c.ordering_key is not null
       group by c.ordering_key
    ),
    blocked as (
      select k.ordering_key,
             (select p.id from jobs.outbox p
               where p.ordering_key = k.ordering_key and p.published_at is null
                 and p.id <> all (k.ids)
               order by p.id
               limit 1) as first_out
        from keyed k
    ),
    ok as (
      select c.id
        from cand c
        left join blocked b on b.ordering_key = c.ordering_key
       where c.ordering_key is null or b.first_out is null or c.id < b.first_out
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

comment on function jobs.relay(integer, text, double precision) is
  'Publish the rows this relay holds as jobs, then claim the next batch under a lease.';

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
  if p_retention_s is null or not (p_retention_s >= 0
                                   and p_retention_s < 'Infinity'::double precision) then
    perform jobs.raise_error('invalid_argument', 'retention_s must be zero or more, and finite');
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

comment on function jobs.purge_outbox(double precision, integer) is
  'Delete at most p_max outbox rows published more than p_retention_s seconds ago.';

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

comment on function jobs.outbox_stats() is 'Outbox counts: pending, held, lapsed, published.';

-- sqljobs: schedules (cron tasks) and the scheduler's leader lease (docs/howto-scheduler.md).
--
-- A schedule names a job type, a cron expression in a time zone, a catch-up policy and
-- the enqueue options and payload of each occurrence. The database stores schedules
-- and what has been fired; the scheduler role (sqljobs/scheduler.py) evaluates cron
-- (PostgreSQL has no cron arithmetic) and calls jobs.schedule_fire.
--
-- Exactly once: an occurrence is enqueued with the key '<schedule>@<occurrence in UTC,
-- ISO 8601>' through jobs.enqueue_many, so a second scheduler, a restart or a skewed
-- clock that fires it again gets the same job back (deduped), never a second one. The
-- watermark ("every occurrence at or before this instant is done: fired or skipped")
-- moves in the same transaction as the fire and never moves back.
--
-- One leader at a time: jobs.leader is a lease table (one row per role) with a fencing
-- token that moves on every change of holder. jobs.schedule_fire is fenced on that
-- token and on the lease being live, and holds the leader row FOR SHARE while it fires,
-- so a takeover waits for a fire in flight and a deposed leader's fire changes nothing.
--
-- Lock order everywhere: jobs.leader row, then the jobs.schedule row, then job rows.

-- ---------------------------------------------------------------------------
-- jobs.leader_acquire(role, holder, lease_s) -> the fencing token, or null.
--
-- Contract: the holder of a live lease renews it (same token) and gets its token; a
-- free, released or lapsed lease is taken (token + 1, acquired_at = now); a live lease
-- of another holder answers null and changes nothing. A holder whose lease lapsed and
-- was not taken renews with its old token (nobody held it meanwhile).
-- Locks: the role's leader row (insert or update); waits for a fire in flight.
-- Refuses (invalid_argument): empty role or holder, non-positive or infinite lease.
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
declare
  v_now   timestamptz := jobs.now();
  v_token bigint;
begin
  if p_role is null or p_role = '' or p_holder is null or p_holder = '' then
    perform jobs.raise_error('invalid_argument', 'role and holder are required');
  end if;
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s < 'Infinity'::double precision) then
    perform jobs.raise_error('invalid_argument', 'lease_s must be positive and finite');
  end if;
  insert into jobs.leader as l (role, holder, token, lease_expires_at, acquired_at)
  values (p_role, p_holder, 1, v_now + pg_catalog.make_interval(secs => p_lease_s), v_now)
  on conflict (role) do update
     set holder = excluded.holder,
         token = case when l.holder = excluded.holder then l.token else l.token + 1 end,
         acquired_at = case when l.holder = excluded.holder then l.acquired_at
                            else excluded.acquired_at end,
         lease_expires_at = excluded.lease_expires_at
   where l.holder = excluded.holder or l.holder is null or l.lease_expires_at <= v_now
  returning l.token into v_token;
  return v_token;
end
$$;

comment on function jobs.leader_acquire(text, text, double precision) is
  'Take or renew the role''s leader lease; answers the fencing token, or null when another holds it.';

-- ---------------------------------------------------------------------------
-- jobs.leader_release(role, holder, token) -> true when the lease was released.
-- Fenced on holder and token: a deposed holder releases nothing. The token is kept, so
-- the next holder's token is higher.
-- ---------------------------------------------------------------------------
create or replace function jobs.leader_release(p_role text, p_holder text, p_token bigint)
returns boolean
language sql
volatile
set search_path = ''
as $$
  with released as (
    update jobs.leader l
       set holder = null, lease_expires_at = null
     where l.role = p_role and l.holder = p_holder and l.token = p_token
    returning l.role
  )
  select exists (select 1 from released)
$$;

comment on function jobs.leader_release(text, text, bigint) is
  'Give up a leader lease (fenced on holder and token).';

-- ---------------------------------------------------------------------------
-- jobs.leaders() -> the leases: role, holder, token, lease_expires_at, acquired_at, live.
-- ---------------------------------------------------------------------------
create or replace function jobs.leaders()
returns table (role text, holder text, token bigint, lease_expires_at timestamptz,
               acquired_at timestamptz, live boolean)
language sql
stable
set search_path = ''
as $$
  select l.role, l.holder, l.token, l.lease_expires_at, l.acquired_at,
         l.holder is not null and l.lease_expires_at > jobs.now()
    from jobs.leader l
   order by l.role
$$;

comment on function jobs.leaders() is 'Leader leases and whether each is live.';

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

comment on function jobs.schedule_definition_problem(jsonb) is
  'The first problem in a schedule definition, or null. Cron syntax is the client''s to check.';

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
  if p_name is null or p_name = '' then
    perform jobs.raise_error('invalid_argument', 'a schedule needs a name');
  end if;
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

comment on function jobs.schedule_put(text, jsonb) is
  'Add a schedule (watermark now) or update its definition (keeps paused and watermark).';

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
  update jobs.schedule s set paused = true, updated_at = jobs.now()
   where s.name = p_name and not s.paused;
  if not found and not exists (select 1 from jobs.schedule s where s.name = p_name) then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

comment on function jobs.schedule_pause(text) is 'Stop firing a schedule until it is resumed.';

create or replace function jobs.schedule_resume(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  update jobs.schedule s
     set paused = false, updated_at = jobs.now(), watermark = greatest(s.watermark, jobs.now())
   where s.name = p_name and s.paused;
  if not found and not exists (select 1 from jobs.schedule s where s.name = p_name) then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

comment on function jobs.schedule_resume(text) is
  'Fire a paused schedule again, from now (what it missed while paused is skipped).';

create or replace function jobs.schedule_remove(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  delete from jobs.schedule s where s.name = p_name;
  if not found then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

comment on function jobs.schedule_remove(text) is
  'Delete a schedule (jobs it already enqueued stay).';

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
  select s.name, s.job_name, s.cron, s.timezone, s.catch_up, s.options, s.payload, s.paused,
         s.origin, s.watermark, s.last_fired_at, s.created_at, s.updated_at
    from jobs.schedule s
   order by s.name
$$;

comment on function jobs.schedules() is 'Every schedule with its watermark.';

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

comment on function jobs.occurrence_key(text, timestamptz) is
  'The idempotency key of one occurrence of a schedule.';

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
  -- GUARD: the leader lease, held for share until commit.
  select l.holder is not null and l.lease_expires_at > v_now and l.token = p_token
    into v_live
    from jobs.leader l
   where l.role = 'scheduler'
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

comment on function jobs.schedule_fire(text, timestamptz[], timestamptz, bigint) is
  'Fire occurrences of a schedule (exactly once per occurrence key) and move its watermark, fenced on the leader token.';

-- sqljobs: operator verbs and the read side.
--
-- One-job verbs refuse with a distinct code and change nothing; the bulk `*_where`
-- forms move at most p_max matching rows (skip locked), and answer `remaining`: how
-- many rows a second call would still move.
--
--   verb      from states                          to
--   cancel    ready, running, parked, interrupted  cancelled (a running worker's next
--                                                  heartbeat answers false)
--   requeue   failed, dead, cancelled              ready, attempt 0, run now
--   promote   ready, interrupted, parked           ready (interrupted stays interrupted),
--                                                  runnable now: run_at = least(run_at, now)
--   remove    every state but running              deleted
--
-- Filters (jsonb): {"queue", "name", "state", "tenant"}, each a string or an array of
-- strings; an absent field matches everything. Unknown fields are refused.

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
    from jobs.job j
   where j.state = any (p_states)
     and (p_filter->'state' is null or j.state = any (jobs.filter_values(p_filter, 'state')::jobs.job_state[]))
     and (p_filter->'queue' is null or j.queue = any (jobs.filter_values(p_filter, 'queue')))
     and (p_filter->'name' is null or j.name = any (jobs.filter_values(p_filter, 'name')))
     and (p_filter->'tenant' is null or j.tenant = any (jobs.filter_values(p_filter, 'tenant')))
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
       set state = 'cancelled', finished_at = jobs.now(), lease_expires_at = null
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
           lease_expires_at = null, result = null
     where j.id = any (p_ids) and j.state in ('failed', 'dead', 'cancelled')
    returning j.queue
  )
  select jobs.wake(array(select distinct moved.queue from moved))
$$;

create or replace function jobs.apply_promote(p_ids bigint[])
returns void
language sql
volatile
set search_path = ''
as $$
  with moved as (
    update jobs.job as j
       set state = case when j.state = 'parked' then 'ready' else j.state end,
           -- a job already due keeps its run_at: promoting never sends it behind
           -- older jobs of its priority
           run_at = least(j.run_at, jobs.now())
     where j.id = any (p_ids) and j.state in ('ready', 'interrupted', 'parked')
    returning j.queue
  )
  select jobs.wake(array(select distinct moved.queue from moved))
$$;

create or replace function jobs.apply_remove(p_ids bigint[])
returns void
language sql
volatile
set search_path = ''
as $$
  delete from jobs.job as j where j.id = any (p_ids) and j.state <> 'running'
$$;

-- ---------------------------------------------------------------------------
-- One-job verbs.
-- ---------------------------------------------------------------------------

-- jobs.cancel(id): a live job -> cancelled. Errors: job_not_found, job_finished.
create or replace function jobs.cancel(p_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.lock_for_verb(p_id, 'cancel', '{ready,running,parked,interrupted}');
  perform jobs.apply_cancel(array[p_id]);
end
$$;

comment on function jobs.cancel(bigint) is
  'Cancel a live job (ready, running, parked, interrupted); SJ006 missing, SJ010 finished.';

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
  -- LOCK in id order, then GUARD.
  perform 1 from jobs.job j where j.id = any (p_ids) order by j.id for update;
  select i.id into v_id from pg_catalog.unnest(p_ids) i(id)
   where not exists (select 1 from jobs.job j where j.id = i.id) limit 1;
  if v_id is not null then
    perform jobs.raise_error('job_not_found', pg_catalog.format('no job has id %s', v_id));
  end if;
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

comment on function jobs.requeue(bigint[]) is
  'Run failed, dead or cancelled jobs again (attempt 0, now); SJ006, SJ007, SJ008 refuse the whole call.';

-- jobs.promote(id): run a waiting job now. Errors: job_not_found, job_running, job_finished.
create or replace function jobs.promote(p_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.lock_for_verb(p_id, 'promote', '{ready,interrupted,parked}');
  perform jobs.apply_promote(array[p_id]);
end
$$;

comment on function jobs.promote(bigint) is 'Make a waiting job runnable now.';

-- jobs.remove(id): delete a job that is not running. Errors: job_not_found, job_running.
create or replace function jobs.remove(p_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.lock_for_verb(p_id, 'remove',
    '{ready,parked,succeeded,failed,dead,cancelled,interrupted}');
  perform jobs.apply_remove(array[p_id]);
end
$$;

comment on function jobs.remove(bigint) is 'Delete a job that no worker is running.';

-- ---------------------------------------------------------------------------
-- Bulk verbs: at most p_max rows per call; `remaining` = what a second call would move.
-- ---------------------------------------------------------------------------
create or replace function jobs.cancel_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_live jobs.job_state[] := '{ready,running,parked,interrupted}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_live, p_max);
begin
  perform jobs.apply_cancel(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_live);
end
$$;

create or replace function jobs.requeue_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_from jobs.job_state[] := '{failed,dead,cancelled}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_from, p_max);
begin
  perform jobs.apply_requeue(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_from);
end
$$;

-- A promoted row stays claimable, so promote moves (and counts) only rows still
-- waiting: parked, or with run_at in the future.
create or replace function jobs.promote_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_from jobs.job_state[] := '{ready,interrupted,parked}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_from, p_max, true);
begin
  perform jobs.apply_promote(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_from, true);
end
$$;

create or replace function jobs.remove_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_from jobs.job_state[] := '{ready,parked,succeeded,failed,dead,cancelled,interrupted}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_from, p_max);
begin
  perform jobs.apply_remove(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_from);
end
$$;

comment on function jobs.cancel_where(jsonb, integer) is 'Cancel at most p_max live jobs matching a filter.';
comment on function jobs.requeue_where(jsonb, integer) is 'Requeue at most p_max failed/dead/cancelled jobs matching a filter.';
comment on function jobs.promote_where(jsonb, integer) is 'Run now at most p_max waiting jobs matching a filter.';
comment on function jobs.remove_where(jsonb, integer) is 'Delete at most p_max non-running jobs matching a filter.';

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
  if p_queue is null or p_queue = '' then
    perform jobs.raise_error('invalid_argument', 'queue is required');
  end if;
  update jobs.queue as q set paused = false, updated_at = jobs.now() where q.name = p_queue;
  perform jobs.wake(array[p_queue]);
end
$$;

comment on function jobs.pause_queue(text) is 'Stop claims from a queue (enqueue still works).';
comment on function jobs.resume_queue(text) is 'Let claims take from a paused queue again.';

-- ---------------------------------------------------------------------------
-- Read side.
-- ---------------------------------------------------------------------------
create or replace view jobs.job_view as
  select j.id, j.name, j.queue, j.tenant, j.key, j.state, j.priority, j.run_at, j.attempt,
         j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.dead_letter,
         j.timeout_s, j.claim, j.lease_expires_at, j.worker, j.progress, j.last_error,
         j.result, j.traceparent, j.created_at, j.started_at, j.finished_at
    from jobs.job j;

comment on view jobs.job_view is
  'Every job without its payload (read it with jobs.job_payload(id)).';

create or replace function jobs.job_payload(p_id bigint)
returns jsonb
language sql
stable
set search_path = ''
as $$ select j.payload from jobs.job j where j.id = p_id $$;

comment on function jobs.job_payload(bigint) is 'The payload of one job (null when it does not exist).';

-- jobs.queue_stats(): one row per queue that has jobs or a pause switch.
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
  with unserved as (
    select u.queue, pg_catalog.sum(u.waiting)::bigint as waiting
      from jobs.unserved_jobs() u
     group by u.queue
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
                                              and j.run_at <= jobs.now()) as oldest_ready_at
      from jobs.job j
     group by j.queue
  ),
  names as (
    select c.queue from counts c union select q.name from jobs.queue q
  )
  select n.queue, coalesce(q.paused, false),
         coalesce(c.ready, 0), coalesce(c.running, 0), coalesce(c.parked, 0),
         coalesce(c.interrupted, 0), coalesce(c.succeeded, 0), coalesce(c.failed, 0),
         coalesce(c.dead, 0), coalesce(c.cancelled, 0),
         coalesce(extract(epoch from jobs.now() - c.oldest_ready_at)::double precision, 0),
         coalesce(u.waiting, 0)
    from names n
    left join counts c on c.queue = n.queue
    left join jobs.queue q on q.name = n.queue
    left join unserved u on u.queue = n.queue
   order by n.queue
$$;

comment on function jobs.queue_stats() is
  'Per queue: paused, counts by state, age in seconds of the oldest runnable job, and how many waiting jobs no live worker declares (unserved).';
