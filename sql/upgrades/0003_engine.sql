-- sqljobs schema version 3 (engine): upgrades version 2 in place.
-- Revision sqljobs_0003. The source of every function below is sql/.
--
-- What changes, and why:
--   * Batch settles and renewals wait at most 50 ms for a busy row (one another
--     transaction holds locked) and answer ok = null for it, so one locked row no
--     longer stalls a worker's whole batch until its other leases lapse (jobs.ack_many,
--     nack_many, heartbeat_many, heartbeat; private jobs.lock_batch, lock_briefly,
--     unwritten_answer, ack_batch, nack_batch). A busy answer makes the job's settle key (a
--     jobs.lock_key row); jobs.settle_hold holds it in a transaction kept open until
--     the outcome is written, and lease recovery leaves a job whose settle key another
--     transaction holds (private jobs.settle_waiting): a 0.3 worker holds the keys of
--     its busy outcomes, so a lease that lapsed while another transaction held the row
--     is not recovered (and the job run again) when the lock is released.
--   * jobs.channel_token, ack_many and nack_many are PL/pgSQL: a session keeps their
--     plans (as SQL functions they were planned in every transaction).
--   * jobs.recover(queues, limit): the claim's recovery on its own, so a worker with no
--     free slot recovers a crashed peer's lapsed leases without claiming.
--   * Forks (jobs.fork, jobs.job_forked_from; table jobs.job_fork) and patch markers
--     (jobs.step_put option patch); the claim answers the stored steps' order
--     ('sqljobs.order'), which the 0.3 client checks a replay against.
--   * The backfill ledger (table jobs.backfill, sql/85_factories.sql) and its functions.
--   * Settlement hooks: jobs.job.hooks (a spec field: a new nullable column, no
--     default), staged by the settling functions (sql/42_hooks.sql).
--   * No trigger on jobs.job (docs/design/citus.md: a distributed install runs none on
--     its shards). The settling functions (ack, nack, lease recovery, cancel, a saga's
--     last settle) free their jobs' limit slots (private jobs.release_slots), stage
--     hooks and wake parked parents (jobs.job_final, wake_parents) in statements of
--     their own, and a cancel unwinds a compensable job itself (jobs.apply_cancel).
--     Every other update of a job (a claim, a heartbeat, a step) no longer keeps its
--     old and new rows for a statement trigger. Cancelling a job that is already
--     unwinding no longer adds a cancelled entry to its attempt history: its attempt
--     goes on. The functions that touch jobs.job, step or slot are all PL/pgSQL (Citus
--     plans no SQL function with parameters over a distributed table), and
--     jobs.limit_put and job_type_write read their values before their insert, which
--     has no subquery (private jobs.text_set): the same rows. jobs.workers and
--     queue_stats_v2 count running jobs and limit slots per group in one pass, not
--     in a subquery per worker or limit: the same answers.
--   * The bucket as a column (docs/design/citus.md): jobs.job, step, event_wait and
--     slot have a new nullable column bucket (smallint, no default: a catalog change,
--     no rewrite), which every insert writes (the job's id & 255, a step's, wait's or
--     slot's job's). A distributed install is distributed by it (Citus refuses a
--     generated distribution column); rows made before this revision keep null, which
--     the distributing step fills. No statement reads it on one PostgreSQL. The step
--     and event-wait inserts name no conflict target (their primary key is their one
--     unique key: the same conflicts), so a key that gains the bucket still catches them.
--   * Rounds per shard for a distributed install (private jobs.distributed(), false
--     here): there, jobs.claim_v2 and jobs.recover read their candidates without locks
--     across shards and lock and move each shard's in a statement of its own (Citus
--     locks rows only in a statement routed to one shard; private jobs.shard_buckets
--     names a shard's buckets), and jobs.nack_batch,
--     lock_batch and lock_briefly (now (ids, distributed)) write and lock a batch's
--     rows a shard at a time (private jobs.ids_by_shard groups the ids; a nack
--     records a saga's unwind after its update, not in it, and makes the attempt
--     history in its select), as jobs.requeue locks
--     its jobs (private jobs.lock_jobs); jobs.hold_step (every step write) and
--     jobs.lock_for_verb name the job's bucket in their by-id statements there, and
--     hold_step reckons a renewed lease before its update; a
--     claim fills up from the first job's shard and reads no cursor (and
--     jobs.claimable_behind finds nothing behind one). On one
--     PostgreSQL they run one round, as before: the same statements, each read of
--     jobs.job in a claim also naming the round's buckets when there are any. Lease
--     recovery makes a lapsed job's error and attempt history in its select, not in
--     its update (Citus sends no update whose SET calls a stable function on the
--     row's columns), and the engine's subqueries over jobs.job, step, event_wait and
--     slot select a column (Citus 13 cannot plan one that selects none): the same
--     answers. New error codes for `sqljobs migrate --distributed`, the step that
--     distributes an install: SJ061 citus_required, SJ062 jobs_before_buckets.
--   * A debounced job that started and awaits its retry no longer absorbs the next
--     enqueue of its group (job_debounce_idx rebuilt with attempt = 0).
--   * Tenant policy per job type (jobs.job_type.tenant_policy, a new nullable column;
--     a job type's field "tenant": required | forbidden), checked by every enqueue.
--   * The data factory that declared a job type (jobs.job_type.factory, a new nullable
--     column; a job type's field "factory": {"kind": ..., settings}), answered by
--     jobs.job_types() (a column appended) for the dashboard's factories page.
--   * Code-version routing: jobs.job.code_version (a new nullable column, no default:
--     a catalog change, no rewrite) set by the first claim that passes the option
--     "version"; such a claim takes only jobs of its version or never claimed.
--   * Outbound webhooks' shared state (tables jobs.webhook_endpoint, webhook_attempt;
--     sql/87_integrations.sql): disabled endpoints and the recorded attempts.
--   * The ledger (tables jobs.ledger_posting, ledger_line; sql/87_integrations.sql):
--     balanced double-entry postings, one per (ledger, tenant, key).
--   * The data-subject erase audit (table jobs.subject_audit, sql/87_integrations.sql).
--   * Stream consumers' cursors (table jobs.consumer, sql/87_integrations.sql).
--   * The actor, who asked for a job: jobs.job.actor (a spec field: a new nullable
--     column, no default) and jobs.event.actor; checked by jobs.actor_problem
--     (invalid_actor, SJ023); inherited by step_invoke's children, hook jobs and
--     forks; shown by jobs.job_view (a column appended). jobs.claim_v2 answers it
--     (jobs.claim, version 1's columns, is now a wrapper over it); jobs.emit_event_v2
--     takes it (jobs.emit_event is a wrapper over it).
--   * jobs.install_roles (run at the end) takes EXECUTE from PUBLIC in a non-superuser
--     owner's default privileges for the database, so a function the owner makes
--     later in schema jobs is nobody's until granted (a pg_default_acl row; a
--     superuser owner's defaults are left alone).
--   * job_finished_idx (finished_at of finished rows) is dropped: every settle paid an
--     entry in it (9% of the drain), and job_retention_idx (state, finished_at) serves
--     the window reads, which now name their states (jobs.stats).
--   * A limited claim is cheaper per job (issue 33, drain_limited): jobs.admit makes
--     and locks its limit groups' rows of jobs.lock_key in two statements instead of
--     two per group (the same rows, skip locked as before), and works out the groups'
--     order with the groups themselves; jobs.slots_freed finds each released slot row
--     by its whole key (grp, job_id). Same admissions, same locks.
--   * job_lease_idx is rebuilt with `lease_expires_at is not null` in its predicate (the
--     same rows: only a claim makes a row running, and it sets the lease), so a
--     statement that finds jobs by id and checks state = 'running' (the fence of
--     ack_many, nack_many, heartbeat_many, step_put) is planned as primary-key probes,
--     never as a scan of every running row (which, under a snapshot held open, walked
--     every lease entry since: an ack of 10 jobs took 5 ms after 40,000 jobs). The
--     running counts of queue_gauges, workers and the operator list name it too.
--   * A batch enqueue (jobs.enqueue_batch, enqueue_many, the relay's publish) tries a
--     plain insert first and falls back to ON CONFLICT DO NOTHING when a key or group
--     has a job (private jobs.batch_write, subtransaction_allowed: at most 8 tries, each
--     a subtransaction, per transaction). The same answers; no probe of the unique
--     indexes ahead of each new row, and a plain insert is answered from the rows it
--     was given, not joined back to the rows it returned. enqueue_batch checks its
--     payloads in one pass over their array (private jobs.too_deep_item). A batch is
--     inserted in its keys' byte order (collate "C"): any one order keeps two batches
--     that share keys from deadlocking, and the locale's comparisons cost more.
--   * A batch ack (jobs.ack_many) writes first, waiting at most 50 ms for a busy row in
--     a subtransaction (private jobs.ack_rows), and takes the lock pass
--     (jobs.lock_batch) only when a row stays busy: the same answers, no pass that
--     locked every row before writing it.
--   * job_key_idx leads with the key: (key, name, coalesce(tenant, '')), the same
--     namespace, each comparison in it decided by one column instead of three (the
--     name and tenant are almost always equal): every insert into it is cheaper, an
--     enqueue's and a claim's or settle's (they are not HOT updates).
--   * A new job's id carries its bucket (docs/design/citus.md): seq << 8 | a hash of
--     its tenant, or of (name, key) without one, in the low 8 bits (private
--     jobs.job_id_sql, new_job_id). Every job of a dedupe key and every job of a tenant
--     has one bucket, so a later distributed install routes by id and keeps its unique
--     keys per shard without moving a job made from now on. Ids stay bigint and keep
--     growing (the sequence goes on from where it is: every new id is above every old
--     one). jobs.job.id and jobs.outbox.id lose their default (the bare sequence):
--     an insert that names no id is refused instead of making an id without a bucket;
--     jobs.job_id_seq stops at 2^55 - 1 (shifted, a larger value would wrap negative).
-- Locks: eight new, empty tables; three nullable columns added to jobs.job, one to
-- jobs.event and two to jobs.job_type, and two defaults dropped (an ACCESS EXCLUSIVE
-- lock held for a catalog change only: milliseconds, after waiting for the
-- transactions that hold the table);
-- job_key_idx, job_debounce_idx and job_lease_idx rebuilt (dropping an index takes an
-- ACCESS EXCLUSIVE lock on jobs.job, held to the upgrade's commit: enqueues, claims,
-- settles and reads of jobs wait while the three are built, the key index about
-- a second per million rows (0.7 s for 1.16 million here), the two partial ones only
-- their live rows);
-- job_finished_idx dropped (an ACCESS EXCLUSIVE lock for a catalog change only);
-- function replacements; no table rewrite.
-- Workers: need not drain. A 0.2 worker reads a busy answer
-- (null) as a lost lease: the job runs again after its lease, as a stalled batch did
-- before; upgrade the workers to 0.3 to retry it instead. A 0.2 worker keeps calling
-- jobs.claim (its handlers see no actor); a 0.3 worker calls jobs.claim_v2.
--
-- The DDL an upgrade needs (tables, columns, indexes, types) goes here by hand;
-- the functions, views, triggers and comments are generated below it.

alter table jobs.job add column code_version text;

-- No trigger on jobs.job: what they did, the settling functions now do in statements of
-- their own (jobs.release_slots, job_final, wake_parents; apply_cancel unwinds a saga).
drop trigger job_slots_freed on jobs.job;
drop trigger job_child_settled on jobs.job;
drop trigger job_child_removed on jobs.job;
drop trigger job_cancel_unwinds on jobs.job;
drop function jobs.slots_freed();
drop function jobs.child_settled();
drop function jobs.cancel_unwinds();

-- Ids are made with their bucket (jobs.job_id_sql), never by a column default; the
-- sequence stops at 2^55 - 1 (shifted 8 bits, a larger value would wrap negative).
alter table jobs.job alter column id drop default;
alter table jobs.outbox alter column id drop default;
alter sequence jobs.job_id_seq maxvalue 36028797018963967;

-- Settles stop writing an entry for it; job_retention_idx serves its reads.
drop index jobs.job_finished_idx;
alter table jobs.job_type add column tenant_policy text;
alter table jobs.job_type add column factory jsonb;
-- jobs.job_types() answers the column factory too: its result type changes
drop function jobs.job_types();

-- A debounced job is "waiting to start" only until its first claim (attempt 0): one
-- awaiting its retry no longer absorbs the next enqueue of its group.
drop index jobs.job_debounce_idx;
create unique index job_debounce_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where debounce_s is not null and state = 'ready' and attempt = 0;
-- The key index leads with the key: its comparisons are decided by one column.
drop index jobs.job_key_idx;
create unique index job_key_idx
  on jobs.job (key, name, (coalesce(tenant, '')));
-- The lease index names the lease in its predicate: a by-id fence (ack, nack,
-- heartbeat) can no longer be planned as a scan of every running row.
drop index jobs.job_lease_idx;
create index job_lease_idx
  on jobs.job (lease_expires_at)
  where state = 'running' and lease_expires_at is not null;
alter table jobs.job add column hooks jsonb;
alter table jobs.job add column actor jsonb;
alter table jobs.event add column actor jsonb;
-- The bucket (id & 255) as a plain column, written by every insert: Citus distributes
-- by a column and refuses a generated one. Earlier rows keep null (no rewrite).
alter table jobs.job add column bucket smallint;
alter table jobs.step add column bucket smallint;
alter table jobs.event_wait add column bucket smallint;
alter table jobs.slot add column bucket smallint;

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

-- ---------------------------------------------------------------------------
-- jobs.webhook_endpoint and jobs.webhook_attempt: the outbound webhooks' shared state
-- (sql/87_integrations.sql). New, empty tables: no lock on anything that exists.
-- ---------------------------------------------------------------------------
create table jobs.webhook_endpoint (
  name        text        primary key,
  tenant      text,
  reason      text        not null,
  disabled_by text        not null,
  disabled_at timestamptz not null
);

comment on table jobs.webhook_endpoint is
  'Disabled outbound webhook endpoints (no row: enabled), sql/87_integrations.sql.';

create table jobs.webhook_attempt (
  job_id     bigint      not null references jobs.job (id) on delete cascade,
  attempt    integer     not null,
  endpoint   text        not null,
  tenant     text,
  outcome    text        not null
             check (outcome in ('delivered', 'retry', 'rejected', 'error', 'disabled',
                                'refused')),
  status     integer,
  latency_ms integer     not null,
  excerpt    text,
  at         timestamptz not null,
  primary key (job_id, attempt)
);

comment on table jobs.webhook_attempt is
  'One row per outbound webhook attempt that reached a verdict, sql/87_integrations.sql.';

-- ---------------------------------------------------------------------------
-- jobs.ledger_posting and jobs.ledger_line: the ledger's postings
-- (sql/87_integrations.sql). New, empty tables: no lock on anything that exists.
-- ---------------------------------------------------------------------------
create table jobs.ledger_posting (
  id        bigint      generated always as identity primary key,
  ledger    text        not null,
  tenant    text        not null default '',
  key       text        not null,
  memo      text,
  job_id    bigint,
  posted_at timestamptz not null,
  unique (ledger, tenant, key)
);

comment on table jobs.ledger_posting is
  'Ledger postings, one per (ledger, tenant, key), sql/87_integrations.sql.';

create table jobs.ledger_line (
  posting_id bigint  not null references jobs.ledger_posting (id),
  line       integer not null,
  account    text    not null,
  currency   text    not null,
  amount     numeric not null check (amount <> 0),
  primary key (posting_id, line)
);

create index ledger_line_account on jobs.ledger_line (account, currency);

comment on table jobs.ledger_line is
  'The lines of the ledger postings (debit > 0, credit < 0), sql/87_integrations.sql.';

-- ---------------------------------------------------------------------------
-- jobs.subject_audit: the audit of data-subject erasures (sql/87_integrations.sql).
-- A new, empty table: no lock on anything that exists.
-- ---------------------------------------------------------------------------
create table jobs.subject_audit (
  id           bigint      generated always as identity primary key,
  action       text        not null check (action in ('erase')),
  subject_hash text        not null,
  actor        text,
  session_role text        not null,
  at           timestamptz not null,
  erased       jsonb       not null
);

comment on table jobs.subject_audit is
  'One row per data-subject erase: who, when, what (counts and paths, never values), sql/87_integrations.sql.';

-- ---------------------------------------------------------------------------
-- jobs.consumer: the stream consumers' cursors (sql/87_integrations.sql).
-- A new, empty table: no lock on anything that exists.
-- ---------------------------------------------------------------------------
create table jobs.consumer (
  name       text        primary key,
  cursor     jsonb,
  turn       bigint      not null default 0,
  rows_done  bigint      not null default 0,
  updated_at timestamptz not null
);

comment on table jobs.consumer is
  'The cursor of each stream consumer, moved in the transaction of its turn, sql/87_integrations.sql.';
