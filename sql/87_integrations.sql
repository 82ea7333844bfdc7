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
