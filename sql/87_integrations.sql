-- sqljobs: the state the integration factories share across workers
-- (docs/howto-webhooks.md).
--
-- An outbound webhook (`app.webhook(...)` in Python) is an ordinary job: ONE event to
-- ONE endpoint, one HTTP request per attempt, retried by the job's policy. What must be
-- shared with every worker and with operators lives here:
--   * jobs.webhook_endpoint: an endpoint an operator disabled (no row: enabled). A
--     disabled endpoint's jobs fail fast, before any socket opens;
--   * jobs.webhook_attempt: one row per attempt that reached a verdict (delivered, a
--     status to retry, a refusal, a transport error, disabled, tenant refused), written
--     by the running job BEFORE it raises. A cancelled attempt writes nothing.
--
-- Who writes what:
--   * the running job (sqljobs_worker), fenced on its claim like jobs.progress:
--     webhook_attempt_put; it reads webhook_disabled before each attempt;
--   * the operator (sqljobs_operator): webhook_disable, webhook_enable;
--   * everyone who may read (sqljobs_reader): webhook_attempts, webhook_endpoints.
--
-- The excerpt is the first bytes of the endpoint's answer, cut to 512 characters here
-- whatever the client sends, and redacted by the client (the signing secrets, the
-- signature and the event's sensitive values are replaced) before it is sent.
--
-- Tenancy: an attempt carries its job's tenant; a disabled endpoint row carries the
-- endpoint's. A bound session reads only its tenant's rows and is refused another
-- tenant's (tenant_refused, SJ018).
--
-- SQLSTATEs: SJ001 invalid_argument, SJ004 lease_lost (the claim does not hold), SJ018
-- tenant_refused. SJ050 webhook_disabled, SJ051 webhook_rejected and SJ052
-- webhook_tenant_refused are the client's (never raised here).

create table if not exists jobs.webhook_endpoint (
  name        text        primary key,       -- the webhook's job name
  tenant      text,                          -- the endpoint's tenant (null: none)
  reason      text        not null,          -- why it was disabled
  disabled_by text        not null,
  disabled_at timestamptz not null
);

comment on table jobs.webhook_endpoint is
  'Disabled outbound webhook endpoints (no row: enabled), sql/87_integrations.sql.';

create table if not exists jobs.webhook_attempt (
  job_id     bigint      not null references jobs.job (id) on delete cascade,
  attempt    integer     not null,           -- the job's attempt number
  endpoint   text        not null,
  tenant     text,
  outcome    text        not null
             check (outcome in ('delivered', 'retry', 'rejected', 'error', 'disabled',
                                'refused')),
  status     integer,                        -- the HTTP status; null: no answer
  latency_ms integer     not null,
  excerpt    text,                           -- redacted, at most 512 characters
  at         timestamptz not null,
  primary key (job_id, attempt)
);

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

-- ===================================================================================
-- The ledger (`app.ledger(...)`, docs/howto-ledger.md): double-entry postings.
--
-- A posting is a set of lines (account, currency, amount: a debit positive, a credit
-- negative) whose amounts sum to zero per currency, written whole by ONE call,
-- jobs.ledger_post, inside ONE durable step of the job that posts it. Its key is unique
-- per (ledger, tenant): the same key with the same lines answers the posting already
-- written (a replayed step, a retried job: posted once), the same key with other lines
-- is refused (ledger_posting_conflict, SJ054). Lines that do not balance are refused
-- (ledger_unbalanced, SJ053) and nothing is written. Postings are never updated or
-- deleted by sqljobs (a correction is another posting).
--
-- Who writes what: the running job (sqljobs_worker), fenced on its claim; everyone who
-- may read (sqljobs_reader): ledger_balances, ledger_posting. A bound session reads and
-- writes only its tenant's postings.
-- ===================================================================================

create table if not exists jobs.ledger_posting (
  id        bigint      generated always as identity primary key,
  ledger    text        not null,
  tenant    text        not null default '',   -- '' : no tenant (a key needs a value)
  key       text        not null,
  memo      text,
  job_id    bigint,                            -- the job that posted it (kept after it)
  posted_at timestamptz not null,
  unique (ledger, tenant, key)
);

comment on table jobs.ledger_posting is
  'Ledger postings, one per (ledger, tenant, key), sql/87_integrations.sql.';

create table if not exists jobs.ledger_line (
  posting_id bigint  not null references jobs.ledger_posting (id),
  line       integer not null,
  account    text    not null,
  currency   text    not null,
  amount     numeric not null check (amount <> 0),
  primary key (posting_id, line)
);

create index if not exists ledger_line_account on jobs.ledger_line (account, currency);

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

-- ===================================================================================
-- Data subjects (docs/howto-gdpr.md): the audit of every erase.
--
-- `app.subject_erase(subject)` (Python, on the schema owner's connection: it rewrites
-- rows of jobs.job, step, event, outbox ... and the app's own mapped tables) writes ONE
-- row here in the same transaction: who asked, when, a digest of the subject (never the
-- subject itself) and what was erased as counts and paths (never a value). Rows are
-- only ever added.
-- ===================================================================================

create table if not exists jobs.subject_audit (
  id           bigint      generated always as identity primary key,
  action       text        not null check (action in ('erase')),
  subject_hash text        not null,          -- sha256 of the subject, hex
  actor        text,                          -- who asked (the caller's word)
  session_role text        not null,          -- the login role that ran it
  at           timestamptz not null,
  erased       jsonb       not null           -- counts and paths, never values
);

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

-- ===================================================================================
-- Stream consumers (`app.consumer(...)`, docs/howto-consumers.md): the cursor of each.
--
-- A consumer's turn reads a batch from its source, applies the handler's effects and
-- moves its cursor in ONE transaction of the application's database, so a crash repeats
-- at most the turn that had not committed. consumer_cursor locks the consumer's row for
-- the turn (a second run of the same consumer waits for the first turn to end, then
-- reads the cursor it left); consumer_advance moves it, fenced on the turn number it
-- read. Written by the consumer's job (sqljobs_worker); read by consumers() (reader).
-- ===================================================================================

create table if not exists jobs.consumer (
  name       text        primary key,
  cursor     jsonb,                          -- where the next turn reads from (null: start)
  turn       bigint      not null default 0, -- turns committed
  rows_done  bigint      not null default 0,
  updated_at timestamptz not null
);

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
