-- sqljobs: what metrics and `sqljobs stats` read (docs/howto-metrics.md).
--
-- jobs.queue_gauges() and jobs.limit_gauges() answer a Prometheus scrape: they read only
-- the partial indexes of LIVE rows (and of dead ones), never the finished rows, so their
-- cost follows the backlog and not the table's history. (jobs.queue_stats_v2() in
-- sql/90_operator.sql also counts the succeeded, failed and cancelled rows of a recent
-- window, for the `sqljobs queues` table and not for a scrape every few seconds.)
-- jobs.stats(window_s) reads the finished rows of a recent window through
-- job_retention_idx, one state at a time: its cost follows the throughput times the
-- window.

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

comment on function jobs.queue_gauges() is
  'Per queue (every declared queue, and every queue with a live or dead job), from the live rows'' indexes: ready (due), scheduled (future), running, parked, dead, blocked on a limit, oldest ready age in seconds, and demand (running + due jobs a worker could take).';

-- ---------------------------------------------------------------------------
-- jobs.limit_gauges() -> one row per limit (and 'sqljobs.throttle' for the throttled
-- groups of every job): jobs.limit_stats() summed over the limit's groups, so a metric
-- label is the limit's name and never a group key (a tenant, a payload value).
--   groups       groups in use or waiting
--   running      jobs holding a slot of the limit
--   concurrency  slots per group (null: a rate limit only)
--   waiting      jobs waiting for a slot (or held back by a full global or queue limit)
--   deferred     jobs a rate deferred (run_at ahead)
--   recent_starts  starts inside the rate window, over its groups
-- A declared limit with nothing in use is listed with zeros. (PL/pgSQL, so that a
-- revision may create it before jobs.limit_stats: its body is bound at the first call.)
-- ---------------------------------------------------------------------------
create or replace function jobs.limit_gauges()
returns table (limit_name text, groups bigint, running bigint, concurrency integer,
               waiting bigint, deferred bigint, recent_starts bigint)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.limit_gauges');  -- (sql/15_tenancy.sql)
  return query
  with used as (
    select s.limit_name, pg_catalog.count(*) as groups, pg_catalog.sum(s.running) as running,
           pg_catalog.sum(s.waiting) as waiting, pg_catalog.sum(s.deferred) as deferred,
           pg_catalog.sum(s.recent_starts) as recent_starts
      from jobs.limit_stats() s
     group by s.limit_name
  ),
  names as (
    select u.limit_name from used u union select l.name from jobs.limit l
  )
  select n.limit_name, coalesce(u.groups, 0), coalesce(u.running, 0)::bigint, l.concurrency,
         coalesce(u.waiting, 0)::bigint, coalesce(u.deferred, 0)::bigint,
         coalesce(u.recent_starts, 0)::bigint
    from names n
    left join used u on u.limit_name = n.limit_name
    left join jobs.limit l on l.name = n.limit_name
   order by n.limit_name;
end
$$;

comment on function jobs.limit_gauges() is
  'Per limit: jobs.limit_stats() summed over its groups (groups, running, concurrency per group, waiting, deferred, recent starts).';

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

comment on function jobs.stats(double precision) is
  'Per queue over the last window_s seconds: jobs finished by state, per second, and p50/p95 of enqueue-to-start and of run time; SJ001 for a bad window.';
