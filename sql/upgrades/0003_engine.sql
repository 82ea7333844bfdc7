-- sqljobs schema version 3 (engine): upgrades version 2 in place.
-- Revision sqljobs_0003. The source of every function below is sql/.
--
-- What changes, and why:
--   * Batch settles and renewals wait at most 50 ms for a busy row (one another
--     transaction holds locked) and answer ok = null for it, so one locked row no
--     longer stalls a worker's whole batch until its other leases lapse (jobs.ack_many,
--     nack_many, heartbeat_many, heartbeat; private jobs.lock_batch, lock_briefly,
--     unwritten_answer, ack_batch, nack_batch).
--   * jobs.channel_token, ack_many and nack_many are PL/pgSQL: a session keeps their
--     plans (as SQL functions they were planned in every transaction).
--   * jobs.recover(queues, limit): the claim's recovery on its own, so a worker with no
--     free slot recovers a crashed peer's lapsed leases without claiming.
--   * Forks (jobs.fork, jobs.job_forked_from; table jobs.job_fork) and patch markers
--     (jobs.step_put option patch); the claim answers the stored steps' order
--     ('sqljobs.order'), which the 0.3 client checks a replay against.
--   * The backfill ledger (table jobs.backfill, sql/85_factories.sql) and its functions.
--   * Settlement hooks: jobs.job.hooks (a spec field: a new nullable column, no
--     default) and the trigger job_hooks (sql/42_hooks.sql) that stages them.
--   * A debounced job that started and awaits its retry no longer absorbs the next
--     enqueue of its group (job_debounce_idx rebuilt with attempt = 0).
--   * Tenant policy per job type (jobs.job_type.tenant_policy, a new nullable column;
--     a job type's field "tenant": required | forbidden), checked by every enqueue.
--   * Code-version routing: jobs.job.code_version (a new nullable column, no default:
--     a catalog change, no rewrite) set by the first claim that passes the option
--     "version"; such a claim takes only jobs of its version or never claimed.
-- Locks: two new, empty tables, two nullable columns added to jobs.job (an ACCESS
-- EXCLUSIVE lock held for a catalog change only: milliseconds, after waiting for the
-- transactions that hold the table), job_debounce_idx rebuilt (a SHARE lock on jobs.job
-- while it reads the table: enqueues and settles wait, about a second per million
-- rows), and function replacements; no table rewrite. Workers: need not drain. A 0.2 worker reads a busy answer
-- (null) as a lost lease: the job runs again after its lease, as a stalled batch did
-- before; upgrade the workers to 0.3 to retry it instead.
--
-- The DDL an upgrade needs (tables, columns, indexes, types) goes here by hand;
-- the functions, views, triggers and comments are generated below it.

alter table jobs.job add column code_version text;
alter table jobs.job_type add column tenant_policy text;

-- A debounced job is "waiting to start" only until its first claim (attempt 0): one
-- awaiting its retry no longer absorbs the next enqueue of its group.
drop index jobs.job_debounce_idx;
create unique index job_debounce_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where debounce_s is not null and state = 'ready' and attempt = 0;
alter table jobs.job add column hooks jsonb;

create table jobs.job_fork (
  job_id      bigint primary key references jobs.job (id) on delete cascade,
  forked_from bigint not null,
  from_step   text not null,
  forked_at   timestamptz not null,
  forked_by   text not null
);

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
