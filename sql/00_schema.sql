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
-- is the id of the job it becomes. Its values are shifted 8 bits into an id (below):
-- 2^55 - 1 at most, so it stops with an error rather than wrap to negative ids.
create sequence if not exists jobs.job_id_seq as bigint maxvalue 36028797018963967;

-- ---------------------------------------------------------------------------
-- Job ids carry their bucket (docs/design/citus.md): id = seq << 8 | bucket, the bucket
-- a hash of the tenant, or of (name, key) for a job without one. A job's dedupe
-- namespace (name, tenant or '', key) thus always has one bucket, and so does a
-- tenant's work: distributed by bucket, every call by id finds its shard in the id and
-- every unique key holds within a shard, with no job moved. On one PostgreSQL the
-- bucket is only the id's low bits; ids still grow with the sequence (claim order's
-- tie-break is unchanged). Ids made before revision 3 are the bare sequence value.
--
-- jobs.job_id_sql(name, tenant, key) -> the SQL of a new id for a job of those three
-- expressions: jobs.define_spec() (sql/20_enqueue.sql) writes the inserts into jobs.job
-- and jobs.new_job_id (the outbox's) with it, so the rule lives here once (inlined: a
-- function call per row cost the bulk enqueue more).
-- ---------------------------------------------------------------------------
create or replace function jobs.job_id_sql(p_name text, p_tenant text, p_key text)
returns text
language sql
immutable
set search_path = ''
as $$
select pg_catalog.format(
  -- (parenthesised: <<, | and & are of one precedence, left to right)
  '((pg_catalog.nextval(''jobs.job_id_seq'') << 8) | (pg_catalog.hashtext(coalesce('
  'nullif(%2$s, ''''), %1$s || ''|'' || %3$s)) & 255))', p_name, p_tenant, p_key)
$$;

comment on function jobs.job_id_sql(text, text, text) is
  'Private: the SQL expression of a new job id (the sequence << 8 | the bucket) for the name, tenant and key expressions given.';

-- jobs.distributed() -> whether jobs.job, step, event_wait and slot are distributed by
-- bucket on Citus (docs/design/citus.md). False here; the distributing step replaces it
-- with one that answers true. The few statements that lock rows of any bucket (lease
-- recovery's, the wake of parked jobs) run once per bucket when it is true (Citus locks
-- rows only in a statement it routes to one shard), and once for all when false, where
-- one statement is faster. A function, not a setting: no caller can change its answer.
create or replace function jobs.distributed()
returns boolean
language sql
immutable
set search_path = ''
as $$
select false
$$;

comment on function jobs.distributed() is
  'Private: whether the hot tables are distributed by bucket on Citus (false unless the distributing step replaced this function).';

-- jobs.shard_buckets(bucket) -> the buckets whose rows share this bucket's shard: what a
-- distributed statement names to be routed to one shard and reach all of it (a claim
-- fills up from a whole shard, a batch settles a shard's jobs at once). Here each
-- bucket alone; the distributing step replaces it with the map of the install's shards
-- (sqljobs/_schema/distributed.py), which only a shard split changes.
create or replace function jobs.shard_buckets(p_bucket smallint)
returns smallint[]
language sql
immutable
set search_path = ''
as $$
select array[p_bucket]
$$;

comment on function jobs.shard_buckets(smallint) is
  'Private: the buckets on the shard of this bucket (each bucket alone unless the distributing step replaced this function).';

-- jobs.ids_by_shard(ids) -> (buckets, ids) per shard of these jobs: the rounds of a
-- distributed install's statements over jobs named by id (a job's bucket is its id &
-- 255, so no read is needed), in the order of their least bucket.
create or replace function jobs.ids_by_shard(p_ids bigint[])
returns table (buckets smallint[], ids bigint[])
language sql
immutable
set search_path = ''
as $$
select jobs.shard_buckets((i & 255)::smallint), pg_catalog.array_agg(i)
  from pg_catalog.unnest(p_ids) i
 group by 1
 order by 1
$$;

comment on function jobs.ids_by_shard(bigint[]) is
  'Private: the ids given, grouped by the shard of their bucket (jobs.shard_buckets).';

-- ---------------------------------------------------------------------------
-- jobs.job: every job, live and finished (docs/design/finished-jobs.md says why one
-- table). The claim only ever reads `job_claimable_idx`, a partial index holding
-- nothing but claimable rows, so finished rows never slow it down.
--
-- The job spec (docs/reference/sql.md, "Job specs") is read off this table: every
-- column but the engine's own (jobs.define_spec in sql/20_enqueue.sql names those) is
-- a spec field a caller may set, and its DEFAULT here is the field's default. Adding a
-- spec field is adding a column at the end of this table (and its field to sqljobs.JobSpec).
-- ---------------------------------------------------------------------------
create table if not exists jobs.job (
  id               bigint primary key,                -- jobs.job_id_sql: seq << 8 | bucket
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
  settle_watched   boolean not null default false, -- someone awaits its result (40_settle)
  -- Version 2, flow control (sql/35_limits.sql). A column added later goes last, as
  -- the revision adding it puts it (docs/design/schema-upgrades.md). A spec's fields:
  group_key        text,                           -- the group debounce, singleton and
                                                   --   throttle act on (null: the job name)
  singleton        boolean not null default false, -- at most one live job per group
  debounce_s       double precision,               -- collapse enqueues of a group this close
  throttle_n       integer,                        -- at most throttle_n starts of the group
  throttle_per_s   double precision,               --   per throttle_per_s seconds
  -- and the engine's own:
  slots            text[],                         -- running: the limit groups it holds
  blocked_on       text,                           -- ready, waiting for this limit group
  deferred_by      text,                           -- ready, deferred by this group's rate
  -- The engine's own again: the attempt history. The last 20 attempts that ended
  -- without success, oldest first, each {attempt, claim, worker, started_at, ended_at,
  -- outcome: retry|failed|dead|interrupted|lease_expired, error}. Written only where an
  -- attempt fails (jobs.nack_many, lease recovery in jobs.claim), never by a claim or
  -- an ack; null until the first such attempt. jobs.job_detail shows it, redacted.
  attempts         jsonb,
  -- Version 3: the code version of the worker that first claimed the job (a claim's
  -- option "version"); a claim with that option takes only jobs of its version or
  -- never claimed, so a rolling deploy replays each job on the code that began it.
  code_version     text,
  -- Version 3, a spec field: the settlement hooks (sql/42_hooks.sql), {"settled":
  -- {"name": ..., "queue": ...}, "exhausted": {...}}: jobs staged when this one settles.
  hooks            jsonb,
  -- Version 3, a spec field: the actor, who asked for this job (a user or service id;
  -- a non-empty JSON string or object of at most 512 bytes, jobs.check_actors). The
  -- caller's word, like a label: not authentication. A child made by jobs.step_invoke
  -- takes its parent's unless its spec names one (docs/howto-hooks.md).
  actor            jsonb,
  -- Version 3, the engine's own: the bucket, id & 255 (jobs.job_id_sql), written by
  -- every insert. A distributed install (docs/design/citus.md) is distributed by it:
  -- Citus refuses a generated distribution column, so it is a plain one. Null for jobs
  -- made before version 3 (adding it rewrote no row), which a distributing step fills.
  bucket           smallint
) with (fillfactor = 70);  -- room for HOT updates of progress and heartbeats
-- No CHECK constraints: every value a caller gives is checked once, by
-- jobs.spec_problem, before any write (a CHECK would repeat those rules, and cost a
-- parse of its expression on every insert).

comment on table jobs.job is 'Private storage of every job; use the jobs.* functions.';

-- Idempotency namespace: (name, tenant or '', key). Covers finished rows too, so a
-- key is answered (deduped) for as long as its job is retained. The key comes first:
-- it is what tells two entries apart, so each comparison of an insert's descent (every
-- enqueue, and every claim and settle, which are not HOT) is decided by one column,
-- where name first compared three (the name and tenant almost always equal): a batch
-- insert of 1,000 jobs 11% faster (docs/design/engine-hot-path.md). Every reader
-- names all three.
create unique index if not exists job_key_idx
  on jobs.job (key, name, (coalesce(tenant, '')));

-- The claim seeks this, per queue, in (priority, run_at, id) order. A job waiting for a
-- concurrency limit's slot (blocked_on) is not claimable until a slot frees.
create index if not exists job_claimable_idx
  on jobs.job (queue, priority, run_at, id)
  where state in ('ready', 'interrupted') and blocked_on is null;

-- Jobs waiting for a limit's slot, per limit group, in claim order (sql/35_limits.sql).
create index if not exists job_blocked_idx
  on jobs.job (blocked_on, priority, run_at, id)
  where blocked_on is not null and state in ('ready', 'interrupted');

-- Jobs a rate limit deferred, per group (jobs.limit_stats).
create index if not exists job_deferred_idx
  on jobs.job (deferred_by)
  where deferred_by is not null and state in ('ready', 'interrupted');

-- At most one live singleton job per (name, tenant, group); at most one debounced job
-- waiting to start per group (sql/20_enqueue.sql).
create unique index if not exists job_singleton_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where singleton and state in ('ready', 'running', 'parked', 'interrupted');
-- (version 3: never started, attempt 0: a started job awaiting its retry is ready too,
-- and the next enqueue of its group makes a new job instead of changing that retry)
create unique index if not exists job_debounce_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where debounce_s is not null and state = 'ready' and attempt = 0;

-- Lapsed-lease recovery seeks this: running rows by lease expiry. Its predicate names
-- the lease too (every running row has one: only the claim makes a row running, and it
-- sets the lease), so that a statement that finds jobs by id and checks state =
-- 'running' (the fence of ack, nack, heartbeat, step_put) cannot take it: the planner
-- priced a scan of every running row, which it believes few, below one primary-key
-- probe per job, and under a snapshot held open that scan also walks every lease entry
-- since (version 3; measured in docs/design/engine-hot-path.md). A statement that reads
-- running rows through it names `lease_expires_at is not null` too.
create index if not exists job_lease_idx
  on jobs.job (lease_expires_at)
  where state = 'running' and lease_expires_at is not null;

-- Parked rows with a wake-up time, by that time.
create index if not exists job_parked_idx
  on jobs.job (run_at)
  where state = 'parked';

-- A child's settlement finds its parent's other children (sql/50_steps.sql).
create index if not exists job_parent_idx on jobs.job (parent_id) where parent_id is not null;

-- Finished rows by state and age. jobs.purge (sql/95_retention.sql) sweeps one final
-- state at a time, oldest first: by state, so a day-old succeeded row is found without
-- stepping over a month of kept dead ones. The window reads (jobs.stats, the queue and
-- dashboard counts) name the states they count, and read it one state at a time too.
-- The only index a settle adds an entry to besides the job's keys: a second one on
-- finished_at alone (version 1's job_finished_idx) cost every settle an entry, 9% of
-- the drain, for reads this one serves.
create index if not exists job_retention_idx
  on jobs.job (state, finished_at)
  where finished_at is not null;

-- Dead jobs per queue: jobs.queue_gauges counts them without reading the finished rows.
create index if not exists job_dead_idx
  on jobs.job (queue)
  where state = 'dead';

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
  constraint worker_concurrency_positive check (concurrency >= 1),
  -- Version 2: who registered the row, the only login (with an operator) that may renew
  -- or remove it while it is live, and the tenant that login is bound to
  login        text,
  tenant       text
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
-- Its inserts (and event_wait's) name no conflict target: the primary key is the one
-- unique key, which a distributed install extends with the bucket.
-- ---------------------------------------------------------------------------
create table if not exists jobs.step (
  job_id     bigint not null references jobs.job (id) on delete cascade,
  name       text not null,
  ordinal    integer not null,          -- order of first writing within the job
  kind       text not null,
  value      jsonb,
  event_id   bigint,                    -- kind = event: the event it consumed
  created_at timestamptz not null,
  bucket     smallint,                  -- version 3: its job's bucket (job_id & 255)
  primary key (job_id, name),
  constraint step_kind check (kind in ('run', 'sleep', 'event', 'timeout', 'child', 'undo',
                                       'unwind'))
);

comment on table jobs.step is 'Private: stored durable steps of jobs; written by jobs.step_* functions.';

-- jobs.job_fork: a job made by jobs.fork (sql/55_fork.sql) points back to its original
-- and the step it was forked from (the original may be purged before it: no reference).
create table if not exists jobs.job_fork (
  job_id      bigint primary key references jobs.job (id) on delete cascade,
  forked_from bigint not null,
  from_step   text not null,
  forked_at   timestamptz not null,
  forked_by   text not null
);

comment on table jobs.job_fork is 'Private: which job and step a forked job was made from.';

-- ---------------------------------------------------------------------------
-- jobs.event: emitted events.
-- ---------------------------------------------------------------------------
create table if not exists jobs.event (
  id         bigint generated always as identity primary key,
  name       text not null,
  payload    jsonb not null default '{}',
  created_at timestamptz not null,
  -- the emitter's tenant (sql/15_tenancy.sql): it wakes only that tenant's waiters;
  -- null (an unbound emitter) wakes every waiter
  tenant     text,
  -- Version 3: who emitted it (jobs.emit_event_v2's option "actor"; the emitting run's
  -- actor when a handler emits it): the caller's word, not authentication
  actor      jsonb
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
  bucket     smallint,                 -- version 3: its job's bucket (job_id & 255)
  primary key (job_id, step)
);

comment on table jobs.event_wait is 'Private: open event waits of parked jobs; written by jobs.step_wait.';

create index if not exists event_wait_names_idx on jobs.event_wait using gin (names);

-- ---------------------------------------------------------------------------
-- jobs.outbox: staged jobs waiting for a relay (sql/70_outbox.sql).
-- ---------------------------------------------------------------------------
create table if not exists jobs.outbox (
  id               bigint primary key,    -- the job's id to be (jobs.new_job_id)
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
-- jobs.schedule: cron schedules (sql/80_schedule.sql).
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

-- ---------------------------------------------------------------------------
-- jobs.lease: named leases (sql/35_limits.sql): fenced locks for applications, and the
-- scheduler's leadership (the lease named 'scheduler').
-- ---------------------------------------------------------------------------
create table if not exists jobs.lease (
  name             text primary key,
  holder           text,                      -- who holds the lease (null: released)
  token            bigint not null default 0, -- fencing token: moved by every new holder
  lease_expires_at timestamptz,
  acquired_at      timestamptz
);

comment on table jobs.lease is 'Private: named leases; use jobs.lease_acquire / renew / release.';

-- ---------------------------------------------------------------------------
-- jobs.limit: concurrency and rate limits the claim enforces (sql/35_limits.sql).
--   scope   global | queue (target: the queue) | name (target: the job name) | tenant
--           (target: one tenant, or null: each tenant on its own) | key (target: the
--           job name; key_path: the payload field whose value is the key) | throttle
--           (the engine's own row: jobs enqueued with throttle= carry their rate)
--   A job belongs to one group per limit that applies to it: '<limit>|<key>', the key
--   being the tenant or payload value for tenant and key scopes, '' otherwise.
-- jobs.limit_start: the last starts of each rate-limited group (a sliding window).
-- ---------------------------------------------------------------------------
create table if not exists jobs.limit (
  name         text primary key,
  scope        text not null,
  target       text,
  key_path     text[],
  concurrency  integer,                      -- at most this many running per group
  rate_n       integer,                      -- at most rate_n starts per group
  rate_per_s   double precision,             --   in any rate_per_s seconds
  when_busy    text not null default 'wait', -- wait | fail (key scope, concurrency)
  origin       text not null default 'api',  -- declared (in code) | api (set at run time)
  updated_at   timestamptz not null
);

comment on table jobs.limit is 'Private: concurrency and rate limits; use jobs.limit_put / limit_remove / limits().';

-- jobs.slot: one row per limit group a running job holds (its `slots`): a group's use
-- is a count of its rows (docs/design/limits.md says why rows, not counters or an
-- index over jobs.job). Written by the claim, deleted when the job leaves running.
create table if not exists jobs.slot (
  grp     text not null,
  job_id  bigint not null,
  bucket  smallint,                          -- version 3: its job's bucket (job_id & 255)
  primary key (grp, job_id)
);

comment on table jobs.slot is 'Private: the limit groups running jobs hold (sql/35_limits.sql).';

create table if not exists jobs.limit_start (
  grp     text primary key,
  starts  timestamptz[] not null             -- the most recent rate_n starts, oldest first
);

comment on table jobs.limit_start is 'Private: recent starts of rate-limited groups (sql/35_limits.sql).';

-- ---------------------------------------------------------------------------
-- jobs.job_type: what is known of each job name, so a viewer that never imported the
-- Python model (psql, a Node service) redacts as the worker does (sql/92_introspection.sql).
-- Written by every worker as it starts (origin 'declared'), or by jobs.job_type_put
-- for a job only SQL services enqueue (origin 'api').
--   sensitive_paths  payload paths hidden in every view ('card.number', 'items[].ssn')
--   personal_paths   payload paths holding personal data (listed, not hidden)
-- ---------------------------------------------------------------------------
create table if not exists jobs.job_type (
  name             text primary key,
  queue            text,
  sensitive_paths  text[] not null default '{}',
  personal_paths   text[] not null default '{}',
  payload_schema   jsonb,
  retry            jsonb,                    -- the declared policy's fields (null: default)
  timeout_s        double precision,
  origin           text not null default 'api',  -- declared (a worker) | api (SQL)
  updated_at       timestamptz not null,
  -- version 3: required | forbidden | null (as given): whether an enqueue of this type
  -- must name a tenant (a bound session always does) or must not
  tenant_policy    text,
  -- version 3: the data factory that declared the job ({"kind": "rollup", ...its
  -- settings}; null: an ordinary job), so a viewer without the app's code can tell
  factory          jsonb
);

comment on table jobs.job_type is 'Private: job types and their redaction; use jobs.job_type_put / job_types().';

-- ---------------------------------------------------------------------------
-- jobs.retention: the stored retention policy jobs.purge reads (sql/95_retention.sql).
-- Row '*' is every queue's default; a row per queue overrides it. A null age inherits
-- ('*', then the built-in default); 'Infinity' keeps forever. Ages are seconds after
-- finished_at (events: after created_at).
-- ---------------------------------------------------------------------------
create table if not exists jobs.retention (
  queue        text primary key,             -- a queue's name, or '*': every other queue
  succeeded_s  double precision,
  failed_s     double precision,
  dead_s       double precision,
  cancelled_s  double precision,
  awaited_s    double precision,             -- a job someone awaited: kept at least this
  events_s     double precision,             -- events (read from the '*' row only)
  updated_at   timestamptz not null
);

comment on table jobs.retention is
  'Private: the retention policy of jobs.purge; use jobs.retention_put / retention_remove / retention_policy.';

-- ---------------------------------------------------------------------------
-- jobs.lock_key: one row per key the engine serializes on (a limit group's admission,
-- an event name's waits against its emits, a staging ordering key, a busy job's settle
-- key under its claim; jobs.lock_keys in sql/10_errors.sql). Row locks on a private
-- table: no caller can take or hold one but through the functions, unlike advisory
-- locks, which pg_locks shows to everyone and pg_advisory_lock lets anyone take. Rows
-- are made on first use and swept by jobs.purge (a running job's settle key is kept).
-- ---------------------------------------------------------------------------
create table if not exists jobs.lock_key (
  key         text primary key,
  created_at  timestamptz not null
);

comment on table jobs.lock_key is 'Private: the keys the engine locks rows of (sql/10_errors.sql).';

-- ---------------------------------------------------------------------------
-- jobs.channel_key: the database's secret for notification payloads (sql/20_enqueue.sql,
-- jobs.channel_token). Any session may LISTEN on any channel, so what the engine
-- notifies names no queue and no job: a payload is a token made from this key, which a
-- role learns only for the queues or jobs it asks about (jobs.wake_tokens,
-- jobs.watch_token). One row, made at install.
-- ---------------------------------------------------------------------------
create table if not exists jobs.channel_key (
  key  bytea not null
);

insert into jobs.channel_key (key)
select pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text
                                              || pg_catalog.gen_random_uuid()::text, '-', ''),
                         'hex')
 where not exists (select from jobs.channel_key);

comment on table jobs.channel_key is 'Private: the secret notification payloads are made from.';

-- ---------------------------------------------------------------------------
-- jobs.tenant_binding: login roles bound to one tenant (sql/15_tenancy.sql). A session
-- whose login role is role_name, or a member of it, acts only within the tenant.
-- ---------------------------------------------------------------------------
create table if not exists jobs.tenant_binding (
  role_name   text primary key,
  tenant      text not null check (tenant <> ''),
  updated_at  timestamptz not null
);

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
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and called from
-- PL/pgSQL it is parsed and planned again in every transaction (60 µs of each claim).
create or replace function jobs.random32()
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
begin
  return ('x' || pg_catalog.substr(pg_catalog.gen_random_uuid()::text, 1, 8))::bit(32)::bigint;
end
$$;

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
as $$ select 3 $$;

comment on function jobs.schema_version() is 'The installed sqljobs schema version.';

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
