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

-- ===========================================================================
-- Generated from sql/ by `make revision`: every function, view, trigger and comment
-- that differs from the previous schema version, as sql/ writes it. Do not edit
-- below this line: edit sql/ and run `make revision` again.
-- ===========================================================================

-- === sql/00_schema.sql ===

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

comment on table jobs.job_fork is 'Private: which job and step a forked job was made from.';

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
    ('SJ021', 'step_not_found',      'the job''s stored history has no step of that name'),
    ('SJ022', 'tenant_policy',       'the job type requires a tenant and none was given, or forbids one'),
    ('SJ023', 'invalid_actor',       'an actor must be a non-empty JSON string or object of at most 512 bytes'),
    ('SJ030', 'not_leader',          'the leader token does not hold the live lease'),
    ('SJ031', 'schedule_not_found',  'no schedule has that name'),
    ('SJ040', 'backfill_environment_refused', 'the backfill may not run in this environment'),
    ('SJ041', 'backfill_requires_unmet', 'a backfill this one requires has not completed in this environment'),
    ('SJ042', 'backfill_checksum_changed', 'the backfill completed under another checksum; it is not run again silently'),
    ('SJ043', 'backfill_busy',       'another live job is running this backfill'),
    ('SJ044', 'backfill_not_found',  'no backfill of that name and scope has run in this environment'),
    ('SJ045', 'backfill_state',      'the backfill is not in a state that allows this verb'),
    ('SJ046', 'backfill_stalled',    'the backfill ended with fewer rows than its declared count'),
    ('SJ050', 'webhook_disabled',    'the outbound webhook endpoint is disabled: no request was sent'),
    ('SJ051', 'webhook_rejected',    'the webhook endpoint refused the event with a 4xx other than 408 or 429'),
    ('SJ052', 'webhook_tenant_refused', 'the webhook event names another tenant than its endpoint''s'),
    ('SJ053', 'ledger_unbalanced',   'the posting''s amounts do not sum to zero in each currency'),
    ('SJ054', 'ledger_posting_conflict', 'the posting key was written with other lines'),
    ('SJ060', 'citus_worker_node',   'this database is a Citus worker node; sqljobs lives on the coordinator'),
    ('SJ061', 'citus_required',      'the distributed mode needs the Citus extension in this database'),
    ('SJ062', 'jobs_before_buckets', 'live jobs made before schema version 3 stop the distributing step')
$$;

-- jobs.too_deep_item(): jobs.too_deep() for each item of an array (a batch's payloads),
-- in one pass over the array instead of taking each item out.
create or replace function jobs.too_deep_item()
returns jsonpath
language sql
immutable
set search_path = ''
as $$ select 'strict $[*].**{99} ? (@.type() == "object" || @.type() == "array")'::pg_catalog.jsonpath $$;

comment on function jobs.too_deep_item() is
  'Private: the JSON path matching an array item nested 100 levels deep or more.';

-- === sql/15_tenancy.sql ===

-- jobs.check_tenant_policy(specs): refuse (tenant_policy, SJ022) the first spec whose
-- job type requires a tenant and names none, or forbids one and names one. Runs after
-- jobs.tenant_specs, so a bound session's specs always name its tenant. One read of
-- jobs.job_type when no type has a policy.
create or replace function jobs.check_tenant_policy(p_specs jsonb)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_ord    bigint;
  v_name   text;
  v_policy text;
begin
  if not exists (select from jobs.job_type t where t.tenant_policy is not null) then
    return;
  end if;
  select e.ord, t.name, t.tenant_policy into v_ord, v_name, v_policy
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
    join jobs.job_type t on t.name = e.spec->>'name'
   where (t.tenant_policy = 'required' and nullif(e.spec->>'tenant', '') is null)
      or (t.tenant_policy = 'forbidden' and nullif(e.spec->>'tenant', '') is not null)
   order by e.ord
   limit 1;
  if v_ord is not null then
    perform jobs.raise_error('tenant_policy',
      pg_catalog.format('spec %s: job type %s %s', v_ord, v_name,
                        case v_policy when 'required' then 'requires a tenant and none was given'
                             else 'forbids a tenant and one was given' end),
      null, case v_policy when 'required' then 'enqueue it with a tenant'
                          else 'enqueue it without a tenant' end);
  end if;
end
$$;

comment on function jobs.check_tenant_policy(jsonb) is
  'Private: refuse a spec that breaks its job type''s tenant policy (SJ022).';

-- === sql/20_enqueue.sql ===

-- ---------------------------------------------------------------------------
-- jobs.batch_write(insert, grouped) -> the PL/pgSQL that writes a batch, for insert_jobs and
-- jobs.insert_batch (made by jobs.define_spec()). `insert` is the statement's WITH list,
-- ending in `sorted` (ord, id, queue, run_at: each row as it will be inserted) and `ins`
-- (the insert, with an {on_conflict} slot).
-- New keys (most batches): a plain insert, which makes no probe of the unique indexes
-- ahead of each row (ON CONFLICT's cost a quarter of the insert), answered from `sorted`
-- (every row of it went in, or the statement failed: joined to the insert's rows, the
-- answer cost a tenth of a batch of 1,000); a key that has a job
-- raises unique_violation, and the same insert runs again with DO NOTHING. Each try is
-- a subtransaction: at most jobs.subtransaction_allowed() per transaction. `grouped` is
-- the expression that says whether a row of the batch is singleton or debounced: such
-- a batch takes DO NOTHING at once. (A plain insert writes a row's key entry before it
-- waits on another transaction's job of the same group, and a second enqueue of that
-- key in that transaction would then deadlock; ON CONFLICT checks every unique index
-- before it writes any.)
-- ---------------------------------------------------------------------------
create or replace function jobs.batch_write(p_insert text, p_grouped text)
returns text
language sql
immutable
set search_path = ''
as $$
select pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($w$
      if not ({grouped}) and jobs.subtransaction_allowed() then
        declare
          v_ords    integer[];
          v_ids     bigint[];
          v_queues  text[];
          v_run_ats timestamptz[];
        begin
          {insert_or_raise}
          select pg_catalog.array_agg(s.ord), pg_catalog.array_agg(s.id),
                 pg_catalog.array_agg(s.queue), pg_catalog.array_agg(s.run_at)
            into v_ords, v_ids, v_queues, v_run_ats
            from sorted s;
          return query
            select u.ord, u.id, u.queue, u.run_at
              from rows from (pg_catalog.unnest(v_ords), pg_catalog.unnest(v_ids),
                              pg_catalog.unnest(v_queues), pg_catalog.unnest(v_run_ats))
                   as u(ord, id, queue, run_at);
          return;
        exception when unique_violation then
          null;  -- a key (or a singleton's group) that has a job: the insert below skips it
        end;
      end if;
      return query
      {insert_or_skip}
      select s.ord, ins.id, ins.queue, ins.run_at from ins join sorted s on s.id = ins.id;$w$,
  '{insert_or_raise}', pg_catalog.replace(p_insert, '{on_conflict}', '')),
  '{insert_or_skip}', pg_catalog.replace(p_insert, '{on_conflict}',
                                         'on conflict do nothing  -- the key, or a group''s job')),
  '{grouped}', p_grouped)
$$;

comment on function jobs.batch_write(text, text) is
  'Private: the PL/pgSQL that writes a batch of jobs (used by jobs.define_spec()).';

-- jobs.subtransaction_allowed() -> whether this call may try its fast way in a
-- subtransaction: a batch's plain insert (jobs.batch_write), a batch settle's write
-- without a lock pass (jobs.ack_batch). True for the first 8 tries of a transaction.
-- Each try is a subtransaction with its own transaction id, and a transaction with more
-- than 64 of those makes every other session's snapshot check look them up in
-- pg_subtrans; 8 leaves room for the caller's own savepoints. The count is a
-- transaction-local setting: a session that sets it only chooses which way its own
-- calls take.
create or replace function jobs.subtransaction_allowed()
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_used text := pg_catalog.current_setting('jobs.subtransactions', true);
  v_n    integer := case when v_used ~ '^[0-9]$' then v_used::integer
                         when coalesce(v_used, '') = '' then 0
                         else 8 end;
begin
  if v_n >= 8 then
    return false;
  end if;
  perform pg_catalog.set_config('jobs.subtransactions', (v_n + 1)::text, true);
  return true;
end
$$;

comment on function jobs.subtransaction_allowed() is
  'Private: whether a call may try its fast way in a subtransaction (the first 8 of a transaction).';

-- ---------------------------------------------------------------------------
-- jobs.define_spec(): derive the job spec from jobs.job. (Re)creates
--   jobs.job_spec         the spec's fields as a record type
--   jobs.spec_fields()    {field: type} of every spec field (and delay_s, on_conflict)
--   jobs.spec_defaults()  {field: default} from the columns' DEFAULTs
--   jobs.spec_problem_of() the validation of one spec: each rule once, the type rules
--                         read off the columns' types
--   jobs.insert_jobs()    the one insert of jobs that enqueue, enqueue_many, stage's
--                         relay and every other path share
--   jobs.new_job_id()     a new job's id (jobs.job_id_sql), for the outbox's staged rows
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
                             'slots', 'blocked_on', 'deferred_by', 'attempts',
                             'code_version', 'bucket'];
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
  v_insert   text;            -- a batch's WITH list (jobs.batch_write)
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
        when {r}.hooks is not null and not (
               pg_catalog.jsonb_typeof({r}.hooks) = 'object'
               and {r}.hooks - '{settled,exhausted}'::text[] = '{}'
               and not {r}.hooks @? '$.* ? (@.type() != "object" || !exists(@.name)
                                           || @.name.type() != "string" || @.name == ""
                                           || (exists(@.queue) && @.queue.type() != "string")
                                           || exists(@.keyvalue() ? (@.key != "name" && @.key != "queue")))'
               and pg_catalog.octet_length({r}.hooks::text) <= 1000)
          then 'hooks must be {"settled": {"name": "...", "queue": "..."}, "exhausted": {...}}'
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
      -- THE COMMON SPEC: only the fields most enqueues give, each plainly valid (so every
      -- rule below holds for it, the other fields taking their defaults): valid, without
      -- the full reading below. Anything else, valid or not, is read in full.
      if {spec} - '{name,key,payload,queue,priority,tenant,actor}'::text[] = '{}'
         and pg_catalog.jsonb_typeof({spec}->'name') = 'string'
         and pg_catalog.octet_length({spec}->>'name') between 1 and 200
         and pg_catalog.jsonb_typeof({spec}->'key') = 'string'
         and pg_catalog.octet_length({spec}->>'key') between 1 and 1000
         and pg_catalog.jsonb_typeof({spec}->'payload') = 'object'
         and not ({spec}->'payload' @? jobs.too_deep())
         and (case pg_catalog.jsonb_typeof({spec}->'queue')
               when 'string' then pg_catalog.octet_length({spec}->>'queue') between 1 and 200
               else not {spec} ? 'queue' end)
         and (case pg_catalog.jsonb_typeof({spec}->'tenant')
               when 'string' then pg_catalog.octet_length({spec}->>'tenant') <= 200
               else not {spec} ? 'tenant' end)
         and (case pg_catalog.jsonb_typeof({spec}->'priority')
               -- (a whole number as its text reads, as the smallint will: not 1.0)
               when 'number' then (case when ({spec}->>'priority') ~ '^-?[0-9]{1,5}$'
                                        then ({spec}->>'priority')::integer between -32768 and 32767
                                        else false end)
               else not {spec} ? 'priority' end) then
        return null;
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

  -- jobs.new_job_id(name, tenant, key) -> a new job id, its bucket in the low 8 bits: for
  -- jobs.stage_many, which makes a staged row's id (a call per row, about 1 µs, which
  -- the inserts below avoid by inlining the same expression).
  execute pg_catalog.format($f$
    create or replace function jobs.new_job_id(p_name text, p_tenant text, p_key text)
    returns bigint
    language plpgsql
    volatile
    set search_path = ''
    as $b$
    begin
      return %s;
    end
    $b$ $f$, jobs.job_id_sql('p_name', 'p_tenant', 'p_key'));
  comment on function jobs.new_job_id(text, text, text) is
    'Private: a new job id for a job of this name, tenant and key (its bucket in the low 8 bits; made by jobs.define_spec()).';

  -- jobs.insert_job(spec, now, id) -> (id, queue, run_at) of the job it created, or nulls:
  -- the insert of jobs.insert_jobs for one spec (already checked), a key that has a job
  -- (or a group with its singleton or debounced job) skipped. id: the job's id (the
  -- relay's staged row); null: a new one (jobs.job_id_sql). Not a set: jobs.enqueue
  -- reads its answer in an assignment, without a query around it.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_job(p_spec jsonb, p_now timestamptz,
                                               p_id bigint default null,
                                               out id bigint, out queue text,
                                               out run_at timestamptz)
    language plpgsql volatile set search_path = ''
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      -- its fields over the defaults, read in one pass (the same record as populating
      -- the defaults' record with them)
      v_r jobs.job_spec := pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults} ||
             case when p_spec @? '$.* ? (@ == null)' then jobs.spec_given(p_spec) else p_spec end);
      v_id bigint := coalesce(p_id, {new_id});
    begin
      insert into jobs.job as j (id, bucket, {columns}, run_at, created_at)
      values (v_id, v_id & 255, {values1},
              coalesce(v_r.run_at, p_now + pg_catalog.make_interval(
                secs => coalesce(v_r.delay_s, v_r.debounce_s, 0))),
              p_now)
      on conflict do nothing  -- the key, or a singleton's or debounced job's group
      returning j.id, j.queue, j.run_at into id, queue, run_at;
    end
    $b$ $f$, '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{new_id}', jobs.job_id_sql('v_r.name', 'v_r.tenant', 'v_r.key')),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values1}', (select pg_catalog.string_agg('v_r.' || pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_job(jsonb, timestamp with time zone, bigint) is
    'Private: the insert of one job (made by jobs.define_spec()).';

  -- jobs.insert_jobs(specs, now, ids) -> (ord, id, queue, run_at) per job it created.
  -- Inserts every spec (already checked) as a ready job, in (name, tenant, key) order so
  -- two batches that share keys wait for each other instead of deadlocking (byte order:
  -- any one order does, and the locale's comparisons cost a sort of 1,000 keys twice
  -- as much, more under a locale such as en_US than C.UTF-8); a key that
  -- has a job (or that an earlier spec of the batch takes) is skipped, not answered.
  -- ids: the id of each spec (the relay's staged rows); null: a new one (jobs.job_id_sql).
  v_insert := $i$
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
        select o.ord, coalesce(p_ids[o.ord], {new_id}) as id, o.r, (o.r).queue,
               coalesce((o.r).run_at, p_now + pg_catalog.make_interval(
                 secs => coalesce((o.r).delay_s, (o.r).debounce_s, 0))) as run_at
          from (select s.ord, s.r
                  from s
                 order by case when (select mixed.yes from mixed) then (s.r).name collate "C" end,
                          case when (select mixed.yes from mixed)
                               then coalesce((s.r).tenant, '') collate "C" end,
                          (s.r).key collate "C", s.ord) o
      ), ins as (
        insert into jobs.job as j (id, bucket, {columns}, run_at, created_at)
        select s.id, s.id & 255, {values}, s.run_at, p_now
          from sorted s
        {on_conflict}
        returning j.id, j.queue, j.run_at
      )$i$;
  v_insert := pg_catalog.replace(v_insert, '{new_id}',
                                jobs.job_id_sql('(o.r).name', '(o.r).tenant', '(o.r).key'));
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_jobs(p_specs jsonb, p_now timestamptz,
                                                p_ids bigint[] default null)
    returns table (ord integer, id bigint, queue text, run_at timestamptz)
    language plpgsql volatile set search_path = ''
    -- PL/pgSQL, not SQL: its plan is kept for the session instead of made on every call.
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      v_base jobs.job_spec;
    begin
      -- ONE SPEC (most calls): one row, without the batch statement's set-up.
      if pg_catalog.jsonb_array_length(p_specs) = 1 then
        select o.id, o.queue, o.run_at into id, queue, run_at
          from jobs.insert_job(p_specs->0, p_now, p_ids[1]) o;
        if id is not null then
          ord := 1;
          return next;
        end if;
        return;
      end if;
      -- A BATCH: one statement.
      v_base := pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults});{write}
    end
    $b$ $f$, '{write}', jobs.batch_write(v_insert,
        $g$p_specs @? '$[*] ? (@.singleton == true || @.debounce_s != null)'$g$)),
      '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values}', (select pg_catalog.string_agg('(s.r).' || pg_catalog.quote_ident(c), ', ')
                     from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_jobs(jsonb, timestamp with time zone, bigint[]) is
    'Private: the one insert of jobs (made by jobs.define_spec()).';

  -- jobs.insert_batch(spec, keys, payloads, now) -> (ord, id, queue, run_at) per job it
  -- created: the insert of jobs.insert_jobs for jobs that share one spec (already
  -- checked), each with its own key and payload (null: {}). The shared fields are read
  -- once, not once per job. In key order (one name and tenant), as insert_jobs locks.
  v_insert := $i$
      with sorted as materialized (
        -- in lock order, the ids drawn in that order too
        select o.ord, {new_id} as id, o.key, o.payload, v_r.queue, v_run_at as run_at
          from (select k.ord::integer as ord, k.key,
                       coalesce(nullif(k.payload, 'null'), '{}') as payload
                  -- each key beside its payload (as many: enqueue_batch checks), none: {}
                  from rows from (pg_catalog.unnest(p_keys),
                                  pg_catalog.jsonb_array_elements(p_payloads))
                       with ordinality as k(key, payload, ord)
                 order by k.key collate "C", k.ord) o
      ), ins as (
        insert into jobs.job as j (id, bucket, {columns}, run_at, created_at)
        select s.id, s.id & 255, {values}, s.run_at, p_now
          from sorted s
        {on_conflict}
        returning j.id, j.queue, j.run_at
      )$i$;
  v_insert := pg_catalog.replace(v_insert, '{new_id}',
                                jobs.job_id_sql('v_r.name', 'v_r.tenant', 'o.key'));
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
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
    begin{write}
    end
    $b$ $f$, '{write}', jobs.batch_write(v_insert, 'v_r.singleton or v_r.debounce_s is not null')),
      '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
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

-- ---------------------------------------------------------------------------
-- jobs.actor_problem(actor) -> what is wrong with an actor, or null (none, or JSON
-- null, is no actor). An actor says who asked for a job (a user or service id): a
-- non-empty JSON string or object, at most 512 bytes as JSON text. Reads no table.
-- ---------------------------------------------------------------------------
create or replace function jobs.actor_problem(p_actor jsonb)
returns text
language plpgsql
immutable
set search_path = ''
as $$
begin
  return case
    when p_actor is null or pg_catalog.jsonb_typeof(p_actor) = 'null' then null
    when pg_catalog.jsonb_typeof(p_actor) not in ('string', 'object')
      then pg_catalog.format('an actor must be a JSON string or object (a user or service id), not %s',
                             pg_catalog.jsonb_typeof(p_actor))
    when p_actor = '""' or p_actor = '{}' then 'an actor must not be empty'
    when pg_catalog.octet_length(p_actor::text) > 512
      then pg_catalog.format('an actor must be at most 512 bytes as JSON, this one is %s',
                             pg_catalog.octet_length(p_actor::text))
  end;
end
$$;

comment on function jobs.actor_problem(jsonb) is
  'What is wrong with an actor (a non-empty JSON string or object of at most 512 bytes), or null.';

-- ---------------------------------------------------------------------------
-- jobs.run_actor() -> the actor of the run this transaction writes for, or null.
-- jobs.fence_run (sql/40_settle.sql), which a client sends first in the transaction of
-- every write a handler makes, sets it (the transaction-local setting jobs.run_actor)
-- to its job's actor; enqueue_many, enqueue_batch, stage_many and emit_event_v2 give
-- it to what they write that names no actor. A session may set it by hand: an actor
-- is the caller's word anyway. Not JSON: invalid_actor (SJ023).
-- ---------------------------------------------------------------------------
create or replace function jobs.run_actor()
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_text text := pg_catalog.current_setting('jobs.run_actor', true);
begin
  if v_text is null or v_text = '' then
    return null;
  end if;
  begin
    return v_text::jsonb;
  exception when invalid_text_representation then
    perform jobs.raise_error('invalid_actor', 'the setting jobs.run_actor is not JSON');
  end;
end
$$;

-- jobs.run_actor_specs(specs) -> the specs, each that names no actor (or JSON null)
-- given the run's (jobs.run_actor()); no run: the specs as they are. An explicit actor
-- is kept. Private.
create or replace function jobs.run_actor_specs(p_specs jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_actor jsonb := jobs.run_actor();
begin
  if v_actor is null or pg_catalog.jsonb_typeof(p_specs) is distinct from 'array' then
    return p_specs;
  end if;
  return (select pg_catalog.jsonb_agg(
                   case when pg_catalog.jsonb_typeof(e.spec) = 'object'
                             and coalesce(pg_catalog.jsonb_typeof(e.spec->'actor'), 'null') = 'null'
                        then e.spec || pg_catalog.jsonb_build_object('actor', v_actor)
                        else e.spec end
                   order by e.ord)
            from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord));
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.check_specs(specs): raise invalid_argument (SJ001) for the first problem
-- jobs.spec_problem finds, invalid_actor (SJ023) for the first spec whose actor
-- jobs.actor_problem refuses, or payload_too_large (SJ002) for the first payload over
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
  -- ACTORS: a jsonb field, so no type rule of jobs.spec_problem reads it
  if pg_catalog.jsonb_array_length(p_specs) = 1 then  -- one spec: no query
    if p_specs->0 ? 'actor' then
      v_problem := jobs.actor_problem(p_specs->0->'actor');
      v_ord := 1;
    end if;
  elsif p_specs @? '$[*].actor' then
    select e.ord, jobs.actor_problem(e.spec->'actor') into v_ord, v_problem
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     where jobs.actor_problem(e.spec->'actor') is not null
     order by e.ord
     limit 1;
  end if;
  if v_problem is not null then
    perform jobs.raise_error('invalid_actor', pg_catalog.format('spec %s: %s', v_ord, v_problem),
      null, 'pass a user or service id: a string, or a small object such as {"user": "42"}');
  end if;
  v_ord := null;
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
-- PL/pgSQL, not SQL: a SQL function that reads a table is planned again in every
-- transaction that calls it (about 40 µs of each one-job enqueue); PL/pgSQL keeps the
-- plan for the session.
create or replace function jobs.channel_token(p_what text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
                   k.key || pg_catalog.convert_to(p_what, 'UTF8')), 'hex'), 16)
            from jobs.channel_key k);
end
$$;

-- jobs.worker_token(worker) -> the token jobs_wake carries when an operator cancels a
-- job this worker runs (jobs.apply_cancel): the worker renews its leases at once, hears
-- the cancel, and stops the run, instead of at its next heartbeat.
create or replace function jobs.worker_token(p_worker text)
returns text
language sql
stable
set search_path = ''
as $$
  select jobs.channel_token('worker:' || p_worker)
$$;

comment on function jobs.worker_token(text) is
  'The token jobs_wake carries when a job this worker runs is cancelled.';

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
                      and k.state = 'ready' and k.attempt = 0))  -- never started
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
     and k.attempt = 0  -- waiting to start: a started job awaiting its retry is left alone
  returning k.id into v_id;
  return v_id;
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
  if pg_catalog.current_setting('jobs.run_actor', true) <> '' then
    p_specs := jobs.run_actor_specs(p_specs);  -- written inside a run: its actor
  end if;
  perform jobs.check_specs(p_specs);
  p_specs := jobs.tenant_specs(p_specs);  -- a tenant-bound session's tenant (sql/15_tenancy.sql)
  perform jobs.check_tenant_policy(p_specs);

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
  v_ords    integer[];
  v_made    integer;
  v_queue   text;
  v_created boolean[];
  v_wake    text[];
  v_first   jsonb;    -- spec 1, as enqueue_many would read it
  v_problem text;
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
  if pg_catalog.current_setting('jobs.run_actor', true) <> ''
     and coalesce(pg_catalog.jsonb_typeof(p_spec->'actor'), 'null') = 'null' then
    p_spec := p_spec || pg_catalog.jsonb_build_object('actor', jobs.run_actor());  -- a run's
  end if;

  -- What the shared path does not take goes through enqueue_many, spec by spec, which
  -- refuses or answers it exactly as it would.
  if jobs.spec_problem_of(p_spec || '{"key": "k"}') is not null
     or p_spec->>'debounce_s' is not null or p_spec->>'on_conflict' = 'error'
     or p_spec->>'throttle_n' is not null or jobs.bound_tenant() is not null
     or jobs.actor_problem(p_spec->'actor') is not null
     or pg_catalog.array_position(p_keys, null) is not null or '' = any (p_keys)
     or exists (select from pg_catalog.unnest(p_keys) k where pg_catalog.octet_length(k) > 1000)
     -- each payload's checks in a pass over the array (taking each out cost twice as
     -- much); an item's text is part of the array's, so only a long array is measured
     -- item by item
     or (p_payloads is not null and (
           p_payloads @? 'strict $[*] ? (@.type() != "object" && @.type() != "null")'
           or p_payloads @? jobs.too_deep_item()
           or (pg_catalog.octet_length(p_payloads::text) > v_max and exists (
                 select from pg_catalog.jsonb_array_elements(p_payloads) as p(payload)
                  where pg_catalog.octet_length(p.payload::text) > v_max)))) then
    -- Refused here, before the spec is copied once per key, what enqueue_many would
    -- refuse in every copy (a 45 kB spec nested 5,000 deep times 10,000 keys took a
    -- backend's memory until the OOM killer stopped the server): spec 1's problem is
    -- the first it names, and an actor it refuses makes every spec's actor wrong. The
    -- answers and errors stay enqueue_many's; only what is copied per key changes.
    v_first := p_spec || pg_catalog.jsonb_build_object(
                 'key', p_keys[1], 'payload', coalesce(p_payloads -> 0, '{}'));
    v_problem := jobs.spec_problem_of(v_first);
    if v_problem is not null then
      perform jobs.raise_error('invalid_argument', 'spec 1: ' || v_problem);
    end if;
    if jobs.actor_problem(p_spec->'actor') is not null then
      -- the other specs' problems come first (jobs.check_specs), read without the actor
      v_problem := jobs.spec_problem((
        select pg_catalog.jsonb_agg(
                 (p_spec - 'actor') || pg_catalog.jsonb_build_object(
                   'key', k.key, 'payload', coalesce(p_payloads -> (k.ord::integer - 1), '{}'))
                 order by k.ord)
          from pg_catalog.unnest(p_keys) with ordinality as k(key, ord)));
      if v_problem is not null then
        perform jobs.raise_error('invalid_argument', v_problem);
      end if;
      perform jobs.check_specs(pg_catalog.jsonb_build_array(v_first));  -- spec 1's actor
    end if;
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
  perform jobs.check_tenant_policy(pg_catalog.jsonb_build_array(p_spec));

  -- WRITE: one insert for the whole batch (a key repeated in it: its first spec). Its
  -- jobs share the spec's queue and run_at; usually it took every key, in key order.
  select pg_catalog.count(*)::integer, pg_catalog.array_agg(c.id order by c.ord),
         pg_catalog.array_agg(c.ord order by c.ord),
         pg_catalog.max(c.queue) filter (where c.run_at <= v_now)
    into v_made, v_ids, v_ords, v_queue
    from jobs.insert_batch(p_spec, p_keys, p_payloads, v_now) c;
  v_wake := case when v_queue is not null then array[v_queue] end;
  if v_made = v_n then
    v_created := pg_catalog.array_fill(true, array[v_n]);
  else  -- each id in its key's place, null where the insert took none
    select pg_catalog.array_agg(c.id order by u.ord), pg_catalog.array_agg(c.id is not null order by u.ord)
      into v_ids, v_created
      from pg_catalog.generate_series(1, v_n) as u(ord)
      left join rows from (pg_catalog.unnest(v_ords), pg_catalog.unnest(v_ids)) as c(ord, id)
             on c.ord = u.ord;
  end if;

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

-- ---------------------------------------------------------------------------
-- jobs.enqueue(name, key, payload, options) -> (id, outcome): one job.
-- options takes every spec field but name, key and payload; it is exactly a one-spec
-- jobs.enqueue_many: the same refusals, answer and wake-up. The common spec (not
-- debounced, throttled or with an on_conflict) takes the one-spec steps of
-- enqueue_many here, in the same order, without making a one-spec array and reading it
-- back through each step's batch function; any other spec goes through enqueue_many.
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
-- Generic plans: re-planning these statements on every call cost more than running them.
set plan_cache_mode = force_generic_plan
as $$
declare
  v_spec    jsonb;
  v_now     timestamptz;
  v_actor   jsonb;
  v_problem text;
  v_max     integer;
  v_tenant  text;
  v_job     record;  -- jobs.insert_job's answer
  v_try     integer;
begin
  -- the spec (jobs.one_spec's, refusing the same options)
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'options must be a JSON object');
  end if;
  if p_options ?| array['name', 'key', 'payload'] then
    perform jobs.raise_error('invalid_argument',
      'options must not carry name, key or payload: pass them as arguments');
  end if;
  v_spec := p_options || pg_catalog.jsonb_build_object('name', p_name, 'key', p_key,
                                                       'payload', coalesce(p_payload, '{}'));
  if v_spec ?| array['debounce_s', 'throttle_n', 'on_conflict'] then
    return query
      select m.id, m.outcome from jobs.enqueue_many(pg_catalog.jsonb_build_array(v_spec)) m;
    return;
  end if;
  v_now := jobs.now();
  -- GUARD (jobs.enqueue_many's, for one spec): every refusal happens here, before the
  -- first write. Written inside a run: its actor (jobs.run_actor_specs).
  if pg_catalog.current_setting('jobs.run_actor', true) <> '' then
    v_actor := jobs.run_actor();
    if v_actor is not null
       and coalesce(pg_catalog.jsonb_typeof(v_spec->'actor'), 'null') = 'null' then
      v_spec := v_spec || pg_catalog.jsonb_build_object('actor', v_actor);
    end if;
  end if;
  -- jobs.check_specs
  v_problem := 'spec 1: ' || jobs.spec_problem_of(v_spec);
  v_max := jobs.max_payload_bytes();
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  if v_spec ? 'actor' then
    v_problem := jobs.actor_problem(v_spec->'actor');
    if v_problem is not null then
      perform jobs.raise_error('invalid_actor', pg_catalog.format('spec %s: %s', 1, v_problem),
        null, 'pass a user or service id: a string, or a small object such as {"user": "42"}');
    end if;
  end if;
  if pg_catalog.octet_length(v_spec->>'payload') > v_max then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('spec %s: payload is %s bytes; the limit is %s', 1,
                        pg_catalog.octet_length(v_spec->>'payload'), v_max),
      null, 'store large data elsewhere and pass a reference in the payload');
  end if;
  -- jobs.tenant_specs: a tenant-bound session's tenant
  v_tenant := jobs.bound_tenant();
  if v_tenant is not null then
    if pg_catalog.jsonb_typeof(v_spec->'tenant') is distinct from 'null'
       and v_spec->'tenant' <> pg_catalog.to_jsonb(v_tenant) then
      perform jobs.raise_error('tenant_refused',
        pg_catalog.format('spec %s: tenant %s is not %s, to which this session is bound', 1,
                          v_spec->'tenant', v_tenant));
    end if;
    v_spec := v_spec || pg_catalog.jsonb_build_object('tenant', v_tenant);
  end if;
  perform jobs.check_tenant_policy(pg_catalog.jsonb_build_array(v_spec));

  -- WRITE (a job of a singleton group that starts or ends meanwhile frees the group:
  -- then try again)
  for v_try in 1..3 loop
    v_job := jobs.insert_job(v_spec, v_now);
    if v_job.id is not null then
      if v_job.run_at <= v_now then
        perform jobs.wake(array[v_job.queue]);  -- WAKE: runnable now
      end if;
      id := v_job.id;
      outcome := 'created';
      return next;
      return;
    end if;
    -- The key has a job: an existing one, or one a concurrent transaction committed
    -- first (this later statement sees it). Or its group has a live singleton.
    id := coalesce(jobs.job_of_key(v_spec->>'name', v_spec->>'tenant', v_spec->>'key'),
                   jobs.job_of_group(v_spec));
    if id is not null then
      outcome := 'deduped';
      return next;
      return;
    end if;
  end loop;
  perform jobs.raise_error('invalid_argument',
    'spec 1: its group changed under three tries in a row; enqueue it again');
end
$$;

select jobs.define_spec();

-- === sql/30_claim.sql ===

-- jobs.check_claim_cursor(after, queues): options.after of a claim must be an object
-- whose keys are queues of the claim, each [priority, "run_at"]: a whole priority in
-- smallint's range and an ISO 8601 timestamp with its offset, as to_jsonb(timestamptz)
-- writes it; invalid_argument (SJ001) names the first that is not. One statement and
-- no exception block (a subtransaction): it runs in every claim that sends a cursor.
create or replace function jobs.check_claim_cursor(p_after jsonb, p_queues text[])
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_queue text;
  v_pos   jsonb;
begin
  if pg_catalog.jsonb_typeof(p_after) is distinct from 'object' then
    perform jobs.raise_error('invalid_argument',
      'options.after must be an object {"<queue>": [priority, "<run_at>"]}');
  end if;
  select e.key, e.value into v_queue, v_pos
    from pg_catalog.jsonb_each(p_after) e
   where not e.key = any (p_queues)
      or not pg_catalog.jsonb_path_exists(e.value,
               'strict $ ? (@.size() == 2 && @[0].type() == "number" && @[0] >= -32768
                            && @[0] <= 32767 && @[0].floor() == @[0]
                            && @[1].datetime().type() == "timestamp with time zone")',
               '{}', true)
   limit 1;
  if v_queue is null then
    return;
  elsif not v_queue = any (p_queues) then
    perform jobs.raise_error('invalid_argument', pg_catalog.format(
      'options.after names queue %L, which this claim does not claim from', v_queue));
  end if;
  perform jobs.raise_error('invalid_argument', pg_catalog.format(
    'options.after of queue %L must be [priority, "run_at"]: a whole priority and an '
    'ISO 8601 timestamp with its offset (as claim_v2 answers run_at), got %s',
    v_queue, pg_catalog.left(v_pos::text, 200)));
end
$$;

create or replace function jobs.claim_v2(
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
  steps            jsonb,        -- stored durable steps {name: value} and their order
                                 -- {"sqljobs.order": [names]}; null when none
  actor            jsonb,        -- who asked for the job (null: nobody said)
  run_at           timestamptz   -- its place in line when claimed (options.after)
)
language plpgsql
volatile
set search_path = ''
-- One generic plan per session instead of planning every call (planning was about a
-- third of a small claim). It must stay index-driven whatever the table's size when it
-- is made: seq scans are off for these statements, and the update finds its rows by
-- `id = any(array(...))` on job_pkey and joins nothing: a join to `picked` was planned
-- by its estimate, a hash join over every row of jobs.job when the plan was made on an
-- empty table, or, once the cursor's two seeks made the estimate two rows, a filter
-- over every pair (a claim of 300: 8 ms instead of 4). Every job of a claim starts at
-- the same time, and only a limited claim's jobs hold limit groups (looked up per job
-- in a map of `picked` made once, for those claims only). With seq
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
  v_version text;   -- options.version: only jobs of this code version or never claimed
  v_limited boolean;
  v_rooms   integer[];  -- limited: per queue of v_queues, what its concurrency limits leave
  v_ids     bigint[];  -- limited: the candidates
  v_admitted bigint[];  -- limited: the candidates jobs.admit lets run,
  v_slot_map jsonb;     -- the limit groups each takes ({id: [group, ...]}),
  v_admitted_at timestamptz;  -- and the admission's time, their start
  v_tenant  text := jobs.bound_tenant();  -- a bound session claims its tenant's jobs only
  v_seed    bigint := jobs.random32();     -- the claim tokens' random half
  v_after   jsonb;      -- options.after: per queue, the cursor [priority, run_at]
  v_after_p smallint[];      -- per queue of v_queues: the cursor's priority ...
  v_after_r timestamptz[];   -- ... and run_at (the head when none: -32768, -infinity)
  v_buckets smallint[];  -- distributed: this round's buckets, a shard's (null: one round)
  v_left    integer := p_limit;  -- what the rounds may still claim
  v_n       integer;
  v_distributed boolean := jobs.distributed();
  v_rounds  refcursor;  -- distributed: the rounds' buckets, best first
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
                 where k not in ('names', 'recover', 'version', 'after')) then
    perform jobs.raise_error('invalid_argument',
      'options takes only {"names": [...], "recover": true|false, "version": "...", '
      '"after": {...}}');
  end if;
  if p_options ? 'after' then
    v_after := p_options->'after';
    perform jobs.check_claim_cursor(v_after, p_queues);
  end if;
  if p_options ? 'version' then
    if pg_catalog.jsonb_typeof(p_options->'version') <> 'string' then
      perform jobs.raise_error('invalid_argument', 'options.version must be a string');
    end if;
    v_version := p_options->>'version';
    perform jobs.check_name(v_version, 'options.version');
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

  -- RECOVER (jobs.recover, below): lapsed leases, due parked jobs, free slots. What it
  -- moved is back in its place in line, behind any cursor: this claim reads the heads.
  if coalesce((p_options->>'recover')::boolean, true) and jobs.recover(p_queues) > 0
     or v_distributed then  -- (distributed, each round reads its bucket from the head)
    v_after := null;
  end if;

  -- PICK: paused queues are left out; beside each queue, its cursor or its head.
  select coalesce(pg_catalog.array_agg(q.name order by q.o), '{}'),
         pg_catalog.array_agg(coalesce((v_after->q.name->>0)::smallint, -32768) order by q.o),
         pg_catalog.array_agg(coalesce((v_after->q.name->>1)::timestamptz, '-infinity') order by q.o)
    into v_queues, v_after_p, v_after_r
    from pg_catalog.unnest(p_queues) with ordinality as q(name, o)
   where not exists (select 1 from jobs.queue pq where pq.name = q.name and pq.paused);

  -- LIMITS (sql/35_limits.sql), only once any limit exists: pick more candidates
  -- than asked for (in each round, below), and claim those jobs.admit lets run.
  v_limited := exists (select from jobs.limit);
  if v_limited then
    -- What the concurrency limits leave, per queue: the least room of the global limits
    -- and of its queue's. A full limit leaves nothing to pick, and a nearly full one few
    -- candidates to lock (a worker that claims ahead asks for hundreds). Read without
    -- the limits' locks, this only saves work: jobs.admit decides under them. (Each
    -- limit's slots are counted first, in one read: Citus plans no subquery per limit
    -- over the slots when they are distributed.)
    with free as materialized (
      select l.scope, l.target, l.concurrency - coalesce(u.n, 0) as room
        from jobs.limit l
        left join (select s.grp, pg_catalog.count(*) as n
                     from jobs.slot s
                    where s.grp = any (array(select k.name || '|' from jobs.limit k
                                              where k.concurrency is not null
                                                and k.scope in ('global', 'queue')))
                    group by s.grp) u on u.grp = l.name || '|'
       where l.concurrency is not null and l.scope in ('global', 'queue')
    )
    select coalesce(pg_catalog.array_agg(r.name), '{}'), pg_catalog.array_agg(r.room)
      into v_queues, v_rooms
      from (select q.name,
                   least(p_limit, (select pg_catalog.min(f.room) from free f
                                    where f.scope = 'global'
                                       or (f.scope = 'queue' and f.target = q.name)))
                     as room
              from pg_catalog.unnest(v_queues) as q(name)) r
     where r.room > 0;
  end if;

  -- CLAIM, in one round; or, distributed (jobs.distributed()), in rounds of one shard
  -- each (Citus locks rows only in a statement it routes to one shard): the shards of
  -- the first `limit` claimable jobs, read without locks across shards, best first,
  -- each round claiming in claim order what is left to claim from its shard's buckets
  -- (jobs.shard_buckets), until the claim has `limit` jobs. So the first job claimed is
  -- the first in line, and the rest come from its shard first: priority and run_at
  -- order hold within a shard. A claim cursor is not used there.
  if v_distributed then
    open v_rounds for
      select jobs.shard_buckets(c.bucket)
        from (select x.id, x.bucket,
                     pg_catalog.row_number() over (order by x.priority, x.run_at, x.id) as rank
                from (select r.id, r.bucket, r.priority, r.run_at
                        from jobs.job r
                       where r.state in ('ready', 'interrupted') and r.blocked_on is null
                         and r.queue = any (v_queues)
                         and r.run_at <= v_now
                         and (v_names is null or r.name = any (v_names))
                         and (v_tenant is null or r.tenant = v_tenant)
                         and (v_version is null or r.code_version is null
                              or r.code_version = v_version)
                       order by r.priority, r.run_at, r.id
                       limit p_limit + case when v_limited then 4 else 0 end) x) c
       group by 1
       order by pg_catalog.min(c.rank);
  end if;
  loop
    if v_distributed then
      fetch v_rounds into v_buckets;
      exit when not found;
    end if;
    if v_limited then  -- the candidates (of this round), locked
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
               and (v_version is null or r.code_version is null or r.code_version = v_version)
               and (v_buckets is null or r.bucket = any (v_buckets))
             order by r.priority, r.run_at, r.id
             limit q.room + 4
               for update skip locked) as c
         order by c.priority, c.run_at, c.id
         limit v_left + 4);
      -- admitted before the claim's statement, not in it: distributed, Citus sends that
      -- statement to a shard, where jobs.admit's own statements cannot run
      select pg_catalog.array_agg(a.id),
             pg_catalog.jsonb_object_agg(a.id, a.slots) filter (where a.slots is not null),
             pg_catalog.min(a.at)
        into v_admitted, v_slot_map, v_admitted_at
        from jobs.admit(v_ids, v_left, v_now) a;
    end if;
    return query
      with picked as materialized (
        (select c.id, c.priority, c.run_at, v_now as started_at
           from rows from (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_after_p),
                           pg_catalog.unnest(v_after_r)) as q(name, after_p, after_r)
           cross join lateral (
             -- better priorities than the cursor's, from the head (none without a cursor),
             -- then from the cursor on: two seeks of job_claimable_idx, in claim order
             select b.id, b.priority, b.run_at from (
             select r.id, r.priority, r.run_at
                from jobs.job r
               where r.state in ('ready', 'interrupted') and r.blocked_on is null
                 and r.queue = q.name and r.priority < q.after_p
                 and r.run_at <= v_now
                 and (v_names is null or r.name = any (v_names))
                 and (v_tenant is null or r.tenant = v_tenant)
                 and (v_version is null or r.code_version is null or r.code_version = v_version)
                 -- (distributed: the round's buckets; Citus routes the statement to
                 -- their shard only when each read of jobs.job in it names them)
                 and (v_buckets is null or r.bucket = any (v_buckets))
               order by r.priority, r.run_at, r.id
               limit v_left
                 for update skip locked) b
             union all
             select a.id, a.priority, a.run_at from (
             select r.id, r.priority, r.run_at
                from jobs.job r
               where r.state in ('ready', 'interrupted') and r.blocked_on is null
                 and r.queue = q.name and (r.priority, r.run_at) >= (q.after_p, q.after_r)
                 and r.run_at <= v_now
                 and (v_names is null or r.name = any (v_names))
                 and (v_tenant is null or r.tenant = v_tenant)
                 and (v_version is null or r.code_version is null or r.code_version = v_version)
                 and (v_buckets is null or r.bucket = any (v_buckets))
               order by r.priority, r.run_at, r.id
               limit v_left
                 for update skip locked) a
             limit v_left) as c
          where not v_limited
          order by c.priority, c.run_at, c.id
          limit v_left)
        union all
        -- limited: the candidates jobs.admit let run, the admission's time their start
        (select r.id, r.priority, r.run_at, v_admitted_at
           from jobs.job r
          where v_limited and r.id = any (v_admitted)  -- job_pkey
            and (v_buckets is null or r.bucket = any (v_buckets)))
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
               -- one time for every job of a claim: v_now, or the limits' admission time
               started_at = (select p.started_at from picked p limit 1),
               first_started_at = coalesce(j.first_started_at, v_now),
               code_version = coalesce(j.code_version, v_version),
               deferred_by = null,
               -- the limit groups an admitted job holds (none without limits)
               slots = case when v_limited then nullif(array(
                         select pg_catalog.jsonb_array_elements_text(v_slot_map -> j.id::text)),
                         '{}') end
         where j.id = any (array(select p.id from picked p))
           and (v_buckets is null or j.bucket = any (v_buckets))
        returning j.id, j.name, j.queue, j.tenant, j.key, j.payload, j.priority, j.attempt,
                  j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.claim,
                  j.lease_expires_at, j.timeout_s, j.progress,
                  j.traceparent, j.created_at, j.run_at as picked_run_at, j.step_seq,
                  j.started_at, j.actor
      ),
      slotted as (  -- the limit groups the admitted jobs now hold (sql/35_limits.sql)
        insert into jobs.slot (grp, job_id, bucket)
        select g, m.key::bigint, m.key::bigint & 255
          from pg_catalog.jsonb_each(v_slot_map) as m
         cross join lateral pg_catalog.jsonb_array_elements_text(m.value) as g
        on conflict do nothing
      )
      select c.id, c.name, c.queue, c.tenant, c.key, c.payload, c.priority, c.attempt,
             c.max_attempts, c.retry_base_s, c.retry_cap_s, c.retry_jitter, c.claim,
             c.lease_expires_at, c.timeout_s, c.progress,
             c.traceparent, c.created_at, c.started_at,
             -- Stored steps (sql/50_steps.sql), read only for jobs that ever wrote one,
             -- and under 'sqljobs.order' their names in the order they were written,
             -- then the event waits still open (where the run parked): a replay checks
             -- the order its code asks for steps in against it (sqljobs/_runtime/replay.py).
             case when c.step_seq > 0 then
               (select coalesce(pg_catalog.jsonb_object_agg(s.name, s.value), '{}')
                       || pg_catalog.jsonb_build_object('sqljobs.order',
                            coalesce(pg_catalog.jsonb_agg(s.name order by s.ordinal), '[]')
                            || (select coalesce(pg_catalog.jsonb_agg(w.step order by w.created_at), '[]')
                                  from jobs.event_wait w
                                 where w.job_id = c.id
                                   and (v_buckets is null or w.bucket = any (v_buckets))))
                  from jobs.step s
                 where s.job_id = c.id and (v_buckets is null or s.bucket = any (v_buckets)))
             end,
             c.actor,
             c.picked_run_at
        from claimed c
       order by c.priority, c.picked_run_at, c.id;
    get diagnostics v_n = row_count;
    v_left := v_left - v_n;
    exit when not v_distributed or v_left <= 0;
  end loop;
  if v_distributed then
    close v_rounds;
  end if;
end
$$;

comment on function jobs.claim_v2(text[], text, integer, double precision, jsonb) is
  'Claim up to p_limit jobs from p_queues under a new claim token and a lease, each with its actor; recovers lapsed leases.';

-- ---------------------------------------------------------------------------
-- jobs.claimable_behind(queues, after, names, version) -> the queues of `after` (a
-- claim's cursors, as options.after) that hold a job this claimer could claim but a
-- claim with that cursor would not: of the cursor's priority and earlier in line. A
-- worker asks on each poll, on a connection of its own, and reads those queues from
-- the head again: the walk over the entries a held snapshot keeps is made once a poll,
-- beside the claims, instead of in every claim. names and version filter as the
-- claim's options do; a bound session sees its tenant's jobs only. Reads only. None when
-- the tables are distributed (a distributed claim reads no cursor). Errors:
-- queues_required (SJ005) for no queue; invalid_argument (SJ001) for a bad cursor (as
-- jobs.claim_v2) or version.
-- ---------------------------------------------------------------------------
create or replace function jobs.claimable_behind(
  p_queues  text[],
  p_after   jsonb,
  p_names   text[] default null,
  p_version text default null
)
returns text[]
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_tenant text := jobs.bound_tenant();
begin
  if p_queues is null or pg_catalog.cardinality(p_queues) = 0 then
    perform jobs.raise_error('queues_required', 'claimable_behind needs at least one queue',
                             null, 'pass the queues this worker serves');
  end if;
  perform jobs.check_claim_cursor(coalesce(p_after, 'null'), p_queues);
  if p_version is not null then
    perform jobs.check_name(p_version, 'version');
  end if;
  if jobs.distributed() then
    return '{}';  -- distributed, a claim reads no cursor: nothing is ever behind one
  end if;
  return array(
    select c.key
      from pg_catalog.jsonb_each(p_after) c
     where exists (
       select 1 from jobs.job r
        where r.state in ('ready', 'interrupted') and r.blocked_on is null
          and r.queue = c.key
          and r.priority = (c.value->>0)::smallint
          and r.run_at < (c.value->>1)::timestamptz
          and (p_names is null or r.name = any (p_names))
          and (v_tenant is null or r.tenant = v_tenant)
          and (p_version is null or r.code_version is null or r.code_version = p_version))
     order by c.key);
end
$$;

comment on function jobs.claimable_behind(text[], jsonb, text[], text) is
  'The queues whose claim cursor (options.after of jobs.claim_v2) has a claimable job behind it.';

-- ---------------------------------------------------------------------------
-- jobs.claim(queues, worker, limit, lease_s, options): jobs.claim_v2 without its last
-- column (the actor). Version 1's signature, kept for 0.1 and 0.2 workers; the same
-- arguments, answers, locks and errors.
-- ---------------------------------------------------------------------------
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
  retry_base_s     double precision,
  retry_cap_s      double precision,
  retry_jitter     text,
  claim            bigint,
  lease_expires_at timestamptz,
  timeout_s        double precision,
  progress         jsonb,
  traceparent      text,
  created_at       timestamptz,
  started_at       timestamptz,
  steps            jsonb
)
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query
    select c.id, c.name, c.queue, c.tenant, c.key, c.payload, c.priority, c.attempt,
           c.max_attempts, c.retry_base_s, c.retry_cap_s, c.retry_jitter, c.claim,
           c.lease_expires_at, c.timeout_s, c.progress, c.traceparent, c.created_at,
           c.started_at, c.steps
      from jobs.claim_v2(p_queues, p_worker, p_limit, p_lease_s, p_options) c;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.recover(queues, limit) -> how many jobs it moved: the RECOVER phase of a claim,
-- callable on its own so that recovery never waits for a worker with free capacity (a
-- worker whose slots are all busy calls it on its poll interval instead of claiming).
--   lapsed leases   running jobs in these queues whose lease lapsed (at most `limit`,
--                   by job_lease_idx): back to ready with the attempt counted and their
--                   run_at kept (their place in line, ahead of a backlog), or, when that
--                   was the final attempt, buried as dead (failed when dead_letter is
--                   off; a compensable job starts its unwind instead, and a compensating
--                   one always goes back to ready: its saga unwind must finish). The
--                   lapsed attempt joins the job's attempt history (outcome
--                   lease_expired, ended_at its lease's expiry; jobs.attempts_push).
--                   A job whose outcome waits for its busy row, under a settle key
--                   another transaction holds, is left to it (jobs.settle_waiting).
--   parked jobs     whose wake-up time passed become ready (at most `limit`).
--   free slots      jobs waiting for a limit's free slot are made claimable
--                   (jobs.unblock_free).
-- A bound session recovers its tenant's jobs only. Locks: row locks, skip locked.
-- Distributed (jobs.distributed()), the lapsed leases and the due parked jobs are read
-- first without locks, across shards, and each shard's are then locked and moved in
-- a statement of their own, which names the shard's buckets (jobs.shard_buckets) and
-- so is routed there: the same moves, one round per shard that has any (on one
-- PostgreSQL, one round for all).
-- Errors: queues_required (SJ005) for no queue; invalid_argument (SJ001) for a limit
-- outside 1..1000.
-- ---------------------------------------------------------------------------
create or replace function jobs.recover(p_queues text[], p_limit integer default 100)
returns integer
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now    timestamptz := jobs.now();
  v_tenant text := jobs.bound_tenant();
  v_moved  integer := 0;
  v_n      integer;
  v_unwind_ids    bigint[];
  v_unwind_seqs   integer[];
  v_unwind_states jobs.job_state[];
  v_unwind_errors jsonb[];
  v_buried        bigint[];  -- watched jobs lease recovery buried: notified
  v_held          bigint[];  -- jobs that held limit slots
  v_follows       bigint[];  -- buried jobs with hooks or a parent
  v_buckets       smallint[];  -- distributed: this round's buckets, a shard's (null: all)
  v_ids           bigint[];  -- distributed: this round's jobs, found without locks
  v_distributed   boolean := jobs.distributed();
  v_rounds        refcursor; -- distributed: the rounds, (bucket, jobs)
begin
  if p_queues is null or pg_catalog.cardinality(p_queues) = 0 then
    perform jobs.raise_error('queues_required', 'recover needs at least one queue',
                             null, 'pass the queues this worker serves');
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('limit must be between 1 and 1000, got %s', p_limit));
  end if;
  -- RECOVER lapsed leases: bounded, by job_lease_idx. The attempt counts: where it leads
  -- is jobs.retry_state's answer, except that a job with compensable steps never is
  -- buried: on its final attempt it starts unwinding instead (back to ready,
  -- compensating, its final state recorded), and one already compensating goes back to
  -- ready to finish its unwind (sql/50_steps.sql). One round (v_ids null), or,
  -- distributed, one per shard of the lapsed jobs read without locks (the busy ones'
  -- settle keys checked here, on the coordinator, where jobs.lock_key is).
  if v_distributed then
    open v_rounds for
      select jobs.shard_buckets(c.bucket), pg_catalog.array_agg(c.id)
        from (select l.id, l.claim, l.bucket
                from jobs.job l
               where l.state = 'running' and l.lease_expires_at < v_now
                 and l.queue = any (p_queues)
                 and (v_tenant is null or l.tenant = v_tenant)
               order by l.lease_expires_at
               limit p_limit) c
       where not jobs.settle_waiting(c.id, c.claim)
       group by 1;
  end if;
  loop
    if v_distributed then
      fetch v_rounds into v_buckets, v_ids;
      exit when not found;
    end if;
    -- (The new error and attempt history are made here, not in the update: Citus sends
    -- no update to a shard whose SET calls a stable function, jsonb_build_object, on
    -- the row's columns. This row is the one the update writes: it is locked.)
    with lapsed as (
      select l.id, e.next_state, l.settle_watched, e.error,
             -- the attempt history (sql/40_settle.sql): this attempt ended when its
             -- lease lapsed
             jobs.attempts_push(l.attempts, pg_catalog.jsonb_build_object(
               'attempt', l.attempt, 'claim', l.claim >> 32, 'worker', l.worker,
               'started_at', l.started_at, 'ended_at', l.lease_expires_at,
               'outcome', 'lease_expired', 'error', e.error)) as attempts
        from jobs.job l
       cross join lateral (
         select jobs.retry_state(l.attempt, l.max_attempts, l.dead_letter) as next_state,
                pg_catalog.jsonb_build_object(
                  'kind', 'lease_expired',
                  'message', pg_catalog.format('the lease of worker %s expired during attempt %s',
                                               l.worker, l.attempt),
                  'attempt', l.attempt,
                  'at', v_now) as error) e
       where l.state = 'running' and l.lease_expires_at < v_now
         and l.queue = any (p_queues)
         and (v_tenant is null or l.tenant = v_tenant)
         and (v_ids is null
                -- its outcome waits for its busy row (sql/40_settle.sql, "Busy rows")
                and not jobs.settle_waiting(l.id, l.claim)
              or l.bucket = any (v_buckets) and l.id = any (v_ids))
       order by l.lease_expires_at
       limit p_limit
         for update of l skip locked
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
             attempts = n.attempts
        from lapsed n
       where j.id = n.id and (v_buckets is null or j.bucket = any (v_buckets))
      returning j.id, j.step_seq, n.next_state, j.last_error,
                j.compensable and n.next_state <> 'ready' as starts_unwind,
                -- buried (dead or failed): a result waiter hears of it, as from nack_many
                n.settle_watched and j.finished_at is not null as buried_watched,
                j.slots is not null as held,
                (j.hooks is not null or j.parent_id is not null) and j.finished_at is not null
                  as follows
    )
    select pg_catalog.array_agg(m.id) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.step_seq) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.next_state) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.last_error) filter (where m.starts_unwind),
           pg_catalog.array_agg(m.id) filter (where m.buried_watched),
           pg_catalog.array_agg(m.id) filter (where m.held),
           pg_catalog.array_agg(m.id) filter (where m.follows),
           pg_catalog.count(*)
      into v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors, v_buried, v_held,
           v_follows, v_n
      from moved m;
    v_moved := v_moved + v_n;
    -- they left running; the buried ones for good (sql/35_limits.sql, sql/42_hooks.sql)
    perform jobs.release_slots(v_held);
    perform jobs.job_final(v_follows);
    if v_unwind_ids is not null then
      perform jobs.record_unwinds(v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors);
    end if;
    if v_buried is not null then
      perform jobs.notify_settled(v_buried);
    end if;
    exit when not v_distributed;
  end loop;
  if v_distributed then
    close v_rounds;
  end if;

  -- Free the slots a waiter did not hear of (sql/35_limits.sql).
  if exists (select 1 from jobs.job b
              where b.blocked_on is not null and b.state in ('ready', 'interrupted')) then
    perform jobs.unblock_free(100);
  end if;

  -- Wake parked jobs whose time came (durable sleeps, wait timeouts): in rounds as above.
  if v_distributed then
    open v_rounds for
      select jobs.shard_buckets(c.bucket), pg_catalog.array_agg(c.id)
        from (select p.id, p.bucket
                from jobs.job p
               where p.state = 'parked' and p.run_at <= v_now and p.queue = any (p_queues)
                 and (v_tenant is null or p.tenant = v_tenant)
               order by p.run_at
               limit p_limit) c
       group by 1;
  end if;
  loop
    if v_distributed then
      fetch v_rounds into v_buckets, v_ids;
      exit when not found;
    end if;
    update jobs.job as j
       set state = 'ready'
      from (select p.id
              from jobs.job p
             where p.state = 'parked' and p.run_at <= v_now and p.queue = any (p_queues)
               and (v_tenant is null or p.tenant = v_tenant)
               and (v_ids is null or p.bucket = any (v_buckets) and p.id = any (v_ids))
             order by p.run_at
             limit p_limit
               for update skip locked) as due
     where j.id = due.id and (v_buckets is null or j.bucket = any (v_buckets));
    get diagnostics v_n = row_count;
    v_moved := v_moved + v_n;
    exit when not v_distributed;
  end loop;
  if v_distributed then
    close v_rounds;
  end if;
  return v_moved;
end
$$;

comment on function jobs.recover(text[], integer) is
  'Recover lapsed leases, wake due parked jobs and free limit slots in these queues; answers the jobs moved.';

-- === sql/35_limits.sql ===

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
  v_problem  text := jobs.limit_problem(p_name, p_def);
  v_new      boolean;
  v_key_path text[];
begin
  perform jobs.fleet_only('jobs.limit_put');  -- (sql/15_tenancy.sql)
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  -- (read before the insert, which then has no subquery: Citus plans none in an
  -- insert into a reference table, docs/design/citus.md)
  v_key_path := case pg_catalog.jsonb_typeof(p_def->'key')
                  when 'string' then array[p_def->>'key']
                  when 'array' then array(select pg_catalog.jsonb_array_elements_text(p_def->'key'))
                end;
  insert into jobs.limit as l (name, scope, target, key_path, concurrency, rate_n, rate_per_s,
                               when_busy, origin, updated_at)
  values (p_name, p_def->>'scope', p_def->>'target', v_key_path,
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

-- jobs.limit_stats() -> per group in use or waiting: its limit, key, concurrency and
-- running count, rate and starts in the current window, and the jobs waiting on it
-- (for a slot; for a full global or queue limit, the runnable jobs it holds back) or
-- deferred (by its rate, run_at ahead).
create or replace function jobs.limit_stats()
returns table (limit_name text, grp text, concurrency integer, running bigint,
               waiting bigint, rate_n integer, rate_per_s double precision,
               recent_starts integer, deferred bigint)
language plpgsql
stable
set search_path = ''
as $$
#variable_conflict use_column
declare
  -- (read once, here: distributed, a statement over the jobs runs on their shards,
  -- where a session's test clock is not set)
  v_now timestamptz;
begin
  perform jobs.fleet_only('jobs.limit_stats');  -- (sql/15_tenancy.sql)
  v_now := jobs.now();
  return query
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
       and d.run_at > v_now
     group by d.deferred_by
  ), full_limits as materialized (  -- a full global or queue limit holds back ...
    select l.name, l.scope, l.target
      from jobs.limit l join used u on u.grp = l.name || '|'
     where l.scope in ('global', 'queue') and u.running >= l.concurrency
  ), runnable as materialized (  -- ... the runnable jobs of its scope, counted per queue
    select h.queue, pg_catalog.count(*) as n        -- (once, not per limit: Citus plans no
      from jobs.job h                               -- subquery per limit over the jobs)
     where h.state in ('ready', 'interrupted') and h.blocked_on is null
       and h.run_at <= v_now
       and (exists (select from full_limits f where f.scope = 'global')
            or h.queue = any (array(select f.target from full_limits f where f.scope = 'queue')))
     group by h.queue
  ), held as (
    select f.name || '|' as grp,
           case when f.scope = 'global' then (select pg_catalog.sum(r.n) from runnable r)::bigint
                else (select r.n from runnable r where r.queue = f.target) end as n
      from full_limits f
  ), starts as (
    select t.grp, t.starts from jobs.limit_start t
  ), groups as (
    select u.grp from used u union select w.grp from waiting w
    union select d.grp from deferred d union select t.grp from starts t
  )
  select pg_catalog.split_part(g.grp, '|', 1), g.grp, l.concurrency,
         coalesce(u.running, 0), coalesce(w.waiting, 0) + coalesce(h.n, 0), l.rate_n, l.rate_per_s,
         (select pg_catalog.count(*)::integer from pg_catalog.unnest(t.starts) s(at)
           where s.at > v_now - pg_catalog.make_interval(secs => coalesce(l.rate_per_s, 0))),
         coalesce(d.deferred, 0)
    from groups g
    left join jobs.limit l on l.name = pg_catalog.split_part(g.grp, '|', 1)
    left join used u on u.grp = g.grp
    left join waiting w on w.grp = g.grp
    left join starts t on t.grp = g.grp
    left join deferred d on d.grp = g.grp
    left join held h on h.grp = g.grp
   order by g.grp;
end
$$;

-- jobs.admit(candidates, limit, now) -> (id, slots, at) of the candidates admitted, at
-- most p_limit, in candidate order: the limit groups each holds, and the admission's
-- time (its start). The candidates are ready jobs the claim holds locked, in claim
-- order. Refused ones are blocked, deferred or failed here (see the file's header);
-- candidates past the limit are left as they are. Locks: each group's lock row
-- (jobs.lock_key, skip locked: a group another claim admits into is left for the next
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
  v_held   boolean[];       -- per group of v_names: this claim holds its lock row
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
  -- GROUPS of every candidate, from the limits that apply to it; the distinct groups,
  -- sorted, and each pair's group's place among them (its rank). The pairs are sorted
  -- once, in a subquery (claim order, a candidate's global and queue groups last), and
  -- gathered by unordered aggregates beside no ordered one: an ordered or distinct
  -- aggregate at the same level would let PostgreSQL 16 and later re-sort the input for
  -- it (presorted aggregates), and a subquery with ORDER BY is never flattened into its
  -- parent. The sorted groups come from their own level. (An ORDER BY in each of the
  -- eight aggregates sorted the pairs eight times on PostgreSQL 15: a third of this
  -- statement.)
  with candidates as materialized (  -- each candidate read once (Citus: one read)
    select j.id, j.queue, j.name, j.tenant, j.payload, j.throttle_n, j.throttle_per_s,
           j.group_key
      from jobs.job j
     where j.id = any (p_ids)
  ), pairs as materialized (
    select x.ord, x.id, x.grp, x.cap, x.n, x.per, x.fail, x.all_jobs,
           pg_catalog.dense_rank() over (order by x.grp)::integer as pos from (
      select c.ord, j.id, g.grp, g.cap, g.n, g.per, g.fail, g.all_jobs
        from pg_catalog.unnest(p_ids) with ordinality as c(id, ord)
        join candidates j on j.id = c.id  -- its groups beside it
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
  )
  select s.ids, s.grps, s.caps, s.ns, s.pers, s.fails, s.alls, s.poss,
         (select pg_catalog.array_agg(distinct p.grp order by p.grp) from pairs p)
    into a_id, a_group, a_cap, a_n, a_per, a_fail, a_all, a_pos, v_names
    from (select pg_catalog.array_agg(o.id) as ids, pg_catalog.array_agg(o.grp) as grps,
                 pg_catalog.array_agg(o.cap) as caps, pg_catalog.array_agg(o.n) as ns,
                 pg_catalog.array_agg(o.per) as pers, pg_catalog.array_agg(o.fail) as fails,
                 pg_catalog.array_agg(o.all_jobs) as alls, pg_catalog.array_agg(o.pos) as poss
            from (select p.id, p.grp, p.cap, p.n, p.per, p.fail, p.all_jobs, p.pos
                    from pairs p
                   order by p.ord, p.all_jobs, p.grp) o) s;

  if a_id is null then  -- no limit applies to any candidate
    return query select c.id, null::text[], p_now
                   from pg_catalog.unnest(p_ids) with ordinality as c(id, ord)
                  order by c.ord limit p_limit;
    return;
  end if;

  -- LOCK ACQUISITION: each group's lock row (jobs.lock_key, as jobs.lock_keys would
  -- take it in 'skip' mode), never waited for: a group another claim is admitting into
  -- right now is left for the next claim (its candidates stay as they are), so a claim
  -- never waits on another, nor on a session holding one open. Two statements for all
  -- the groups, not two per group (jobs.lock_keys' loop: 1.5 ms of a claim of 100 jobs
  -- over 100 keys): the missing rows made in key order, then every row locked skip
  -- locked (no wait, so no order to keep), as a flag per group. A row swept between
  -- the two is left out, as one held elsewhere.
  insert into jobs.lock_key (key, created_at)
  select 'limit|' || g, pg_catalog.now() from pg_catalog.unnest(v_names) g order by 1
  on conflict (key) do nothing;
  select pg_catalog.array_agg(l.key is not null order by n.o)
    into v_held
    from pg_catalog.unnest(v_names) with ordinality as n(g, o)
    left join lateral (select k.key from jobs.lock_key k
                        where k.key = 'limit|' || n.g
                          for update skip locked) l on true;

  -- The admission's time, read once the locks are held: the claims of a group are
  -- admitted in lock order, so their starts (the rate windows, each job's started_at)
  -- are in that order too. The test clock stands in for it, read through jobs.now(),
  -- which honours jobs.fake_now for the schema owner or a superuser only (SJ019 for any
  -- other session: a worker's 2100 would defer other names' jobs to 2100).
  if nullif(pg_catalog.current_setting('jobs.fake_now', true), '') is null then
    v_now := pg_catalog.clock_timestamp();
  else
    v_now := jobs.now();
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
     where t.grp = any (array(select x.g
                                from rows from (pg_catalog.unnest(v_names),
                                                pg_catalog.unnest(v_held)) as x(g, held)
                               where x.held));
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
      if not v_held[a_pos[v_i]] then
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
                select 1 from jobs.slot s
                  join jobs.job r on r.id = s.job_id
                                 and (not jobs.distributed() or r.bucket = s.bucket)  -- (co-located)
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
    if not jobs.distributed() then
      perform jobs.unblock(array(
        select w.id
          from (select distinct a_group[x.i] as grp, a_cap[x.i] as cap, v_used[a_pos[x.i]] as used
                  from pg_catalog.generate_subscripts(a_group, 1) as x(i)
                 where a_cap[x.i] > v_used[a_pos[x.i]]
                   and v_held[a_pos[x.i]]) g
         cross join lateral (
           select b.id from jobs.job b
            where b.blocked_on = g.grp and b.state in ('ready', 'interrupted')
            order by b.priority, b.run_at, b.id
            limit g.cap - g.used
              for update skip locked) w));
    else
      -- Distributed, a group at a time and without row locks (Citus locks rows only in
      -- a statement routed to one shard, and a group's waiters are on any): under the
      -- group's lock row no other claim admits into it, and a waiter unblocked twice is
      -- unblocked once.
      for v_group, v_w in
          select distinct a_group[x.i], a_cap[x.i] - v_used[a_pos[x.i]]
            from pg_catalog.generate_subscripts(a_group, 1) as x(i)
           where a_cap[x.i] > v_used[a_pos[x.i]] and v_held[a_pos[x.i]] loop
        perform jobs.unblock(array(
          select b.id from jobs.job b
           where b.blocked_on = v_group and b.state in ('ready', 'interrupted')
           order by b.priority, b.run_at, b.id
           limit v_w));
      end loop;
    end if;
  end if;
  if pg_catalog.cardinality(v_defer) > 0 then
    update jobs.job as j set run_at = d.at, deferred_by = d.grp
      from unnest(v_defer, v_defer_at, v_defer_on) as d(id, at, grp)
     where j.id = d.id;
  end if;
  if pg_catalog.cardinality(v_fail) > 0 then
    -- (the errors made first: Citus sends no update whose SET calls a stable function
    -- on columns)
    update jobs.job as j
       set state = 'failed', finished_at = v_now, last_error = f.error
      from unnest(v_fail, array(
             select pg_catalog.jsonb_build_object(
                      'kind', 'key_busy', 'sqlstate', 'SJ012',
                      'message', pg_catalog.format(
                        'another run holds key %L of limit %L, and the job says when_busy = fail',
                        pg_catalog.substr(g, pg_catalog.strpos(g, '|') + 1),
                        pg_catalog.split_part(g, '|', 1)),
                      'at', v_now)
               from pg_catalog.unnest(v_fail_on) with ordinality as u(g, o)
              order by u.o)) as f(id, error)
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
  v_queues  text[];
  v_buckets smallint[];
  v_ids     bigint[];
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0 then
    return;
  end if;
  if not jobs.distributed() then
    with moved as (
      update jobs.job as j set blocked_on = null
       where j.id = any (p_ids) and j.blocked_on is not null
      returning j.queue
    )
    select pg_catalog.array_agg(distinct m.queue) into v_queues from moved m;
  else
    -- A shard at a time, a waiter locked elsewhere skipped (distributed, the waiters
    -- are picked without row locks: waiting here for one, while holding jobs, could
    -- deadlock; a skipped one is freed by the next sweep, jobs.unblock_free)
    for v_buckets, v_ids in select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b loop
      with moved as (
        update jobs.job as j set blocked_on = null
          from (select w.id from jobs.job w
                 where w.id = any (v_ids) and w.bucket = any (v_buckets)
                   and w.blocked_on is not null
                   for update skip locked) l
         where j.id = l.id and j.bucket = any (v_buckets)
        returning j.queue
      )
      select v_queues || pg_catalog.array_agg(distinct m.queue) into v_queues from moved m;
    end loop;
  end if;
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
  v_ids bigint[] := '{}';
  v_group text;
  v_room  bigint;
begin
  if jobs.distributed() then
    -- a group at a time, without row locks (Citus locks rows only in a statement routed
    -- to one shard; a waiter unblocked twice is unblocked once), each group's slots
    -- counted in one read
    for v_group, v_room in
        select g.grp, greatest(0, case when l.concurrency is null then g.n
                                       else l.concurrency - coalesce(u.n, 0) end)
          from (select b.blocked_on as grp, pg_catalog.count(*) as n
                  from jobs.job b
                 where b.blocked_on is not null and b.state in ('ready', 'interrupted')
                 group by b.blocked_on) g
          left join jobs.limit l on l.name = pg_catalog.split_part(g.grp, '|', 1)
          left join (select s.grp, pg_catalog.count(*) as n from jobs.slot s group by s.grp) u
            on u.grp = g.grp loop
      exit when pg_catalog.cardinality(v_ids) >= p_max;
      v_ids := v_ids || array(select b.id from jobs.job b
                               where b.blocked_on = v_group
                                 and b.state in ('ready', 'interrupted')
                               order by b.priority, b.run_at, b.id
                               limit least(v_room, p_max - pg_catalog.cardinality(v_ids)));
    end loop;
    perform jobs.unblock(v_ids);
    return pg_catalog.cardinality(v_ids);
  end if;
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

-- jobs.release_slots(ids): these jobs just left running (ack, nack, lease recovery, a
-- cancel, a saga's last settle: each calls it, once per statement, with the jobs that
-- held slots). Their jobs.slot rows go, and the first waiting job of each freed group
-- becomes claimable (skip locked: a waiter another transaction holds is left to the
-- sweep). A call, not a trigger on jobs.job: no other update of a job pays for it, and
-- a distributed install runs no trigger on its shards (docs/design/citus.md). Private.
create or replace function jobs.release_slots(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
set enable_bitmapscan = off  -- jobs.slot churns: see jobs.claim (sql/30_claim.sql)
as $$
declare
  v_freed  text[];  -- a group per slot row freed (a group freed twice: twice)
  v_groups text[];
  v_queues text[];
  v_group  text;
  v_waiters bigint[] := '{}';
begin
  if p_ids is null then
    return;
  end if;
  -- (each slot row found by both columns of its key: by job_id alone it is a walk over
  -- the whole slot_pkey per job)
  with f as materialized (
    select g.grp, j.id, j.queue
      from jobs.job j
     cross join lateral pg_catalog.unnest(j.slots) as g(grp)
     where j.id = any (p_ids)
  ), freed as (
    delete from jobs.slot s
     using f
     where s.grp = f.grp and s.job_id = f.id
    returning s.grp, f.queue
  )
  select pg_catalog.array_agg(freed.grp), pg_catalog.array_agg(distinct freed.queue)
    into v_freed, v_queues
    from freed;
  if v_freed is null then
    return;
  end if;
  v_groups := array(select distinct g from pg_catalog.unnest(v_freed) as g);
  if not jobs.distributed()
     and exists (select 1 from jobs.job b
                  where b.blocked_on = any (v_groups) and b.state in ('ready', 'interrupted')) then
    perform jobs.unblock(array(
      select (select b.id from jobs.job b
               where b.blocked_on = g and b.state in ('ready', 'interrupted')
               order by b.priority, b.run_at, b.id
               limit 1
                 for update skip locked)
        from pg_catalog.unnest(v_groups) as g));
  elsif jobs.distributed() then
    -- a group at a time, without row locks (Citus locks rows only in a statement routed
    -- to one shard; a waiter unblocked twice is unblocked once)
    foreach v_group in array v_groups loop
      v_waiters := v_waiters || array(select b.id from jobs.job b
                                       where b.blocked_on = v_group
                                         and b.state in ('ready', 'interrupted')
                                       order by b.priority, b.run_at, b.id
                                       limit 1);
    end loop;
    perform jobs.unblock(v_waiters);
  end if;
  -- Jobs held back by a full global or queue limit stay claimable (no waiter is
  -- recorded), and the claims skip picking while it is full: when these slots were
  -- the group's last (the group was full as this transaction sees it), wake the
  -- claimers of the jobs' queues. (Those of other queues under the same global limit
  -- take a free slot at their next poll.) A group with room wakes no one: its
  -- claimers are not waiting for it.
  -- (the groups' slots counted first, in one read: Citus plans no subquery per limit
  -- over the slots when they are distributed)
  if exists (select 1 from jobs.limit l
               left join (select s.grp, pg_catalog.count(*) as n
                            from jobs.slot s
                           where s.grp = any (v_groups)
                           group by s.grp) u on u.grp = l.name || '|'
              where l.scope in ('global', 'queue') and l.concurrency is not null
                and l.name || '|' = any (v_groups)
                and l.concurrency <= coalesce(u.n, 0)
                                     + (select pg_catalog.count(*)
                                          from pg_catalog.unnest(v_freed) as g(grp)
                                         where g.grp = l.name || '|')) then
    perform jobs.wake(v_queues);
  end if;
end
$$;

comment on function jobs.release_slots(bigint[]) is
  'Private: free the limit slots of jobs that just left running, and let their groups'' waiters in.';

-- === sql/40_settle.sql ===

-- ---------------------------------------------------------------------------
-- Busy rows. A row another transaction holds locked (an operator's open transaction, a
-- report that ran SELECT ... FOR UPDATE) must not stall a worker's whole batch: its
-- other jobs' leases would lapse behind it and run again elsewhere. So the batch
-- functions (ack_many, nack_many, heartbeat_many) lock what they can at once, wait at
-- most 50 ms for the rest (a claim's scan holds the rows it stepped over until it
-- commits, a millisecond or so), and answer ok = null for a row still locked after
-- that: nothing was written, the job is still this claim's as far as the caller can
-- tell, call again. The one-job functions (ack, nack) wait for the lock instead, as a
-- plain UPDATE would, and then answer or raise as always.
-- A busy answer also makes the job's settle key under the claim (a jobs.lock_key row,
-- committed with the answer). The caller holds it (jobs.settle_hold, in a transaction
-- of its own kept open) until the outcome is written, and lease recovery leaves a job
-- whose settle key under its claim another transaction holds (jobs.settle_waiting): a
-- lease that lapses while another transaction holds the row goes to the outcome sent
-- again once the lock is released, not to a recovery that would run the job again.
-- jobs.lock_batch takes the locks of the rows that run under a claim given (null: all
-- of them, so the writes need no filter; a row named without its own claim token is
-- never locked, so naming it pins nothing); jobs.unwritten_answer
-- answers for a job the batch did not write: busy (null) when, as the statement sees
-- it, it still runs under the caller's claim (a row the batch could not lock), else
-- false (the fence failed). It is called only for unwritten jobs:
-- a SQL function is planned again in each statement that calls it.
-- ---------------------------------------------------------------------------
create or replace function jobs.lock_batch(p_ids bigint[], p_claims bigint[], p_wait boolean)
returns bigint[]
language plpgsql
volatile
set search_path = ''
-- One generic plan per session, index probes whatever the batch's size (as jobs.claim)
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_held bigint[];
  v_rest bigint[];
  v_distributed boolean := jobs.distributed();
  v_rounds refcursor;  -- distributed: (buckets, ids) of the batch, a shard at a time
  v_buckets smallint[];   -- (null: one round for all)
  v_ids    bigint[];
begin
  if p_wait then
    return null;  -- every row: the update that follows waits for each row's lock
  end if;
  -- Only a row that runs under one of the claims given is locked: naming a job pins
  -- it only for a caller that knows its claim token, which is the job's holder. (Any
  -- claim of the batch, not the one paired with the id: a semi-join on the pairs was
  -- planned well but cost a third of the drain; the writes check the pairs.)
  -- Distributed, a shard at a time (jobs.ids_by_shard): Citus locks rows only in a
  -- statement it routes to one shard.
  if v_distributed then
    open v_rounds for select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b;
  end if;
  loop
    if v_distributed then
      fetch v_rounds into v_buckets, v_ids;
      exit when not found;
    end if;
    v_held := v_held || array(select j.id from jobs.job j
                               where j.id = any (coalesce(v_ids, p_ids))
                                 and (v_buckets is null or j.bucket = any (v_buckets))
                                 and j.claim = any (p_claims) and j.state = 'running'
                               order by j.id
                                 for no key update of j skip locked);
    exit when not v_distributed;
  end loop;
  if v_distributed then
    close v_rounds;
  end if;
  if pg_catalog.cardinality(v_held) = pg_catalog.cardinality(p_ids) then
    return null;  -- every row held (the common case): the writes need no filter
  end if;
  -- the rest that run under the claim given, as read without a lock: busy rows
  v_rest := array(select j.id from jobs.job j
                   where j.id = any (p_ids) and j.id <> all (v_held)
                     and j.claim = any (p_claims) and j.state = 'running');
  if v_rest = '{}' then  -- (ids named twice, or not under the claim given)
    return null;  -- every row the writes may change is held: they need no filter
  end if;
  v_held := v_held || jobs.lock_briefly(v_rest, v_distributed);
  -- Rows still busy: their settle keys, one per job and claim, committed with this
  -- answer, for the caller to hold (jobs.settle_hold) while it sends the outcome again.
  insert into jobs.lock_key (key, created_at)
  select jobs.settle_key(j.id, j.claim), pg_catalog.now()
    from jobs.job j
   where j.id = any (v_rest) and j.id <> all (v_held)
  on conflict (key) do nothing;
  return v_held;
end
$$;

comment on function jobs.lock_batch(bigint[], bigint[], boolean) is
  'Private: lock the rows of a settle batch that run under a claim given (a busy row waited for at most 50 ms and its settle key made, unless p_wait: all waited for); answers the ids held, null for all.';

-- jobs.settle_key(id, claim): the name of a job's settle key under one claim: a key
-- held under a claim the job no longer runs under keeps nothing from recovery.
create or replace function jobs.settle_key(p_id bigint, p_claim bigint)
returns text
language sql
immutable
set search_path = ''
as $$
  select 'settle|' || p_id || '|' || p_claim
$$;

comment on function jobs.settle_key(bigint, bigint) is
  'Private: the jobs.lock_key name of a job''s settle key under a claim.';

-- jobs.settle_waiting(id, claim): whether the job's outcome under this claim waits for
-- its busy row (its settle key, made by jobs.lock_batch, is held by another
-- transaction: jobs.settle_hold). Lease recovery leaves such a job.
create or replace function jobs.settle_waiting(p_id bigint, p_claim bigint)
returns boolean
language sql
volatile
set search_path = ''
as $$
  select exists (select from jobs.lock_key k where k.key = jobs.settle_key(p_id, p_claim))
     and not exists (select from jobs.lock_key k where k.key = jobs.settle_key(p_id, p_claim)
                        for key share skip locked)
$$;

comment on function jobs.settle_waiting(bigint, bigint) is
  'Private: whether another transaction holds this job''s settle key under this claim (lease recovery leaves it).';

-- ---------------------------------------------------------------------------
-- jobs.settle_hold(ids, claims) -> the ids whose settle keys this transaction now holds.
-- For jobs a batch settle (ack_many, nack_many, heartbeat_many) answered busy: their
-- outcomes wait for a row another transaction holds locked. Call it in a READ
-- COMMITTED transaction of its own, kept open until those outcomes are written (sent
-- again by the batch functions, on other connections), and again at least every few
-- seconds meanwhile: it sets idle_in_transaction_session_timeout to 10 s for the
-- transaction (unless lower), so that the keys of a holder that vanished go with it.
-- While it holds a job's settle key, lease recovery leaves the job, so a lease that
-- lapses meanwhile is not recovered the moment the row's lock is released. Fenced:
-- only a job still running under the claim given, whose key a busy answer under that
-- claim made, is held. Like the transaction that holds the row, it holds back vacuum.
-- Errors: invalid_argument (SJ001) as jobs.ack_many, and outside READ COMMITTED;
-- tenant_refused (SJ018).
-- ---------------------------------------------------------------------------
create or replace function jobs.settle_hold(p_ids bigint[], p_claims bigint[])
returns bigint[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_idle double precision := pg_catalog.date_part('epoch',
             pg_catalog.current_setting('idle_in_transaction_session_timeout')::interval);
  v_keys text[];
begin
  perform jobs.check_batch(p_ids, p_claims, null::text[]);
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
    -- a later call would not see the keys made since the transaction's snapshot
    perform jobs.raise_error('invalid_argument',
      'settle_hold runs in a READ COMMITTED transaction',
      pg_catalog.format('this transaction is %s', pg_catalog.current_setting('transaction_isolation')));
  end if;
  if v_idle = 0 or v_idle > 10 then
    perform pg_catalog.set_config('idle_in_transaction_session_timeout', '10s', true);
  end if;
  -- The keys first (a key names its claim, so one of a job no longer running under it
  -- keeps nothing from recovery), then the jobs, read once the keys are held: a
  -- recovery that held a key (key share) until it committed may have moved its job.
  v_keys := array(select k.key
                    from jobs.lock_key k
                   where k.key = any (array(select jobs.settle_key(u.id, u.claim)
                                              from unnest(p_ids, p_claims) as u(id, claim)))
                   order by k.key
                     for update of k);
  -- (the job rows are read, not locked: another transaction holds them)
  return array(select distinct j.id
                 from unnest(p_ids, p_claims) as u(id, claim)
                 join jobs.job j on j.id = u.id and j.claim = u.claim
                where j.state = 'running' and jobs.settle_key(u.id, u.claim) = any (v_keys)
                order by j.id);
end
$$;

comment on function jobs.settle_hold(bigint[], bigint[]) is
  'Hold the settle keys of running jobs whose outcomes or renewals wait for busy rows, until this transaction ends (lease recovery leaves them); answers the ids held.';

-- The rows a first pass could not lock, waited for at most 50 ms each; none when one
-- wait runs out (its lock is still held elsewhere: the rest answer busy, call again).
-- Distributed (p_distributed), a shard at a time, as jobs.lock_batch.
create or replace function jobs.lock_briefly(p_ids bigint[], p_distributed boolean)
returns bigint[]
language plpgsql
volatile
set search_path = ''
set lock_timeout = '50ms'
as $$
declare
  v_held   bigint[] := '{}';
  v_buckets smallint[];
  v_ids    bigint[];
begin
  if not p_distributed then
    return array(select j.id from jobs.job j where j.id = any (p_ids) order by j.id
                    for no key update of j);
  end if;
  for v_buckets, v_ids in select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b loop
    v_held := v_held || array(select j.id from jobs.job j
                               where j.bucket = any (v_buckets) and j.id = any (v_ids)
                               order by j.id
                                 for no key update of j);
  end loop;
  return v_held;
exception when lock_not_available then
  return '{}';
end
$$;

comment on function jobs.lock_briefly(bigint[], boolean) is
  'Private: lock these job rows, waiting at most 50 ms for each; none when a wait runs out.';

create or replace function jobs.unwritten_answer(p_id bigint, p_claim bigint)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  -- a row this batch held and whose fence held was written: one still running under
  -- the claim was one it could not lock
  return case when exists (select 1 from jobs.job j
                            where j.id = p_id and j.claim = p_claim and j.state = 'running')
              then null  -- busy: locked by another transaction, still this claim's
              else false end;
end
$$;

comment on function jobs.unwritten_answer(bigint, bigint) is
  'Private: a batch settle''s ok for a job it did not write: false fence failed, null busy (call again).';

-- ---------------------------------------------------------------------------
-- jobs.ack_many(ids, claims, results) -> (id, ok) per input, in input order.
-- running -> succeeded, storing the result (jsonb; null allowed). results may be
-- null (no results at all). An earlier attempt's last_error is kept, marked
-- {"historical": true}. ok = false: the fence did not hold, nothing changed; ok = null:
-- the row was busy (locked by another transaction), nothing changed, call again.
-- ---------------------------------------------------------------------------
-- jobs.ack_rows(ids, claims, results, locked, now) -> (done, claims, watched): the write
-- of jobs.ack_batch: every job named that runs under its claim (and, when locked is not
-- null, is among the locked) succeeds with its result; answers those jobs, the claim
-- each ran under, and the watched among them. Distributed (jobs.distributed()), a
-- shard at a time.
create or replace function jobs.ack_rows(
  p_ids     bigint[],
  p_claims  bigint[],
  p_results jsonb[],
  p_locked  bigint[],
  p_now     timestamptz,
  out done    bigint[],
  out claims  bigint[],
  out watched bigint[]
)
language plpgsql
volatile
set search_path = ''
-- One generic plan per session (planning the update was most of a one-job ack), kept
-- to index probes whatever the batch's size: no sequential or bitmap scans, no JIT
-- (as jobs.claim, sql/30_claim.sql).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_held    bigint[];  -- the jobs that held limit slots
  v_follows bigint[];  -- the jobs with hooks or a parent
  v_buckets smallint[];  -- distributed: this round's shard (null: one round for all)
begin
  -- One round, or, distributed, one per shard of the batch (jobs.ids_by_shard): Citus
  -- then sends each update to one shard, not every update to every shard. (The round's
  -- buckets are named behind jobs.distributed(), which is immutable: on one
  -- PostgreSQL the planner drops the condition, which otherwise cost a one-job ack a
  -- quarter of its time there.)
  for v_buckets in select null::smallint[] where not jobs.distributed()
                   union all
                   select b.buckets from jobs.ids_by_shard(p_ids) b where jobs.distributed() loop
    with input as (
      select u.id, u.claim, u.result
        from unnest(p_ids, p_claims,
                    coalesce(p_results, pg_catalog.array_fill(null::jsonb, array[pg_catalog.cardinality(p_ids)])))
             as u(id, claim, result)
    ),
    settled as (
      update jobs.job as j
         set state = 'succeeded',
             result = i.result,
             finished_at = p_now,
             lease_expires_at = null,
             -- an earlier attempt's error stays for the record, marked as history
             last_error = case when j.last_error is not null
                               then j.last_error || '{"historical": true}' end
        from (select input.id, input.claim, input.result from input order by input.id) as i
       where j.id = i.id and j.claim = i.claim and j.state = 'running'
         and (p_locked is null or j.id = any (p_locked))
         and (not jobs.distributed() or j.bucket = any (v_buckets))
      returning j.id, j.claim, j.settle_watched, j.slots is not null as held,
                j.hooks is not null or j.parent_id is not null as follows
    )
    -- (each round's answers after the rounds before: null || a = a)
    select done || pg_catalog.array_agg(settled.id),
           claims || pg_catalog.array_agg(settled.claim),
           watched || pg_catalog.array_agg(settled.id) filter (where settled.settle_watched),
           v_held || pg_catalog.array_agg(settled.id) filter (where settled.held),
           v_follows || pg_catalog.array_agg(settled.id) filter (where settled.follows)
      into done, claims, watched, v_held, v_follows
      from settled;
  end loop;
  -- they left running, for good (sql/35_limits.sql, sql/42_hooks.sql)
  perform jobs.release_slots(v_held);
  perform jobs.job_final(v_follows);
end
$$;

comment on function jobs.ack_rows(bigint[], bigint[], jsonb[], bigint[], timestamp with time zone) is
  'Private: the write of jobs.ack_batch.';

create or replace function jobs.ack_batch(
  p_ids     bigint[],
  p_claims  bigint[],
  p_results jsonb[],
  p_wait    boolean
)
returns table (id bigint, ok boolean)
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
  v_now     timestamptz := jobs.now();
  v_timeout text := pg_catalog.current_setting('lock_timeout');
  v_locked  bigint[];
  v_rows    record;  -- jobs.ack_rows' answer
  v_written boolean := false;
begin
  perform jobs.check_batch(p_ids, p_claims, p_results);
  perform jobs.check_values(p_results, 'result');
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  -- Busy rows (above) without a pass of their own: the write itself waits at most 50 ms
  -- for a lock (its triggers' too: a fan-in child's parent row), in a subtransaction
  -- (jobs.subtransaction_allowed); a lock still held then undoes it, and the batch
  -- takes jobs.lock_batch's way. Locking every row first cost a tenth of the drain's
  -- SQL time (docs/design/engine-hot-path.md, "Acks without a lock pass").
  if not p_wait and jobs.subtransaction_allowed() then
    begin
      perform pg_catalog.set_config('lock_timeout', '50ms', true);
      v_rows := jobs.ack_rows(p_ids, p_claims, p_results, null, v_now);
      perform pg_catalog.set_config('lock_timeout', v_timeout, true);
      v_written := true;
    exception when lock_not_available then
      null;  -- (the write and the setting are undone with the subtransaction)
    end;
  end if;
  if not v_written then
    v_locked := jobs.lock_batch(p_ids, p_claims, p_wait);
    v_rows := jobs.ack_rows(p_ids, p_claims, p_results, v_locked, v_now);
  end if;
  -- NOTIFY result waiters of watched jobs only (once per call).
  perform jobs.notify_settled(v_rows.watched);
  return query  -- per input: a job named twice is answered under each claim given
    select u.id, case when (u.id, u.claim) in (select d.id, d.claim  -- (a hashed subplan)
                                                  from unnest(v_rows.done, v_rows.claims) as d(id, claim))
                      then true else jobs.unwritten_answer(u.id, u.claim) end
      from unnest(p_ids, p_claims) with ordinality as u(id, claim, ord)
     order by u.ord;
end
$$;

comment on function jobs.ack_batch(bigint[], bigint[], jsonb[], boolean) is
  'Private: jobs.ack_many (busy rows skipped) and jobs.ack (busy rows waited for).';

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
begin
  return query select a.id, a.ok from jobs.ack_batch(p_ids, p_claims, p_results, false) a;
end
$$;

comment on function jobs.ack_many(bigint[], bigint[], jsonb[]) is
  'Settle running jobs as succeeded with their results; fenced per job, answers ok per job (null: busy, call again).';

-- jobs.ack(id, claim, result): one job; raises lease_lost (SJ004) when the fence fails.
create or replace function jobs.ack(p_id bigint, p_claim bigint, p_result jsonb default null)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if not (select a.ok from jobs.ack_batch(array[p_id], array[p_claim], array[p_result], true) a) then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.record_unwinds(ids, ordinals, states, errors): store the 'sqljobs.unwind' step of
-- each job that starts unwinding its saga (docs/design/sagas.md): the final state it
-- will settle in once its compensations ran, and why. The caller moves the job itself
-- (compensating = true, step_seq to the ordinal). A recorded unwind is kept as is.
-- ---------------------------------------------------------------------------
create or replace function jobs.record_unwinds(p_ids bigint[], p_ordinals integer[],
                                               p_states jobs.job_state[], p_errors jsonb[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
  select u.id, 'sqljobs.unwind', u.ordinal, 'unwind',
         pg_catalog.jsonb_build_object('state', u.state, 'error', u.error), jobs.now(),
         u.id & 255
    from unnest(p_ids, p_ordinals, p_states, p_errors) as u(id, ordinal, state, error)
  on conflict do nothing;
end
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
create or replace function jobs.nack_batch(
  p_ids      bigint[],
  p_claims   bigint[],
  p_errors   jsonb[],
  p_modes    text[],
  p_delays_s double precision[],
  p_wait     boolean
)
returns table (id bigint, ok boolean, state jobs.job_state)
language plpgsql
volatile
set search_path = ''
-- One generic plan per session, kept to index probes (as jobs.ack_batch)
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now     timestamptz := jobs.now();
  v_locked  bigint[];
  v_n       integer;
  v_bad     text;
  v_done    bigint[];
  v_claims  bigint[];  -- the claim each done job was settled under
  v_states  jobs.job_state[];
  v_watched bigint[];
  v_held    bigint[];  -- the jobs that held limit slots
  v_follows bigint[];  -- the jobs with hooks or a parent, settled for good
  v_unwinds bigint[];  -- the jobs that start unwinding (sagas), with for each
  v_seqs    integer[];          -- its step_seq,
  v_finals  jobs.job_state[];   -- the final state it will settle in,
  v_errors  jsonb[];            -- and the error
  v_distributed boolean := jobs.distributed();
  v_rounds  refcursor;  -- distributed: (buckets, ids) of the batch, a shard at a time
  v_buckets smallint[];   -- (null: one round for all)
  v_ids     bigint[];
  v_round   record;     -- a round's answers
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

  v_locked := jobs.lock_batch(p_ids, p_claims, p_wait);
  -- WRITE: one round, or, distributed, one per shard of the batch (jobs.ids_by_shard):
  -- Citus locks rows only in a statement it routes to one shard.
  if v_distributed then
    open v_rounds for select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b;
  end if;
  loop
    if v_distributed then
      fetch v_rounds into v_buckets, v_ids;
      exit when not found;
    end if;
    with input as (
        select u.id, u.claim, u.error, coalesce(u.mode, 'retry') as mode, u.delay_s, u.ord
          from unnest(
                 p_ids, p_claims,
                 coalesce(p_errors, pg_catalog.array_fill(null::jsonb, array[v_n])),
                 coalesce(p_modes, pg_catalog.array_fill(null::text, array[v_n])),
                 coalesce(p_delays_s, pg_catalog.array_fill(null::double precision, array[v_n])))
               with ordinality as u(id, claim, error, mode, delay_s, ord)
         where v_ids is null or u.id = any (v_ids)
      ),
      target as (
        select j.id, i.error, i.mode, i.delay_s, j.attempt, n.next_state, e.stored_error,
               n.next_state in ('failed', 'dead') and j.compensable and not j.compensating
                 as unwinds,
               -- the history: an attempt that failed, ended for good or was interrupted
               -- (made here, not in the update: Citus sends no update to a shard whose
               -- SET calls a stable function on the row's columns)
               case when i.mode in ('retry', 'fail', 'interrupt') then
                 jobs.attempts_push(j.attempts, pg_catalog.jsonb_build_object(
                   'attempt', j.attempt, 'claim', j.claim >> 32, 'worker', j.worker,
                   'started_at', j.started_at, 'ended_at', v_now,
                   'outcome', case when i.mode = 'interrupt' then 'interrupted'
                                   when n.next_state = 'ready' then 'retry'
                                   else n.next_state::text end,
                   'error', e.stored_error))
                 else j.attempts end as attempts,
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
                          and (v_locked is null or j.id = any (v_locked))
                          and (v_buckets is null or j.bucket = any (v_buckets))
         cross join lateral (select case
                                      when i.mode = 'fail' then 'failed'
                                      when i.mode = 'park' then 'parked'
                                      when i.mode = 'shed' then 'ready'
                                      when i.mode = 'interrupt' then 'interrupted'
                                      else jobs.retry_state(j.attempt, j.max_attempts, j.dead_letter)
                                    end::jobs.job_state as next_state) n
         -- what last_error (and the attempt history) store: the error as an object, plus
         -- the attempt that ended and when (null: no error given)
         cross join lateral (select case when i.error is not null then
                                      case when pg_catalog.jsonb_typeof(i.error) = 'object'
                                           then i.error
                                           else pg_catalog.jsonb_build_object('message', i.error) end
                                      || pg_catalog.jsonb_build_object('attempt', j.attempt,
                                                                       'at', v_now)
                                    end as stored_error) e
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
               attempts = t.attempts
          from target t
         where j.id = t.id and (v_buckets is null or j.bucket = any (v_buckets))
        returning j.id, j.claim, j.state, j.settle_watched, t.unwinds, j.step_seq, t.next_state,
                  t.error, j.slots is not null and not t.unwinds as held,
                  (j.hooks is not null or j.parent_id is not null)
                    and j.state in ('failed', 'dead') as follows
      )
    select pg_catalog.array_agg(done.id) as done, pg_catalog.array_agg(done.claim) as claims,
           pg_catalog.array_agg(done.state) as states,
           pg_catalog.array_agg(done.id) filter (
             where done.settle_watched and done.state in ('failed', 'dead')) as watched,
           pg_catalog.array_agg(done.id) filter (where done.held) as held,
           pg_catalog.array_agg(done.id) filter (where done.follows) as follows,
           pg_catalog.array_agg(done.id) filter (where done.unwinds) as unwinds,
           pg_catalog.array_agg(done.step_seq) filter (where done.unwinds) as seqs,
           pg_catalog.array_agg(done.next_state) filter (where done.unwinds) as finals,
           pg_catalog.array_agg(done.error) filter (where done.unwinds) as errors
      into v_round
      from done;
    v_done := v_done || v_round.done;
    v_claims := v_claims || v_round.claims;
    v_states := v_states || v_round.states;
    v_watched := v_watched || v_round.watched;
    v_held := v_held || v_round.held;
    v_follows := v_follows || v_round.follows;
    v_unwinds := v_unwinds || v_round.unwinds;
    v_seqs := v_seqs || v_round.seqs;
    v_finals := v_finals || v_round.finals;
    v_errors := v_errors || v_round.errors;
    exit when not v_distributed;
  end loop;
  if v_distributed then
    close v_rounds;
  end if;
  -- record the final state of each job that starts unwinding (sagas, above)
  if v_unwinds is not null then
    perform jobs.record_unwinds(v_unwinds, v_seqs, v_finals, v_errors);
  end if;
  -- those that left running free their slots; those settled for good set off their
  -- hooks and parents (sql/35_limits.sql, sql/42_hooks.sql)
  perform jobs.release_slots(v_held);
  perform jobs.job_final(v_follows);
  -- NOTIFY result waiters of watched jobs that reached a final state (once per call).
  perform jobs.notify_settled(v_watched);
  return query
    select u.id, case when d.id is not null then true
                      else jobs.unwritten_answer(u.id, u.claim) end, d.state
      from unnest(p_ids, p_claims) with ordinality as u(id, claim, ord)
      left join unnest(v_done, v_claims, v_states) as d(id, claim, state)
             on d.id = u.id and d.claim = u.claim
     order by u.ord;
end
$$;

comment on function jobs.nack_batch(bigint[], bigint[], jsonb[], text[], double precision[], boolean) is
  'Private: jobs.nack_many (busy rows skipped) and jobs.nack (busy rows waited for).';

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
begin
  return query select n.id, n.ok, n.state
                 from jobs.nack_batch(p_ids, p_claims, p_errors, p_modes, p_delays_s, false) n;
end
$$;

comment on function jobs.nack_many(bigint[], bigint[], jsonb[], text[], double precision[]) is
  'Settle running jobs that did not succeed (retry, fail, park, shed, interrupt); fenced per job (ok null: busy, call again).';

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
    from jobs.nack_batch(array[p_id], array[p_claim], array[p_error], array[p_mode],
                         array[p_delay_s], true) n;
  if not v_ok then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
  return v_state;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.heartbeat_many(ids, claims, lease_s) -> (id, ok): extend each held lease to
-- now + lease_s. ok = false: the job is no longer this claim's (lost, cancelled); the
-- worker must stop that run. ok = null: the row was busy (another transaction holds it
-- locked), its lease was not extended this time: call again soon.
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
-- One generic plan per session, kept to index probes (as jobs.ack_batch)
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now    timestamptz := jobs.now();
  v_locked bigint[];
begin
  perform jobs.check_batch(p_ids, p_claims, null::text[]);
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  -- NaN and leases past the end of time (now + lease overflows) are refused too
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive and at most 1e9 seconds, got %s', p_lease_s));
  end if;
  v_locked := jobs.lock_batch(p_ids, p_claims, false);  -- a busy row answers null (above)
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
         and (v_locked is null or j.id = any (v_locked))
      returning j.id, j.claim
    )
    select input.id, case when held.id is not null then true
                          else jobs.unwritten_answer(input.id, input.claim) end
      from input left join held on held.id = input.id and held.claim = input.claim
     order by input.ord;
end
$$;

comment on function jobs.heartbeat(bigint, bigint, double precision) is
  'Extend one lease; false when the job is no longer held under this claim, null when its row was busy.';

-- ---------------------------------------------------------------------------
-- jobs.fence_run(id, claim): the writes a handler makes inside its run (an enqueue, an
-- event) go through only while that run holds its job. The Python client sends it first
-- in the same transaction as such a write: the job's row is then held (for share) until
-- that transaction ends, so a cancel either waits for it or refuses it. It also sets
-- the transaction-local setting jobs.run_actor to the job's actor (jobs.run_actor()):
-- what the transaction then enqueues, stages or emits naming no actor takes it.
-- Errors: lease_lost (SJ004) when the job no longer runs under p_claim (cancelled, its
-- lease lost and taken over, or handed back by a drain); tenant_refused (SJ018).
-- ---------------------------------------------------------------------------
create or replace function jobs.fence_run(p_id bigint, p_claim bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_actor jsonb;
begin
  perform jobs.check_tenant(array[p_id]);
  select j.actor into v_actor from jobs.job j
    where j.id = p_id and j.claim = p_claim and j.state = 'running'
      and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)  -- (its shard)
      for share of j;
  if not found then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('job %s: the run that makes this write was stopped', p_id),
      'cancelled, its lease lost, or handed back by a drain: nothing of it is written',
      'a stopped run writes nothing');
  end if;
  perform pg_catalog.set_config('jobs.run_actor', coalesce(v_actor::text, ''), true);
end
$$;

comment on function jobs.fence_run(bigint, bigint) is
  'Refuse (SJ004) a write made inside a run whose job it no longer holds; holds the row until commit.';

-- === sql/42_hooks.sql ===

create or replace function jobs.stage_hooks(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_specs jsonb;
begin
  select pg_catalog.jsonb_agg(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
           'name', j.hooks->h.hook->>'name',
           'queue', j.hooks->h.hook->>'queue',
           'tenant', j.tenant,
           'actor', j.actor,
           'key', pg_catalog.format('%s:%s:%s', j.id, h.hook,
                                    pg_catalog.to_char(j.finished_at at time zone 'UTC',
                                                       'YYYYMMDD"T"HH24MISS.US')),
           'payload', pg_catalog.jsonb_build_object(
             'job_id', j.id, 'name', j.name, 'state', j.state, 'attempt', j.attempt,
             'error', case when j.state = 'succeeded' then null else j.last_error end)))
           order by j.id, h.ord)
    into v_specs
    from jobs.job j
   cross join lateral unnest(array['settled', 'exhausted']) with ordinality as h(hook, ord)
   where j.id = any (p_ids) and j.hooks ? h.hook
     and (h.hook = 'settled'
          or j.state = 'dead' or (j.state = 'failed' and j.attempt >= j.max_attempts));
  if v_specs is not null then
    perform from jobs.enqueue_many(v_specs);
  end if;
end
$$;

comment on function jobs.stage_hooks(bigint[]) is
  'Private: stage the settlement hooks of jobs that just reached a final state.';

-- jobs.job_final(ids): what jobs that just reached a final state set off: their hooks'
-- jobs, and their parked parents' wake-up (sql/50_steps.sql). Every statement that
-- settles a job for good calls it (ack, nack, lease recovery, cancel, a saga's last
-- settle) with those of its jobs that have hooks or a parent; a call, not a trigger, as
-- jobs.release_slots (sql/35_limits.sql). Private.
create or replace function jobs.job_final(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if p_ids is null then
    return;
  end if;
  perform jobs.stage_hooks(p_ids);
  perform jobs.wake_parents(array(select j.parent_id from jobs.job j
                                   where j.id = any (p_ids) and j.parent_id is not null));
end
$$;

comment on function jobs.job_final(bigint[]) is
  'Private: stage the hooks and wake the parents of jobs that just reached a final state.';

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
  -- each queue and name is bounded as everywhere: the registry is read back by the
  -- fleet-wide reads (jobs.declared_queues, so the gauges, the metrics and the
  -- dashboard), which a null or oversized queue name stored here would break for all
  perform jobs.check_name(q, 'a queue of queues') from pg_catalog.unnest(p_queues) as q;
  perform jobs.check_name(n, 'a name of names') from pg_catalog.unnest(p_names) as n;
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
  -- the running jobs counted once, per worker: one pass over job_lease_idx, not one per
  -- worker (and no subquery joining the workers' table to the jobs', which Citus
  -- cannot plan with the jobs distributed: docs/design/citus.md; materialized, so that
  -- Citus reads it on its own before the join)
  with running as materialized (
    select j.worker, pg_catalog.count(*) as n
      from jobs.job j
     where j.state = 'running' and j.lease_expires_at is not null  -- job_lease_idx
     group by j.worker
  )
  select w.id, w.started_at, w.heartbeat_at, w.expires_at, w.queues, w.names,
         w.concurrency, w.host, w.pid, coalesce(r.n, 0) as running
    from jobs.worker w
    left join running r on r.worker = w.id
   where w.expires_at > jobs.now()
   order by w.started_at, w.id
$$;

-- ---------------------------------------------------------------------------
-- jobs.unserved_jobs() -> (queue, name, waiting, oldest_s) for waiting jobs (ready or
-- interrupted) that NO live worker can run: no live worker serves both the job's queue
-- and its name. During a rolling deploy these are the jobs that only newer workers
-- know; they wait rather than fail.
-- Read-only; takes no locks. Reads the waiting rows only, through job_claimable_idx and
-- job_blocked_idx: its filter names both indexes' predicates, since a filter on the state
-- alone matches neither and had every dashboard refresh read the whole table.
-- ---------------------------------------------------------------------------
create or replace function jobs.unserved_jobs()
returns table (queue text, name text, waiting bigint, oldest_s double precision)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.unserved_jobs');  -- (sql/15_tenancy.sql)
  -- (the waiting jobs counted per queue and name first, then the groups no live worker
  -- serves kept: distributed, Citus plans no join of the workers' table to the jobs')
  with waiting as materialized (
    select j.queue, j.name, pg_catalog.count(*) as n, pg_catalog.min(j.created_at) as oldest
      from jobs.job j
     where ((j.state in ('ready', 'interrupted') and j.blocked_on is null)
            or (j.blocked_on is not null and j.state in ('ready', 'interrupted')))
     group by j.queue, j.name
  )
  select g.queue, g.name, g.n as waiting,
         extract(epoch from jobs.now() - g.oldest)::double precision as oldest_s
    from waiting g
   where not exists (select 1 from jobs.worker w
                      where w.expires_at > jobs.now()
                        and g.queue = any (w.queues)
                        and g.name = any (w.names))
   order by g.queue, g.name
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
  v_lease  timestamptz;  -- the renewed lease (null: kept)
begin
  if p_lease_s is not null and not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive and at most 1e9 seconds, got %s', p_lease_s));
  end if;
  -- (The lease is reckoned here, not in the update: Citus sends no update to a shard
  -- that calls a non-immutable function in a CASE or COALESCE. Distributed, the update
  -- names the job's bucket, its id & 255, so that Citus routes it to one shard.)
  if p_lease_s is not null then
    v_lease := jobs.now() + pg_catalog.make_interval(secs => p_lease_s);
  end if;
  update jobs.job as j
     set step_seq = j.step_seq + 1,
         lease_expires_at = coalesce(v_lease, j.lease_expires_at)
   where j.id = p_id and j.claim = p_claim and j.state = 'running'
     and (v_tenant is null or j.tenant = v_tenant)
     and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
  returning j.step_seq into v_seq;
  if v_seq is null then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
  return v_seq;
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
--          `name` ran: it is stored as step 'sqljobs.undo:<name>' (kind undo);
--          {"patch": true} the value is a patch marker's answer (ctx.patched): stored
--          as step 'sqljobs.patch:<name>' (kind run).
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
                 where o.key not in ('compensable', 'undo', 'patch')
                    or pg_catalog.jsonb_typeof(o.value) <> 'boolean') then
    perform jobs.raise_error('invalid_argument',
      'options takes only {"compensable": boolean, "undo": boolean, "patch": boolean}');
  end if;
  v_name := case when (p_options->>'undo')::boolean then 'sqljobs.undo:' || p_name
                 when (p_options->>'patch')::boolean then 'sqljobs.patch:' || p_name
                 else p_name end;
  -- FENCE (locks the job row)
  v_seq := jobs.hold_step(p_id, p_claim, p_lease_s);
  -- WRITE, first write wins
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
  values (p_id, v_name, v_seq,
          case when (p_options->>'undo')::boolean then 'undo' else 'run' end,
          p_value, jobs.now(), p_id & 255)
  on conflict do nothing
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
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
  values (p_id, p_name, v_seq, 'sleep',
          pg_catalog.jsonb_build_object('until',
            coalesce(p_until, v_now + pg_catalog.make_interval(secs => p_delay_s))),
          v_now, p_id & 255)
  on conflict do nothing;
  select (s.value->>'until')::timestamptz into v_wake
    from jobs.step s where s.job_id = p_id and s.name = p_name and s.kind = 'sleep';
  if v_wake is null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('step %s of job %s is stored, but not as a sleep', p_name, p_id));
  end if;
  -- PARK while the time is ahead.
  if v_wake > v_now then
    perform jobs.nack_batch(array[p_id], array[p_claim], null, array['park'],
                            array[extract(epoch from v_wake - v_now)::double precision], true);
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
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return query
    select s.name, s.ordinal, s.kind, s.value, s.created_at
      from jobs.step s where s.job_id = p_id order by s.ordinal;
end
$$;

-- jobs.wake_parents(ids): parked parents whose child reached a final state or was
-- removed become ready, and their queues are notified (jobs.wake) so a worker claims
-- them at once. Called by jobs.job_final (sql/42_hooks.sql) and by jobs.apply_remove:
-- only child jobs pay that notifying commit. Private.
create or replace function jobs.wake_parents(p_ids bigint[])
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
  with woken as (
    update jobs.job as p
       set state = 'ready', run_at = jobs.now()
     where p.id = any (p_ids) and p.state = 'parked'
    returning p.queue
  )
  select pg_catalog.array_agg(distinct woken.queue) into v_queues from woken;
  if v_queues is not null then
    perform jobs.wake(v_queues);
  end if;
end
$$;

comment on function jobs.wake_parents(bigint[]) is
  'Private: make the parked parents of settled or removed children ready.';

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
-- A child is of its parent's tenant, and of its parent's actor unless its spec names
-- one (an explicit actor wins: it is the caller's word, not authentication).
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
  v_actor   jsonb;   -- the parent's actor: its children's unless a spec names one
  v_ord     bigint;
  v_stored  jsonb;   -- the steps stored, {name: value}
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
  select j.tenant, j.actor into v_tenant, v_actor from jobs.job j where j.id = p_id;
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
                              || case when v_actor is null
                                        or pg_catalog.jsonb_typeof(
                                             p_specs->(u.ord::integer - 1)->'actor') <> 'null'
                                      then '{}'::jsonb
                                      else pg_catalog.jsonb_build_object('actor', v_actor) end
                              order by u.ord)
    into v_pending, v_specs
    from pg_catalog.unnest(p_names) with ordinality as u(n, ord)
   -- (the steps stored read first, as an array: distributed, Citus plans no subquery
   -- per name over the steps)
   where u.n <> all (array(select s.name from jobs.step s
                            where s.job_id = p_id and s.name = any (p_names)));
  if v_pending is not null then
    v_ids := array(select x.id from jobs.enqueue_many(v_specs) x order by x.ord);
    update jobs.job as c
       set parent_id = p_id, parent_step = m.n
      from unnest(v_pending, v_ids) as m(n, cid)
     where c.id = m.cid and c.parent_id is null;
    -- STORE the outcome of every child already final.
    insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
    select p_id, m.n, v_seq, 'child',
           pg_catalog.jsonb_build_object('job_id', c.id, 'state', c.state, 'result', c.result,
                                         'error', c.last_error),
           v_now, p_id & 255
      from unnest(v_pending, v_ids) as m(n, cid)
      join jobs.job c on c.id = m.cid
     where c.state in ('succeeded', 'failed', 'dead', 'cancelled')
    on conflict do nothing;
    v_live := exists (select 1 from pg_catalog.unnest(v_ids) as m(cid)
                        join jobs.job c on c.id = m.cid
                       where c.state not in ('succeeded', 'failed', 'dead', 'cancelled'));
  end if;

  -- PARK while any child is live.
  if v_live then
    perform jobs.nack_batch(array[p_id], array[p_claim], null, array['park'], null, true);
  end if;
  -- (the steps read first, as a map: distributed, they are on a shard)
  v_stored := (select pg_catalog.jsonb_object_agg(s.name, s.value) from jobs.step s
                where s.job_id = p_id and s.name = any (p_names));
  return query
    select u.n, v_stored->u.n, coalesce((v_stored->u.n->>'job_id')::bigint, m.cid), v_live
      from pg_catalog.unnest(p_names) with ordinality as u(n, ord)
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
  v_held    boolean;  -- it held limit slots
  v_follows boolean;  -- it has hooks or a parent
  v_now     timestamptz := jobs.now();
  v_error   jsonb;    -- the unwind's error, marked compensated
begin
  perform jobs.hold_step(p_id, p_claim, null);
  select s.value into v_unwind from jobs.step s where s.job_id = p_id and s.name = 'sqljobs.unwind';
  if v_unwind is null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('job %s is not unwinding', p_id));
  end if;
  -- (made first: Citus plans no CASE or COALESCE that calls a function in an update)
  if pg_catalog.jsonb_typeof(v_unwind->'error') = 'object' then
    v_error := (v_unwind->'error') || pg_catalog.jsonb_build_object('compensated', true,
                                                                    'at', v_now);
  end if;
  update jobs.job as j
     set state = (v_unwind->>'state')::jobs.job_state,
         compensating = false,
         finished_at = v_now,
         lease_expires_at = null,
         last_error = coalesce(v_error, j.last_error)
   where j.id = p_id and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
  returning j.state, j.settle_watched, j.slots is not null,
            j.hooks is not null or j.parent_id is not null
    into v_state, v_watched, v_held, v_follows;
  -- it left running, for good: its slots go, its hooks and its parent follow
  if v_held then
    perform jobs.release_slots(array[p_id]);
  end if;
  if v_follows then
    perform jobs.job_final(array[p_id]);
  end if;
  -- a result waiter hears of the end of the unwind; nobody else is notified (40_settle)
  if v_watched then
    perform jobs.notify_settled(array[p_id]);
  end if;
  return v_state;
end
$$;

-- === sql/55_fork.sql ===

-- ---------------------------------------------------------------------------
-- jobs.fork(id, from_step) -> the new job's id.
--
-- A new job with the original's name, payload, queue, priority, tenant, actor, retry policy
-- and flow-control fields, whose stored history is the original's steps written before
-- `from_step` (with their order, patch markers included; a saga's unwind and undo
-- records are not copied): its first run replays those and runs `from_step` and every
-- step after it again. Its key is '<original key>:fork:<n>' (n unique); it starts ready now,
-- at attempt 0. The original is left as it was; jobs.job_fork records where the fork
-- came from. A bound session forks its own tenant's jobs only.
-- Errors: job_not_found (SJ006); job_running (SJ009) while a worker runs the original;
-- step_not_found (SJ021) for a step its history does not have (or a runtime record);
-- job_live (SJ008) when the original is a singleton whose group has a live job.
-- Locks: the original's row (for share), then the new row's insert.
-- ---------------------------------------------------------------------------
create or replace function jobs.fork(p_id bigint, p_from_step text)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_job      record;
  v_ordinal  integer;
  v_spec     jsonb;
  v_new      bigint;
  v_outcome  text;
  v_copied   integer;
begin
  if p_from_step is null or p_from_step = '' then
    perform jobs.raise_error('invalid_argument', 'fork needs the name of the step to fork from');
  end if;
  select j.id, j.state, j.name, j.key, j.payload, j.queue, j.tenant, j.priority,
         j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.dead_letter,
         j.timeout_s, j.group_key, j.singleton, j.throttle_n, j.throttle_per_s, j.compensable,
         j.actor
    into v_job from jobs.job j
   where j.id = p_id and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
     for share;
  if not found then
    perform jobs.raise_error('job_not_found', pg_catalog.format('no job has id %s', p_id));
  end if;
  perform jobs.check_tenant(array[p_id]);
  if v_job.state = 'running' then
    perform jobs.raise_error('job_running',
      pg_catalog.format('cannot fork job %s: a worker is running it', p_id),
      null, 'wait for the run to end (or cancel it), then fork');
  end if;
  select s.ordinal into v_ordinal from jobs.step s
   where s.job_id = p_id and s.name = p_from_step and not pg_catalog.starts_with(s.name, 'sqljobs.');
  if v_ordinal is null then
    perform jobs.raise_error('step_not_found',
      pg_catalog.format('job %s has no stored step %L', p_id, p_from_step),
      (select 'its steps: ' || coalesce(pg_catalog.string_agg(pg_catalog.quote_literal(s.name), ', '
                                                               order by s.ordinal), 'none')
         from jobs.step s where s.job_id = p_id and not pg_catalog.starts_with(s.name, 'sqljobs.')),
      'name a step the job stored (sqljobs jobs show shows them)');
  end if;

  v_new := pg_catalog.nextval('jobs.job_id_seq'::regclass);  -- the key's unique suffix
  v_spec := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
    'name', v_job.name, 'key', pg_catalog.left(v_job.key, 900) || ':fork:' || v_new,
    'payload', v_job.payload, 'queue', v_job.queue, 'tenant', v_job.tenant,
    'priority', v_job.priority, 'max_attempts', v_job.max_attempts,
    'retry_base_s', v_job.retry_base_s, 'retry_cap_s', v_job.retry_cap_s,
    'retry_jitter', v_job.retry_jitter, 'dead_letter', v_job.dead_letter,
    'timeout_s', v_job.timeout_s, 'group_key', v_job.group_key,
    'singleton', v_job.singleton, 'throttle_n', v_job.throttle_n,
    'throttle_per_s', v_job.throttle_per_s, 'actor', v_job.actor));
  select e.id, e.outcome into v_new, v_outcome from jobs.enqueue_many(pg_catalog.jsonb_build_array(v_spec)) e;
  if v_outcome <> 'created' then
    perform jobs.raise_error('job_live',
      pg_catalog.format('cannot fork job %s: its singleton group has a live job (%s)', p_id, v_new),
      null, 'wait for that job to finish, then fork');
  end if;

  insert into jobs.step (job_id, name, ordinal, kind, value, event_id, created_at, bucket)
  select v_new, s.name, s.ordinal, s.kind, s.value, s.event_id, s.created_at, v_new & 255
    from jobs.step s
   where s.job_id = p_id and s.ordinal < v_ordinal
     and not pg_catalog.starts_with(s.name, 'sqljobs.undo:') and s.name <> 'sqljobs.unwind';
  get diagnostics v_copied = row_count;
  update jobs.job as j
     set step_seq = v_ordinal - 1,
         compensable = v_job.compensable and v_copied > 0
   where j.id = v_new;
  insert into jobs.job_fork (job_id, forked_from, from_step, forked_at, forked_by)
  values (v_new, p_id, p_from_step, jobs.now(), session_user);
  return v_new;
end
$$;

comment on function jobs.fork(bigint, text) is
  'A new job replaying the original''s steps before from_step and running the rest; answers its id.';

-- jobs.job_forked_from(id) -> where a forked job came from (no row: not a fork).
create or replace function jobs.job_forked_from(p_id bigint)
returns table (forked_from bigint, from_step text, forked_at timestamptz, forked_by text)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return query select f.forked_from, f.from_step, f.forked_at, f.forked_by
                 from jobs.job_fork f where f.job_id = p_id;
end
$$;

comment on function jobs.job_forked_from(bigint) is
  'The original job and step a forked job was made from; no row when it is not a fork.';

-- === sql/60_events.sql ===

-- ---------------------------------------------------------------------------
-- jobs.emit_event_v2(name, payload, options) -> the event's id.
-- Records the event and makes every parked job with a matching open wait ready now
-- (notifying its queue's workers on jobs_wake, once per queue).
-- options: {"actor": ...} who emitted it (jobs.actor_problem's rules; the caller's
-- word, not authentication), stored with the event; none: the actor of the run this
-- transaction writes for (jobs.run_actor(), set by jobs.fence_run), if any.
-- Errors: invalid_argument (SJ001) for a missing name, a payload that is not an object
-- or an unknown option; invalid_actor (SJ023); payload_too_large (SJ002).
-- ---------------------------------------------------------------------------
create or replace function jobs.emit_event_v2(p_name text, p_payload jsonb default '{}',
                                              p_options jsonb default '{}')
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_id     bigint;
  v_queues text[];
  v_tenant text := jobs.bound_tenant();  -- wakes only this tenant's waiters (null: all)
  v_actor  jsonb;
begin
  -- GUARD
  perform jobs.check_name(p_name, 'an event name');
  if p_payload is null or pg_catalog.jsonb_typeof(p_payload) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'an event payload must be a JSON object');
  end if;
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object'
     or p_options - 'actor' <> '{}' then
    perform jobs.raise_error('invalid_argument', 'options takes only {"actor": ...}');
  end if;
  if jobs.actor_problem(p_options->'actor') is not null then
    perform jobs.raise_error('invalid_actor', jobs.actor_problem(p_options->'actor'), null,
      'pass a user or service id: a string, or a small object such as {"user": "42"}');
  end if;
  v_actor := coalesce(nullif(p_options->'actor', 'null'), jobs.run_actor());  -- or its run's
  perform jobs.check_value(p_payload, 'an event payload');
  if pg_catalog.octet_length(p_payload::text) > jobs.max_payload_bytes() then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('event payload is larger than %s bytes', jobs.max_payload_bytes()));
  end if;
  -- LOCK (jobs.event_locks: emits of one name and tenant run side by side; waits on it
  -- wait for us)
  perform jobs.lock_keys(l.keys, l.modes) from jobs.event_locks(v_tenant, array[p_name], false) l;
  -- WRITE
  insert into jobs.event as e (name, payload, created_at, tenant, actor)
  values (p_name, p_payload, jobs.now(), v_tenant, v_actor)
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

comment on function jobs.emit_event_v2(text, jsonb, jsonb) is
  'Record an event (options: its actor); wake every parked job waiting for a matching one. Answers the event id.';

-- jobs.emit_event(name, payload) -> the event's id: jobs.emit_event_v2 with no option
-- (version 1's signature).
create or replace function jobs.emit_event(p_name text, p_payload jsonb default '{}')
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
begin
  return jobs.emit_event_v2(p_name, p_payload, '{}');
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
  -- (the job's tenant read first: distributed, a statement that reads the jobs is sent to
  -- their shard, and the lock rows are on the coordinator)
  select j.tenant into v_tenant from jobs.job j
   where j.id = p_id and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint);
  perform jobs.lock_keys(l.keys, l.modes) from jobs.event_locks(v_tenant, v_names, true) l;
  -- REGISTER once (a later call keeps the first deadline).
  insert into jobs.event_wait as w (job_id, step, specs, names, deadline, created_at, bucket)
  values (p_id, p_name, p_specs, v_names,
          case when p_timeout_s is null then 'infinity'
               else v_now + pg_catalog.make_interval(secs => p_timeout_s) end,
          v_now, p_id & 255)
  on conflict do nothing;
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
     -- (an event a step of this job already took: read first, as an array; distributed,
     -- the steps are on a shard and the events on the coordinator)
     and e.id <> all (array(select s.event_id from jobs.step s
                             where s.job_id = p_id and s.event_id is not null))
   order by e.id
   limit 1;
  if v_event.id is not null then
    v_value := pg_catalog.jsonb_build_object('event', v_event.name, 'payload', v_event.payload,
                                             'id', v_event.id);
    insert into jobs.step (job_id, name, ordinal, kind, value, event_id, created_at, bucket)
    values (p_id, p_name, v_seq, 'event', v_value, v_event.id, v_now, p_id & 255);
  elsif v_deadline <= v_now then
    v_value := '{"timeout": true}'::jsonb;
    insert into jobs.step (job_id, name, ordinal, kind, value, created_at, bucket)
    values (p_id, p_name, v_seq, 'timeout', v_value, v_now, p_id & 255);
  else
    -- PARK until the deadline (or a matching emit).
    perform jobs.nack_batch(array[p_id], array[p_claim], null, array['park'],
      array[case when v_deadline = 'infinity' then null
                 else extract(epoch from v_deadline - v_now)::double precision end], true);
    return query select null::jsonb, true;
    return;
  end if;
  delete from jobs.event_wait w where w.job_id = p_id and w.step = p_name;
  return query select v_value, false;
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
  if pg_catalog.current_setting('jobs.run_actor', true) <> '' then
    p_specs := jobs.run_actor_specs(p_specs);  -- staged inside a run: its actor
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
    insert into jobs.outbox as o (id, name, tenant, key, ordering_key, spec, staged_at)
    select jobs.new_job_id(e.spec->>'name', e.spec->>'tenant', e.spec->>'key'),
           e.spec->>'name', e.spec->>'tenant', e.spec->>'key', e.spec->>'ordering_key',
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

-- === sql/87_integrations.sql ===

comment on table jobs.webhook_endpoint is
  'Disabled outbound webhook endpoints (no row: enabled), sql/87_integrations.sql.';

comment on table jobs.webhook_attempt is
  'One row per outbound webhook attempt that reached a verdict, sql/87_integrations.sql.';

-- jobs.webhook_attempt_put(id, claim, endpoint, outcome, status, latency_ms, excerpt)
--   -> the attempt number recorded
-- Records the current attempt of the running webhook job `id`. GUARD: the claim holds
-- the job, the job is named `endpoint` (lease_lost otherwise); outcome is one of the
-- table's, latency >= 0, status 100..599 or null (invalid_argument). A bound session
-- is refused another tenant's job. WRITE: one row per (job, attempt); the same attempt
-- recorded again replaces its row (a repeated call after a lost answer).
create or replace function jobs.webhook_attempt_put(
  p_id bigint, p_claim bigint, p_endpoint text, p_outcome text, p_status integer,
  p_latency_ms integer, p_excerpt text)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_attempt integer;
  v_tenant  text;
begin
  if p_outcome is null or p_outcome not in ('delivered', 'retry', 'rejected', 'error',
                                            'disabled', 'refused')
     or p_latency_ms is null or p_latency_ms < 0
     or (p_status is not null and (p_status < 100 or p_status > 599)) then
    perform jobs.raise_error('invalid_argument', pg_catalog.format(
      'webhook_attempt_put needs an outcome of the table''s, a latency >= 0 and a status '
      '100..599 or null (got %L, %L, %L)', p_outcome, p_latency_ms, p_status));
  end if;
  perform jobs.check_tenant(array[p_id]);
  select j.attempt, j.tenant into v_attempt, v_tenant from jobs.job j
   where j.id = p_id and j.claim = p_claim and j.state = 'running' and j.name = p_endpoint;
  if not found then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('job %s is not the running webhook %s under claim %s', p_id,
                        p_endpoint, p_claim));
  end if;
  insert into jobs.webhook_attempt as a (job_id, attempt, endpoint, tenant, outcome, status,
                                         latency_ms, excerpt, at)
  values (p_id, v_attempt, p_endpoint, v_tenant, p_outcome, p_status, p_latency_ms,
          pg_catalog.left(p_excerpt, 512), jobs.now())
  on conflict (job_id, attempt) do update
     set outcome = excluded.outcome, status = excluded.status,
         latency_ms = excluded.latency_ms, excerpt = excluded.excerpt, at = excluded.at;
  return v_attempt;
end
$$;

comment on function jobs.webhook_attempt_put(bigint, bigint, text, text, integer, integer, text) is
  'Record the running webhook job''s current attempt (fenced on its claim); SJ004 when the claim or the name does not match.';

-- jobs.webhook_disabled(endpoint) -> why the endpoint is disabled, or null (enabled).
-- A bound session reads only its tenant's endpoints (another's: null). Reads.
create or replace function jobs.webhook_disabled(p_endpoint text)
returns text
language sql
stable
set search_path = ''
as $$
  select e.reason from jobs.webhook_endpoint e
   where e.name = p_endpoint
     and (jobs.bound_tenant() is null or e.tenant is not distinct from jobs.bound_tenant())
$$;

comment on function jobs.webhook_disabled(text) is
  'Why an outbound webhook endpoint is disabled, or null when it is enabled.';

-- jobs.webhook_disable(endpoint, tenant, reason) -> void
-- Disable an endpoint: its jobs fail fast (webhook_disabled, SJ050, in the client)
-- until webhook_enable. Disabling a disabled endpoint replaces its reason. GUARD: a
-- name and a non-empty reason (invalid_argument); a bound session may disable only an
-- endpoint of its own tenant (tenant_refused).
create or replace function jobs.webhook_disable(p_endpoint text, p_tenant text,
                                                p_reason text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_bound text := jobs.bound_tenant();
  v_owner text;
begin
  perform jobs.check_name(p_endpoint, 'webhook endpoint');
  if p_reason is null or pg_catalog.btrim(p_reason) = '' then
    perform jobs.raise_error('invalid_argument', 'webhook_disable needs a reason');
  end if;
  select e.tenant into v_owner from jobs.webhook_endpoint e where e.name = p_endpoint
     for update;
  if v_bound is not null and (p_tenant is distinct from v_bound
                              or (found and v_owner is distinct from v_bound)) then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('webhook endpoint %s belongs to another tenant', p_endpoint));
  end if;
  insert into jobs.webhook_endpoint as e (name, tenant, reason, disabled_by, disabled_at)
  values (p_endpoint, p_tenant, p_reason, session_user, jobs.now())
  on conflict (name) do update
     set tenant = excluded.tenant, reason = excluded.reason,
         disabled_by = excluded.disabled_by, disabled_at = excluded.disabled_at;
end
$$;

comment on function jobs.webhook_disable(text, text, text) is
  'Disable an outbound webhook endpoint (its jobs fail fast); SJ018 for another tenant''s endpoint.';

-- jobs.webhook_enable(endpoint) -> true when it was disabled. A bound session may
-- enable only its tenant's endpoint (tenant_refused).
create or replace function jobs.webhook_enable(p_endpoint text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_bound text := jobs.bound_tenant();
  v_owner text;
begin
  select e.tenant into v_owner from jobs.webhook_endpoint e where e.name = p_endpoint
     for update;
  if not found then
    return false;
  end if;
  if v_bound is not null and v_owner is distinct from v_bound then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('webhook endpoint %s belongs to another tenant', p_endpoint));
  end if;
  delete from jobs.webhook_endpoint e where e.name = p_endpoint;
  return true;
end
$$;

comment on function jobs.webhook_enable(text) is
  'Enable a disabled outbound webhook endpoint; true when it was disabled.';

-- jobs.webhook_endpoints() -> the disabled endpoints (a bound session: its tenant's).
create or replace function jobs.webhook_endpoints()
returns table (name text, tenant text, reason text, disabled_by text,
               disabled_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select e.name, e.tenant, e.reason, e.disabled_by, e.disabled_at
    from jobs.webhook_endpoint e
   where jobs.bound_tenant() is null or e.tenant is not distinct from jobs.bound_tenant()
   order by e.name
$$;

comment on function jobs.webhook_endpoints() is
  'The disabled outbound webhook endpoints (a bound session: its tenant''s).';

-- jobs.webhook_attempts(job_id) -> the recorded attempts of one webhook job, in order.
-- A bound session is refused another tenant's job (tenant_refused). Reads.
create or replace function jobs.webhook_attempts(p_job_id bigint)
returns table (attempt integer, endpoint text, outcome text, status integer,
               latency_ms integer, excerpt text, at timestamptz)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_job_id]);
  return query
    select a.attempt, a.endpoint, a.outcome, a.status, a.latency_ms, a.excerpt, a.at
      from jobs.webhook_attempt a where a.job_id = p_job_id order by a.attempt;
end
$$;

comment on function jobs.webhook_attempts(bigint) is
  'The recorded attempts of one outbound webhook job; SJ018 for another tenant''s job.';

comment on table jobs.ledger_posting is
  'Ledger postings, one per (ledger, tenant, key), sql/87_integrations.sql.';

comment on table jobs.ledger_line is
  'The lines of the ledger postings (debit > 0, credit < 0), sql/87_integrations.sql.';

-- jobs.ledger_post(id, claim, ledger, key, lines, memo) -> (posting_id, created)
-- Post `lines` (a JSON array of {"account", "currency", "amount"}, amount a number or a
-- decimal string, debit > 0, credit < 0) under `key` in `ledger`, for the running job
-- `id` (its claim: lease_lost otherwise) and its tenant. GUARD (invalid_argument): a
-- ledger name and a key of 1..200 bytes, 2 to 1000 lines, each an account of 1..200
-- bytes, a currency of 3 to 12 of A-Z0-9 and a non-zero finite amount; then the sum
-- per currency is zero (ledger_unbalanced). LOCK: the key, by the unique index (a
-- concurrent post of the same key waits for the first and reads it). ANSWER: a new
-- posting (created), or the one the key already holds when its lines are the same
-- lines (in any order, 1.0 = 1.00), else ledger_posting_conflict.
create or replace function jobs.ledger_post(p_id bigint, p_claim bigint, p_ledger text,
                                            p_key text, p_lines jsonb, p_memo text)
returns table (posting_id bigint, created boolean)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_tenant  text;
  v_posting bigint;
  v_bad     text;
  v_count   integer;
  v_same    boolean;
begin
  perform jobs.check_name(p_ledger, 'ledger name');
  perform jobs.check_name(p_key, 'posting key');
  if p_lines is null or pg_catalog.jsonb_typeof(p_lines) <> 'array'
     or pg_catalog.jsonb_array_length(p_lines) not between 2 and 1000 then
    perform jobs.raise_error('invalid_argument',
      'a posting needs an array of 2 to 1000 lines');
  end if;
  select pg_catalog.format('line %s', l.n) into v_bad
    from pg_catalog.jsonb_array_elements(p_lines) with ordinality l(v, n)
   where pg_catalog.jsonb_typeof(l.v) <> 'object'
      or pg_catalog.jsonb_typeof(l.v->'account') is distinct from 'string'
      or pg_catalog.octet_length(l.v->>'account') not between 1 and 200
      or coalesce(l.v->>'currency', '') !~ '^[A-Z0-9]{3,12}$'
      or pg_catalog.jsonb_typeof(l.v->'amount') not in ('number', 'string')
      or case when coalesce(l.v->>'amount', '') ~ '^-?[0-9]{1,30}(\.[0-9]{1,30})?$'
              then (l.v->>'amount')::numeric = 0 else true end
      or (select pg_catalog.count(*) from pg_catalog.jsonb_object_keys(l.v)) <> 3
   order by l.n limit 1;
  if v_bad is not null then
    perform jobs.raise_error('invalid_argument', pg_catalog.format(
      'posting %s: %s is not {"account": 1..200 bytes, "currency": 3..12 of A-Z0-9, '
      '"amount": a non-zero decimal}', p_key, v_bad));
  end if;
  select pg_catalog.string_agg(pg_catalog.format('%s %s', u.currency, u.total), ', '
                               order by u.currency)
    into v_bad
    from (select l.v->>'currency' as currency, pg_catalog.sum((l.v->>'amount')::numeric) as total
            from pg_catalog.jsonb_array_elements(p_lines) l(v)
           group by 1) u
   where u.total <> 0;
  if v_bad is not null then
    perform jobs.raise_error('ledger_unbalanced',
      pg_catalog.format('posting %s does not balance: %s', p_key, v_bad),
      null, 'the amounts of each currency must sum to zero (debits > 0, credits < 0)');
  end if;
  perform jobs.check_tenant(array[p_id]);
  select j.tenant into v_tenant from jobs.job j
   where j.id = p_id and j.claim = p_claim and j.state = 'running';
  if not found then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('job %s is not running under claim %s', p_id, p_claim));
  end if;
  -- WRITE (or read the key's posting) -------------------------------------------
  insert into jobs.ledger_posting as p (ledger, tenant, key, memo, job_id, posted_at)
  values (p_ledger, coalesce(v_tenant, ''), p_key, p_memo, p_id, jobs.now())
  on conflict (ledger, tenant, key) do nothing
  returning p.id into v_posting;
  if v_posting is not null then
    insert into jobs.ledger_line (posting_id, line, account, currency, amount)
    select v_posting, l.n, l.v->>'account', l.v->>'currency', (l.v->>'amount')::numeric
      from pg_catalog.jsonb_array_elements(p_lines) with ordinality l(v, n);
    return query select v_posting, true;
    return;
  end if;
  select p.id into strict v_posting from jobs.ledger_posting p
   where p.ledger = p_ledger and p.tenant = coalesce(v_tenant, '') and p.key = p_key;
  select (select pg_catalog.array_agg(pg_catalog.jsonb_build_array(
                                      x.account, x.currency, pg_catalog.trim_scale(x.amount))
                                      order by x.account, x.currency, x.amount)
            from jobs.ledger_line x where x.posting_id = v_posting)
         is not distinct from
         (select pg_catalog.array_agg(pg_catalog.jsonb_build_array(
                                      l.v->>'account', l.v->>'currency',
                                      pg_catalog.trim_scale((l.v->>'amount')::numeric))
                                      order by l.v->>'account', l.v->>'currency',
                                               (l.v->>'amount')::numeric)
            from pg_catalog.jsonb_array_elements(p_lines) l(v))
    into v_same;
  if not v_same then
    perform jobs.raise_error('ledger_posting_conflict',
      pg_catalog.format('posting %s of ledger %s was written with other lines', p_key,
                        p_ledger),
      null, 'a posting key names one posting: use a new key for a new posting');
  end if;
  return query select v_posting, false;
end
$$;

comment on function jobs.ledger_post(bigint, bigint, text, text, jsonb, text) is
  'Write one balanced posting under its key, once per (ledger, tenant, key); SJ053 unbalanced, SJ054 the key holds other lines.';

-- jobs.ledger_balances(ledger, account) -> (tenant, account, currency, balance, lines)
-- The balance of every account of `ledger` (or only `account`) per currency: the sum
-- of its lines. A bound session reads its tenant's postings only. Reads.
create or replace function jobs.ledger_balances(p_ledger text, p_account text default null)
returns table (tenant text, account text, currency text, balance numeric, lines bigint)
language sql
stable
set search_path = ''
as $$
  select nullif(p.tenant, ''), l.account, l.currency, pg_catalog.sum(l.amount),
         pg_catalog.count(*)
    from jobs.ledger_posting p
    join jobs.ledger_line l on l.posting_id = p.id
   where p.ledger = p_ledger
     and (p_account is null or l.account = p_account)
     and (jobs.bound_tenant() is null or p.tenant = jobs.bound_tenant())
   group by p.tenant, l.account, l.currency
   order by p.tenant, l.account, l.currency
$$;

comment on function jobs.ledger_balances(text, text) is
  'Per tenant, account and currency: the balance of a ledger''s accounts (a bound session: its tenant''s).';

-- jobs.ledger_posting(ledger, key, tenant) -> the lines of one posting, in order (none:
-- no rows). A bound session reads only its tenant's (p_tenant is then its own).
create or replace function jobs.ledger_posting(p_ledger text, p_key text,
                                               p_tenant text default null)
returns table (posting_id bigint, line integer, account text, currency text,
               amount numeric, memo text, job_id bigint, posted_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select p.id, l.line, l.account, l.currency, l.amount, p.memo, p.job_id, p.posted_at
    from jobs.ledger_posting p
    join jobs.ledger_line l on l.posting_id = p.id
   where p.ledger = p_ledger and p.key = p_key
     and p.tenant = coalesce(jobs.bound_tenant(), p_tenant, '')
   order by l.line
$$;

comment on function jobs.ledger_posting(text, text, text) is
  'The lines of one ledger posting (a bound session: its tenant''s only).';

comment on table jobs.subject_audit is
  'One row per data-subject erase: who, when, what (counts and paths, never values), sql/87_integrations.sql.';

-- jobs.subject_audits(limit) -> the latest erase records, newest first (1..1000 rows).
-- Fleet-wide: a session bound to a tenant is refused (tenant_refused). Reads.
create or replace function jobs.subject_audits(p_limit integer default 100)
returns table (id bigint, action text, subject_hash text, actor text, session_role text,
               at timestamptz, erased jsonb)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.subject_audits');
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument', 'subject_audits takes a limit of 1..1000');
  end if;
  return query
    select a.id, a.action, a.subject_hash, a.actor, a.session_role, a.at, a.erased
      from jobs.subject_audit a order by a.id desc limit p_limit;
end
$$;

comment on function jobs.subject_audits(integer) is
  'The latest data-subject erase records, newest first; refused to a tenant-bound session.';

comment on table jobs.consumer is
  'The cursor of each stream consumer, moved in the transaction of its turn, sql/87_integrations.sql.';

-- jobs.consumer_cursor(name) -> (cursor, turn): the consumer's cursor, its row created
-- when missing and LOCKED until the caller's transaction ends (the turn's).
create or replace function jobs.consumer_cursor(p_name text)
returns table (cursor jsonb, turn bigint)
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.check_name(p_name, 'consumer name');
  perform jobs.fleet_only('jobs.consumer_cursor');
  insert into jobs.consumer (name, updated_at) values (p_name, jobs.now())
  on conflict (name) do nothing;
  return query select c.cursor, c.turn from jobs.consumer c where c.name = p_name for update;
end
$$;

comment on function jobs.consumer_cursor(text) is
  'A consumer''s cursor and turn, its row locked for the caller''s transaction.';

-- jobs.consumer_advance(name, turn, cursor, rows) -> true when moved: the cursor becomes
-- `cursor`, turn + 1, rows added; false when the row's turn is not `turn` (another run
-- moved it: the caller must roll its turn back). rows >= 0 (invalid_argument).
create or replace function jobs.consumer_advance(p_name text, p_turn bigint, p_cursor jsonb,
                                                 p_rows integer)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  if p_rows is null or p_rows < 0 or p_turn is null then
    perform jobs.raise_error('invalid_argument', 'consumer_advance needs a turn and rows >= 0');
  end if;
  perform jobs.fleet_only('jobs.consumer_advance');
  update jobs.consumer c
     set cursor = p_cursor, turn = c.turn + 1, rows_done = c.rows_done + p_rows,
         updated_at = jobs.now()
   where c.name = p_name and c.turn = p_turn;
  return found;
end
$$;

comment on function jobs.consumer_advance(text, bigint, jsonb, integer) is
  'Move a consumer''s cursor, fenced on the turn read; false when another run moved it.';

-- jobs.consumers() -> every consumer's cursor, turns and rows. Reads.
create or replace function jobs.consumers()
returns table (name text, cursor jsonb, turn bigint, rows_done bigint,
               updated_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select c.name, c.cursor, c.turn, c.rows_done, c.updated_at from jobs.consumer c
   order by c.name
$$;

comment on function jobs.consumers() is 'Every stream consumer''s cursor, turns and rows.';

-- === sql/90_operator.sql ===

-- The ids of at most p_max jobs matching p_filter in p_states (only those still
-- waiting when p_waiting), locked with skip locked, oldest first (distributed: oldest
-- first of each shard in turn). Validates the filter.
-- It and jobs.count_where are planned for the states and filter of each call (custom
-- plans), and say again what every row of those states has, in the words of the
-- partial indexes' predicates (sql/00_schema.sql): final rows a finish time
-- (job_retention_idx); live rows a place in the claimable, blocked, lease or parked
-- index. A plan made for any states can only read the whole table.
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
set plan_cache_mode = force_custom_plan
as $$
declare
  v_states jobs.job_state[];
  v_final  boolean := p_states <@ '{succeeded,failed,dead,cancelled}'::jobs.job_state[];
  v_live   boolean := p_states <@ '{ready,running,parked,interrupted}'::jobs.job_state[];
  v_ids    bigint[] := '{}';
  v_now    timestamptz := case when p_waiting then jobs.now() end;  -- (read only if used)
  v_buckets smallint[];  -- distributed: this round's shard (null: one round for all)
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
  -- One round, or, distributed, one per shard (Citus locks rows only in a statement it
  -- routes to one shard), each taking what is left of p_max: the lowest ids of each
  -- shard in turn, not the lowest overall.
  for v_buckets in select null::smallint[] where not jobs.distributed()
                   union all
                   select distinct jobs.shard_buckets(b::smallint)
                     from pg_catalog.generate_series(0, 255) b
                    where jobs.distributed() loop
    v_ids := v_ids || array(
      select j.id
        from jobs.job j
       where j.state = any (p_states)
         and (v_buckets is null or j.bucket = any (v_buckets))
         and (not v_final or j.finished_at is not null)
         and (not v_live
              or (j.state in ('ready', 'interrupted') and j.blocked_on is null)
              or (j.blocked_on is not null and j.state in ('ready', 'interrupted'))
              or (j.state = 'running' and j.lease_expires_at is not null)
              or j.state = 'parked')
         and (v_states is null or j.state = any (v_states))
         and (p_filter->'queue' is null or j.queue = any (jobs.filter_values(p_filter, 'queue')))
         and (p_filter->'name' is null or j.name = any (jobs.filter_values(p_filter, 'name')))
         and (p_filter->'tenant' is null or j.tenant = any (jobs.filter_values(p_filter, 'tenant')))
         and (not p_waiting or j.state = 'parked' or j.run_at > v_now)
       order by j.id
       limit p_max - pg_catalog.cardinality(v_ids)
         for update skip locked);
    exit when pg_catalog.cardinality(v_ids) >= p_max;
  end loop;
  return v_ids;
end
$$;

create or replace function jobs.count_where(
  p_filter  jsonb,
  p_states  jobs.job_state[],
  p_waiting boolean default false
)
returns bigint
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_custom_plan
as $$
declare
  v_filter jsonb := jobs.tenant_filter(p_filter);  -- a bound session: its tenant
  v_final  boolean := p_states <@ '{succeeded,failed,dead,cancelled}'::jobs.job_state[];
  v_live   boolean := p_states <@ '{ready,running,parked,interrupted}'::jobs.job_state[];
begin
  return (  -- (read as jobs.ids_where reads them)
    select pg_catalog.count(*)
      from jobs.job j
     where j.state = any (p_states)
       and (not v_final or j.finished_at is not null)
       and (not v_live
            or (j.state in ('ready', 'interrupted') and j.blocked_on is null)
            or (j.blocked_on is not null and j.state in ('ready', 'interrupted'))
            or (j.state = 'running' and j.lease_expires_at is not null)
            or j.state = 'parked')
       and (v_filter->'state' is null
            or j.state = any (jobs.filter_values(v_filter, 'state')::jobs.job_state[]))
       and (v_filter->'queue' is null or j.queue = any (jobs.filter_values(v_filter, 'queue')))
       and (v_filter->'name' is null or j.name = any (jobs.filter_values(v_filter, 'name')))
       and (v_filter->'tenant' is null or j.tenant = any (jobs.filter_values(v_filter, 'tenant')))
       and (not p_waiting or j.state = 'parked' or j.run_at > jobs.now()));
end
$$;

-- jobs.lock_jobs(ids): lock these jobs' rows for update, in id order; distributed
-- (jobs.distributed()), a shard at a time (jobs.ids_by_shard), in id order in each: Citus
-- locks rows only in a statement it routes to one shard. Private.
create or replace function jobs.lock_jobs(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_buckets smallint[];
  v_ids    bigint[];
begin
  if not jobs.distributed() then
    perform 1 from jobs.job j where j.id = any (p_ids) order by j.id for update;
    return;
  end if;
  for v_buckets, v_ids in select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b loop
    perform 1 from jobs.job j where j.bucket = any (v_buckets) and j.id = any (v_ids)
     order by j.id for update;
  end loop;
end
$$;

comment on function jobs.lock_jobs(bigint[]) is
  'Private: lock these jobs'' rows for update, in id order (distributed: a shard at a time).';

-- Refuse a one-job verb on a missing job or one in a refused state. Locks the row
-- (distributed, naming its bucket, so that Citus routes the lock to one shard).
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
  select j.state into v_state from jobs.job j
   where j.id = p_id and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
     for update;
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
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_unwinds bigint[];   -- compensable jobs: their cancel starts their unwind
  v_seqs    integer[];
  v_queues  text[];
  v_held    bigint[];   -- jobs that may hold limit slots (only running ones do)
  v_follows bigint[];   -- cancelled jobs with hooks or a parent
  v_watched bigint[];
  v_buckets smallint[];  -- distributed: this round's shard (null: one round for all)
  v_ids     bigint[];
  v_unwind_ids      bigint[];  -- this round's compensable jobs and their new histories,
  v_unwind_attempts jsonb[];
  v_cancel_ids      bigint[];  -- and the others
  v_cancel_attempts jsonb[];
begin
  -- the workers running any of them hear it now (jobs.worker_token), not at their next
  -- heartbeat; delivered at commit, as every notification (read first: the notices go
  -- from this node, where the workers listen)
  perform pg_catalog.pg_notify('jobs_wake', jobs.worker_token(w.worker))
     from pg_catalog.unnest(array(
            select distinct j.worker from jobs.job j
             where j.id = any (p_ids) and j.state = 'running' and j.worker is not null)) w(worker);
  -- One round, or, distributed, one per shard of the jobs (jobs.ids_by_shard). Each new
  -- attempt history is made in a read first, not in the updates: Citus sends no update
  -- whose SET calls a stable function on the row's columns (the rows are locked: the
  -- callers lock them first).
  for v_buckets, v_ids in select null::smallint[], null::bigint[] where not jobs.distributed()
                          union all
                          select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b
                           where jobs.distributed() loop
    select pg_catalog.array_agg(t.id) filter (where t.compensable),
           pg_catalog.array_agg(t.attempts) filter (where t.compensable),
           pg_catalog.array_agg(t.id) filter (where not t.compensable),
           pg_catalog.array_agg(t.attempts) filter (where not t.compensable)
      into v_unwind_ids, v_unwind_attempts, v_cancel_ids, v_cancel_attempts
      from (select j.id, j.compensable,
                   jobs.cancelled_attempt(j.state, j.attempts, j.attempt, j.claim, j.worker,
                                          j.started_at, v_now) as attempts
              from jobs.job j
             where j.id = any (coalesce(v_ids, p_ids))
               and (not jobs.distributed() or j.bucket = any (v_buckets))
               and j.state in ('ready', 'running', 'parked', 'interrupted')
               and not (j.compensable and j.compensating)) t;
    -- A compensable job unwinds instead (sagas, sql/50_steps.sql): back to ready and
    -- compensating, its unwind recorded to end cancelled, its queue woken so a worker
    -- claims it to run the compensations. One already unwinding is left to finish.
    with unwinding as (
      update jobs.job as j
         set state = 'ready', run_at = v_now, finished_at = null, lease_expires_at = null,
             compensating = true, step_seq = j.step_seq + 1, attempts = t.attempts
        from unnest(v_unwind_ids, v_unwind_attempts) as t(id, attempts)
       where j.id = t.id and (not jobs.distributed() or j.bucket = any (v_buckets))
      returning j.id, j.step_seq, j.queue, j.slots is not null as held
    )
    select pg_catalog.array_agg(u.id), pg_catalog.array_agg(u.step_seq),
           pg_catalog.array_agg(distinct u.queue), pg_catalog.array_agg(u.id) filter (where u.held)
      into v_unwinds, v_seqs, v_queues, v_held
      from unwinding u;
    if v_unwinds is not null then
      perform jobs.record_unwinds(v_unwinds, v_seqs,
        pg_catalog.array_fill('cancelled'::jobs.job_state, array[pg_catalog.cardinality(v_unwinds)]),
        pg_catalog.array_fill(pg_catalog.jsonb_build_object('kind', 'cancelled',
                                                            'message', 'the job was cancelled'),
                              array[pg_catalog.cardinality(v_unwinds)]));
      perform jobs.wake(v_queues);
    end if;
    perform jobs.release_slots(v_held);
    with moved as (
      update jobs.job as j
         set state = 'cancelled', finished_at = v_now, lease_expires_at = null,
             attempts = t.attempts
        from unnest(v_cancel_ids, v_cancel_attempts) as t(id, attempts)
       where j.id = t.id and (not jobs.distributed() or j.bucket = any (v_buckets))
      returning j.id, j.settle_watched, j.slots is not null as held,
                j.hooks is not null or j.parent_id is not null as follows
    )
    -- (each round's answers after the rounds before: null || a = a)
    select pg_catalog.array_agg(moved.id) filter (where moved.held),
           v_follows || pg_catalog.array_agg(moved.id) filter (where moved.follows),
           v_watched || pg_catalog.array_agg(moved.id) filter (where moved.settle_watched)
      into v_held, v_follows, v_watched
      from moved;
    perform jobs.release_slots(v_held);
  end loop;
  perform jobs.job_final(v_follows);
  -- result waiters of watched jobs hear of it (a saga's cancel first unwinds: not yet)
  perform jobs.notify_settled(v_watched);
end
$$;

-- jobs.cancelled_attempt(state, attempts, attempt, claim, worker, started_at, now) -> a
-- cancelled job's attempt history: a running attempt ends now and joins it
-- (sql/40_settle.sql). Private.
create or replace function jobs.cancelled_attempt(p_state jobs.job_state, p_attempts jsonb,
                                                  p_attempt integer, p_claim bigint,
                                                  p_worker text, p_started_at timestamptz,
                                                  p_now timestamptz)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_state <> 'running' then
    return p_attempts;
  end if;
  return jobs.attempts_push(p_attempts, pg_catalog.jsonb_build_object(
    'attempt', p_attempt, 'claim', p_claim >> 32, 'worker', p_worker,
    'started_at', p_started_at, 'ended_at', p_now, 'outcome', 'cancelled',
    'error', null));
end
$$;

-- jobs.requeue_blocked(ids) -> the ids a requeue must leave as they are: a singleton
-- job whose group has a live job, a debounced one whose group has a job waiting to start
-- (either would be a second one of its group), and, among the ids themselves, all but
-- the first of each such group. Private.
create or replace function jobs.requeue_blocked(p_ids bigint[])
returns bigint[]
language plpgsql
stable
set search_path = ''
as $$
begin
  -- (the candidates read first, then the jobs that take their groups, in a join: Citus
  -- plans no subquery per job over the jobs)
  return (
    with candidates as materialized (
      select j.id, j.name, coalesce(j.tenant, '') as tenant, coalesce(j.group_key, '') as grp,
             j.singleton, j.debounce_s is not null as debounced
        from jobs.job j
       where j.id = any (p_ids) and (j.singleton or j.debounce_s is not null)
    ), taken as materialized (
      select distinct c.id
        from candidates c
        join jobs.job k on k.name = c.name and coalesce(k.tenant, '') = c.tenant
                       and coalesce(k.group_key, '') = c.grp and k.id <> c.id
       where (c.singleton and k.singleton
              and k.state in ('ready', 'running', 'parked', 'interrupted'))
          or (c.debounced and k.debounce_s is not null
              and k.state = 'ready' and k.attempt = 0)
    )
    select coalesce(pg_catalog.array_agg(r.id order by r.id), '{}')
      from (select c.id,
                   pg_catalog.row_number() over (
                     partition by c.name, c.tenant, c.grp, c.singleton, c.debounced
                     order by c.id) as nth,
                   c.id in (select t.id from taken t) as taken
              from candidates c) r
     where r.taken or r.nth > 1);
end
$$;

comment on function jobs.requeue_blocked(bigint[]) is
  'Private: the jobs a requeue leaves, their singleton or debounce group being taken.';

-- Requeue and promote make jobs runnable now, so they wake their queues' workers.
create or replace function jobs.apply_requeue(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queues text[];
begin
  with moved as (
    update jobs.job as j
       set state = 'ready', attempt = 0, run_at = jobs.now(), finished_at = null,
           lease_expires_at = null, result = null, blocked_on = null,
           -- the waiter that watched it heard it settle; a new one watches it again
           settle_watched = false
     where j.id = any (p_ids) and j.state in ('failed', 'dead', 'cancelled')
    returning j.queue
  )
  select array(select distinct moved.queue from moved) into v_queues;
  perform jobs.wake(v_queues);
end
$$;

create or replace function jobs.apply_promote(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queues text[];
begin
  with moved as (
    update jobs.job as j
       set state = case when j.state = 'parked' then 'ready' else j.state end,
           -- a job already due keeps its run_at: promoting never sends it behind
           -- older jobs of its priority
           run_at = least(j.run_at, jobs.now())
     where j.id = any (p_ids) and j.state in ('ready', 'interrupted', 'parked')
    returning j.queue
  )
  select array(select distinct moved.queue from moved) into v_queues;
  perform jobs.wake(v_queues);
end
$$;

create or replace function jobs.apply_remove(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_parents bigint[];
begin
  with gone as (
    delete from jobs.job as j where j.id = any (p_ids) and j.state <> 'running'
    returning j.parent_id
  )
  select pg_catalog.array_agg(gone.parent_id) filter (where gone.parent_id is not null)
    into v_parents
    from gone;
  -- a parked parent whose child was removed goes on without it (sql/50_steps.sql)
  perform jobs.wake_parents(v_parents);
end
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
  perform jobs.lock_jobs(p_ids);
  -- (counted first, and the missing one found only then, in the jobs found read as an
  -- array: distributed, Citus plans no subquery per id over the jobs)
  if (select pg_catalog.count(*) from jobs.job j where j.id = any (p_ids))
     < (select pg_catalog.count(distinct i) from pg_catalog.unnest(p_ids) i) then
    select i.id into v_id from pg_catalog.unnest(p_ids) i(id)
     where i.id <> all (array(select j.id from jobs.job j where j.id = any (p_ids))) limit 1;
  end if;
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
  v_id := (jobs.requeue_blocked(p_ids))[1];
  if v_id is not null then
    perform jobs.raise_error('job_live',
      pg_catalog.format('job %s: its singleton or debounce group already has a live job '
                        '(or this call names two of the group)', v_id),
      null, 'requeue it once that job is done');
  end if;
  -- WRITE
  perform jobs.apply_requeue(p_ids);
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
  -- a job whose singleton or debounce group is taken stays (and still matches)
  v_ids := array(select i from pg_catalog.unnest(v_ids) i
                  where i <> all (jobs.requeue_blocked(v_ids)));
  perform jobs.apply_requeue(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_from);
end
$$;

create or replace function jobs.job_payload(p_id bigint)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return (select j.payload from jobs.job j where j.id = p_id);
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.queue_stats_v2(): one row per queue that has jobs, or that
-- jobs.declared_queues() names (zeros when it holds none): the set the dashboard and
-- the metrics list too. It reads only partial indexes: of the live rows (ready,
-- interrupted, running, parked), of the dead ones, and job_retention_idx for the
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
  with listed as (  -- each branch reads one partial index (sql/00_schema.sql)
    select c.queue, c.name, c.state, c.run_at, c.blocked_on, c.deferred_by from jobs.job c
     where c.state in ('ready', 'interrupted') and c.blocked_on is null
    union all
    select b.queue, b.name, b.state, b.run_at, b.blocked_on, b.deferred_by from jobs.job b
     where b.blocked_on is not null and b.state in ('ready', 'interrupted')
    union all
    select r.queue, r.name, r.state, r.run_at, r.blocked_on, r.deferred_by from jobs.job r
     where r.state = 'running' and r.lease_expires_at is not null  -- job_lease_idx
    union all
    select p.queue, p.name, p.state, p.run_at, p.blocked_on, p.deferred_by from jobs.job p
     where p.state = 'parked'
    union all
    select d.queue, d.name, d.state, d.run_at, d.blocked_on, d.deferred_by from jobs.job d
     where d.state = 'dead'
    union all
    select f.queue, f.name, f.state, f.run_at, f.blocked_on, f.deferred_by from jobs.job f
     where f.finished_at is not null
       -- the window's start written out, not read from a subquery: the planner then
       -- estimates the rows from its value and reads job_retention_idx, where a
       -- subquery's unknown value was priced at a third of the table and read it whole
       and f.finished_at >= jobs.now()
             - coalesce(nullif(pg_catalog.current_setting('jobs.queue_stats_window', true), ''),
                        '24 hours')::interval
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
  gate_limits as (  -- global and queue limits with a concurrency (sql/35_limits.sql)
    select l.scope, l.target, l.name || '|' as grp, l.concurrency
      from jobs.limit l
     where l.scope in ('global', 'queue') and l.concurrency is not null
  ),
  used as (  -- their slots, counted per group first (no subquery per limit: Citus plans
             -- none over a distributed table from a reference table's rows)
    select s.grp, pg_catalog.count(*) as n
      from jobs.slot s
     where s.grp = any (array(select g.grp from gate_limits g))
     group by s.grp
  ),
  full_limits as (  -- those with no free slot
    select g.scope, g.target
      from gate_limits g
      left join used u on u.grp = g.grp
     where g.concurrency <= coalesce(u.n, 0)
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

-- === sql/92_introspection.sql ===

-- Why p_def is not a job type definition (null when it is one):
--   {"queue": text, "sensitive": [path, ...], "personal": [path, ...],
--    "payload_schema": {...}, "retry": {...}, "timeout_s": number,
--    "origin": "declared" | "api", "tenant": "required" | "forbidden",
--    "factory": {"kind": text, ...settings}}, every field optional.
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
                   'origin', 'tenant', 'factory')
   limit 1;
  if v_field is not null then
    return pg_catalog.format('unknown field %L (fields: queue, sensitive, personal, '
                             'payload_schema, retry, timeout_s, origin, tenant, factory)',
                             v_field);
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'factory'), 'null') not in ('object', 'null')
     or (pg_catalog.jsonb_typeof(p_def->'factory') = 'object'
         and coalesce(pg_catalog.jsonb_typeof(p_def->'factory'->'kind'), 'null') <> 'string') then
    return 'factory must be a JSON object with a string "kind"';
  end if;
  if coalesce(p_def->>'tenant', 'required') not in ('required', 'forbidden') then
    return 'tenant must be "required", "forbidden" or null';
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

-- jobs.text_set(texts, json array of texts) -> both together, each once, sorted. Private.
create or replace function jobs.text_set(p_texts text[], p_more jsonb)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
begin
  return array(select distinct e
                 from (select pg_catalog.unnest(p_texts)
                       union all
                       select pg_catalog.jsonb_array_elements_text(p_more)) as u(e)
                order by e);
end
$$;

comment on function jobs.text_set(text[], jsonb) is
  'Private: a set of texts (a job type''s paths), sorted, each once.';

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
  -- (no subquery in the insert: Citus plans none in an insert into a reference table,
  -- docs/design/citus.md)
  insert into jobs.job_type as t (name, queue, sensitive_paths, personal_paths, payload_schema,
                                  retry, timeout_s, origin, updated_at, tenant_policy, factory)
  values (p_name, p_def->>'queue',
          jobs.text_set(array[]::text[], coalesce(p_def->'sensitive', '[]')),
          jobs.text_set(array[]::text[], coalesce(p_def->'personal', '[]')),
          pg_catalog.jsonb_strip_nulls(p_def)->'payload_schema',
          pg_catalog.jsonb_strip_nulls(p_def)->'retry',
          (p_def->>'timeout_s')::double precision,
          case when p_widen then 'declared' else coalesce(p_def->>'origin', 'api') end, jobs.now(),
          p_def->>'tenant', nullif(p_def->'factory', 'null'::jsonb))
  on conflict (name) do update
     set queue = case when p_widen then coalesce(t.queue, excluded.queue) else excluded.queue end,
         sensitive_paths = case when p_widen
                             then jobs.text_set(t.sensitive_paths || excluded.sensitive_paths, '[]')
                             else excluded.sensitive_paths end,
         personal_paths = case when p_widen
                            then jobs.text_set(t.personal_paths || excluded.personal_paths, '[]')
                            else excluded.personal_paths end,
         payload_schema = excluded.payload_schema, retry = excluded.retry,
         timeout_s = excluded.timeout_s,
         origin = case when p_widen then t.origin else excluded.origin end,
         -- a worker's declaration sets a policy where none is stored; an operator's put
         -- replaces it
         tenant_policy = case when p_widen then coalesce(t.tenant_policy, excluded.tenant_policy)
                              else excluded.tenant_policy end,
         factory = excluded.factory,  -- a description: follows the code
         updated_at = excluded.updated_at
  returning (xmax = 0) into v_new;
  return v_new;
end
$$;

create or replace function jobs.job_types()
returns table (name text, queue text, sensitive_paths text[], personal_paths text[],
               payload_schema jsonb, retry jsonb, timeout_s double precision, origin text,
               updated_at timestamptz, factory jsonb)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.job_types');  -- (sql/15_tenancy.sql)
  select t.name, t.queue, t.sensitive_paths, t.personal_paths, t.payload_schema, t.retry,
         t.timeout_s, t.origin, t.updated_at, t.factory
    from jobs.job_type t
   order by t.name
$$;

comment on function jobs.job_types() is 'Every registered job type with its sensitive and personal paths, and the data factory that declared it (version 3: the column factory).';

-- jobs.personal_data(): the job types whose payload holds personal data, and where,
-- with how many jobs of each are stored (for a data-subject export or erase).
create or replace function jobs.personal_data()
returns table (name text, personal_paths text[], jobs bigint)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.personal_data');  -- (sql/15_tenancy.sql)
  -- (the jobs counted per name in one read: Citus plans no subquery per type over them)
  select t.name, t.personal_paths, coalesce(c.n, 0)
    from jobs.job_type t
    left join (select j.name, pg_catalog.count(*) as n
                 from jobs.job j
                where j.name = any (array(select p.name from jobs.job_type p
                                           where pg_catalog.cardinality(p.personal_paths) > 0))
                group by j.name) c on c.name = t.name
   where pg_catalog.cardinality(t.personal_paths) > 0
   order by t.name
$$;

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
         j.parent_id, j.parent_step,
         j.actor  -- version 3: who asked for the job (the caller's word, not authentication)
    from jobs.job j
    left join jobs.job_type t on t.name = j.name
   -- a tenant-bound session sees its tenant's jobs only (sql/15_tenancy.sql); each
   -- sub-select runs once per query
   where (select jobs.bound_tenant()) is null or j.tenant = (select jobs.bound_tenant());

-- jobs.list_jobs(filter, after_id, limit): a page of jobs, newest first, redacted.
-- Filter fields: state, queue, name, tenant, key (a string or an array of strings),
-- created_after, created_before, finished_after, finished_before (timestamps). Keyset
-- pagination: pass the last id of a page as p_after_id for the next one.
-- A page is read by index, never by scanning the table: job_pkey from the newest, or a
-- state's partial index when few rows have it. (jobs.job_view's tenant condition, two
-- values the planner cannot see when it plans, was priced as matching one row in two
-- hundred: a page then cost a sequential scan of every job, finished ones included.)
create or replace function jobs.list_jobs(
  p_filter   jsonb default '{}',
  p_after_id bigint default null,
  p_limit    integer default 50
)
returns setof jobs.job_view
language plpgsql
stable
set search_path = ''
set enable_seqscan = off
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
           v.parent_id, v.parent_step, v.actor
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
declare
  v_view     jsonb;    -- its job_view row (none: missing, or another tenant's)
  v_attempts jsonb;
  v_secrets  text[];   -- the payload's sensitive values, redacted wherever they appear
begin
  perform jobs.check_tenant(array[p_id]);
  -- One read per part, each naming the job (distributed, its steps and waits are on its
  -- shard and its children on any: Citus plans no subquery per part over them).
  select pg_catalog.to_jsonb(v) into v_view from jobs.job_view v where v.id = p_id;
  if v_view is null then
    return null;
  end if;
  select j.attempts, jobs.redaction_secrets(j.payload, (select t.sensitive_paths
                                                         from jobs.job_type t
                                                        where t.name = j.name))
    into v_attempts, v_secrets
    from jobs.job j where j.id = p_id;
  return pg_catalog.jsonb_build_object(
    'job', v_view,
    'attempts', coalesce(jobs.redact_strings(v_attempts, v_secrets), '[]'::jsonb),
    'steps', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'name', st.name, 'ordinal', st.ordinal, 'kind', st.kind,
               'value', jobs.redact_strings(st.value, v_secrets), 'created_at', st.created_at)
             order by st.ordinal)
        from jobs.step st where st.job_id = p_id), '[]'::jsonb),
    'children', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'id', c.id, 'name', c.name, 'state', c.state, 'parent_step', c.parent_step,
               'attempt', c.attempt, 'finished_at', c.finished_at) order by c.id)
        from jobs.job c where c.parent_id = p_id), '[]'::jsonb),
    'waits', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'step', w.step, 'events', w.names, 'specs', jobs.redact_strings(w.specs, v_secrets),
               'deadline', w.deadline, 'created_at', w.created_at) order by w.created_at, w.step)
        from jobs.event_wait w where w.job_id = p_id), '[]'::jsonb));
end
$$;

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
     where r.state = 'running' and r.lease_expires_at is not null  -- job_lease_idx
     group by r.queue
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
-- Read-only; reads job_retention_idx over the window. Errors: invalid_argument (SJ001)
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
       -- every state, named: job_retention_idx is read once per state, by age
       and f.state = any (pg_catalog.enum_range(null::jobs.job_state))
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

-- === sql/95_retention.sql ===

-- ---------------------------------------------------------------------------
-- jobs.purge_state_rounds(state, queues, cuts, awaits, dcut, dawait, maxcut, left, cap,
-- dry_run) -> (deleted, staged, remaining): jobs.purge's work for one final state on a
-- distributed install (jobs.distributed()), where no statement may lock jobs of several
-- shards nor read the jobs once per job: the eligible jobs read first, oldest first,
-- without locks (up to what the call deletes and counts), less those a live child or a
-- live parent refers to (two reads); then the oldest `left` of them deleted a shard at
-- a time, rows others hold skipped; then their staged outbox rows. remaining: the
-- eligible ones left, up to cap (all of them in a dry run). Private.
create or replace function jobs.purge_state_rounds(
  p_state   jobs.job_state,
  p_queues  text[],
  p_cuts    timestamptz[],
  p_awaits  timestamptz[],
  p_dcut    timestamptz,
  p_dawait  timestamptz,
  p_maxcut  timestamptz,
  p_left    integer,
  p_cap     bigint,
  p_dry_run boolean,
  out deleted   bigint,
  out staged    bigint,
  out remaining bigint
)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_ids     bigint[];
  v_parents bigint[];
  v_ok      bigint[];
  v_gone    bigint[] := '{}';
  v_buckets smallint[];
  v_round   bigint[];
begin
  select pg_catalog.array_agg(e.id order by e.o), pg_catalog.array_agg(e.parent_id order by e.o)
    into v_ids, v_parents
    from (select j.id, j.parent_id,
                 pg_catalog.row_number() over (order by j.finished_at, j.id) as o
            from jobs.job j
           where j.state = p_state and j.finished_at is not null and j.finished_at < p_maxcut
             and j.finished_at < coalesce(p_cuts[pg_catalog.array_position(p_queues, j.queue)], p_dcut)
             and (not j.settle_watched
                  or j.finished_at < coalesce(p_awaits[pg_catalog.array_position(p_queues, j.queue)],
                                              p_dawait))
           order by j.state, j.finished_at
           limit case when p_dry_run then null else p_left + p_cap end) e;
  v_ok := array(
    select c.id
      from unnest(v_ids, v_parents) with ordinality as c(id, parent, o)
     where c.id not in (select k.parent_id from jobs.job k
                         where k.parent_id = any (v_ids)
                           and k.state in ('ready', 'running', 'parked', 'interrupted'))
       and (c.parent is null
            or c.parent not in (select p.id from jobs.job p
                                 where p.id = any (v_parents)
                                   and p.state in ('ready', 'running', 'parked', 'interrupted')))
     order by c.o);
  staged := 0;
  if not p_dry_run and p_left > 0 then
    for v_buckets, v_round in select b.buckets, b.ids from jobs.ids_by_shard(v_ok[1:p_left]) b loop
      with victims as (
        select j.id from jobs.job j
         where j.id = any (v_round) and j.bucket = any (v_buckets)
           and j.state = p_state and j.finished_at is not null
           for update skip locked
      ), gone as (
        delete from jobs.job j using victims v
         where j.id = v.id and j.bucket = any (v_buckets)
        returning j.id
      )
      select v_gone || pg_catalog.array_agg(g.id) into v_gone from gone g;
    end loop;
    -- the outbox rows that created them carry their ids
    delete from jobs.outbox o where o.id = any (v_gone) and o.published_at is not null;
    get diagnostics staged = row_count;
  end if;
  deleted := pg_catalog.cardinality(v_gone);
  remaining := pg_catalog.cardinality(v_ok) - deleted;
  if not p_dry_run then
    remaining := least(remaining, p_cap);
  end if;
end
$$;

comment on function jobs.purge_state_rounds(jobs.job_state, text[], timestamptz[], timestamptz[], timestamptz, timestamptz, timestamptz, integer, bigint, boolean) is
  'Private: jobs.purge''s work for one final state on a distributed install.';

-- jobs.purge_unreferenced(id, parent_id) -> true when no live job refers to this one:
-- none of its children is live, and its parent (if any) is not live. Two index probes
-- (job_parent_idx, job_pkey) per row: written as a function so that the planner cannot
-- turn them into anti joins over a scan of every live job.
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_unreferenced(p_id bigint, p_parent_id bigint)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  return not exists (select 1 from jobs.job c
                      where c.parent_id = p_id
                        and c.state in ('ready', 'running', 'parked', 'interrupted'))
     and (p_parent_id is null
          or not exists (select 1 from jobs.job p
                          where p.id = p_parent_id
                            and p.state in ('ready', 'running', 'parked', 'interrupted')));
end
$$;

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

    if jobs.distributed() then  -- (a shard at a time: jobs.purge_state_rounds)
      select r.deleted, r.staged, r.remaining into v_n, v_o, v_bound
        from jobs.purge_state_rounds(v_state, v_queues, v_cuts, v_awaits, v_dcut, v_dawait,
                                     v_maxcut, v_left, v_cap, p_dry_run) r;
      v_jobs := v_jobs + v_n;
      v_outbox := v_outbox + v_o;
      v_left := v_left - v_n::integer;
      v_jrest := v_jrest + v_bound;
      continue;
    end if;
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
                             from jobs.event_wait w
                             join jobs.job j on j.id = w.job_id
                                            and (not jobs.distributed() or j.bucket = w.bucket)
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
  -- locked now is skipped (and one deleted under a locker is made again by it), and so
  -- is the settle key of a job that still runs under its claim (sql/40_settle.sql: a
  -- run of more than a day may need it again).
  if not p_dry_run and not jobs.distributed() then
    delete from jobs.lock_key k
     using (select o.key from jobs.lock_key o
             where o.created_at < v_now - interval '1 day'
               and not (o.key like 'settle|%' and exists (
                          select 1 from jobs.job j
                           where j.id = pg_catalog.split_part(o.key, '|', 2)::bigint
                             and j.claim = pg_catalog.split_part(o.key, '|', 3)::bigint
                             and j.state = 'running'))
             limit 1000
               for update skip locked) as old
     where k.key = old.key;
  elsif not p_dry_run then
    -- (distributed: the settle keys of running jobs read first, in one read of the jobs)
    delete from jobs.lock_key k
     using (select o.key from jobs.lock_key o
             where o.created_at < v_now - interval '1 day'
               and o.key not in (
                     select 'settle|' || j.id || '|' || j.claim from jobs.job j
                      where j.state = 'running'
                        and j.id = any (array(
                              select pg_catalog.split_part(s.key, '|', 2)::bigint
                                from jobs.lock_key s
                               where s.key like 'settle|%'
                                 and s.created_at < v_now - interval '1 day')))
             limit 1000
               for update skip locked) as old
     where k.key = old.key;
  end if;

  return query values ('job'::text, v_jobs, v_jrest),
                      ('outbox'::text, v_outbox, null::bigint),
                      ('event'::text, v_events, v_erest);
end
$$;

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

select jobs.install_roles();
