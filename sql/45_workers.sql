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
declare
  v_login  text;
  v_tenant text;
  v_bound  text := jobs.bound_tenant();
begin
  select w.login, w.tenant into v_login, v_tenant from jobs.worker w where w.id = p_id for update;
  if not found then
    return false;
  end if;
  -- a bound session (an operator's too) reaches only its own tenant's rows
  if v_bound is not null and v_tenant is distinct from v_bound then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('worker %s is not of tenant %s, to which this session is bound',
                        p_id, v_bound));
  end if;
  -- another login's row: an operator's to remove, not a worker's
  if v_login is not null and v_login <> session_user and not jobs.caller_is('sqljobs_operator') then
    perform jobs.raise_error('worker_id_taken',
      pg_catalog.format('worker %s is registered by another login role', p_id));
  end if;
  delete from jobs.worker w where w.id = p_id;
  return true;
end
$$;

comment on function jobs.worker_stop(text) is
  'Deregister a worker (the login that registered it, or an operator); true when it was registered.';

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

comment on function jobs.workers() is
  'Live workers (heartbeat not expired) with their queues, job names and running count.';

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

comment on function jobs.unserved_jobs() is
  'Waiting jobs, per queue and name, that no live worker declares (so none will claim them).';
