-- sqljobs: claim.
--
-- jobs.claim_v2(queues, worker, limit, lease_s, options) -> up to `limit` running jobs,
-- each with its actor (who asked for it, sql/00_schema.sql) in the last column.
-- jobs.claim (version 1's columns, without the actor) is a thin wrapper over it, for
-- the clients of schema versions 1 and 2: one body, two faces.
--
-- One call, one autocommit statement from the client, four phases:
--   RECOVER  jobs.recover(queues) (below): lapsed leases back to ready (attempt
--            counted, place in line kept) or buried, due parked jobs woken, free limit
--            slots handed to waiters. The one write of the attempt history in a claim.
--   PICK     per unpaused queue, the first `limit` claimable rows in (priority, run_at,
--            id) order from job_claimable_idx, `for update skip locked`; then the first
--            `limit` of those across queues. Finished rows are never read.
--   LIMITS   only once any limit exists (sql/35_limits.sql): no queue whose global or
--            queue limit is full is picked from; twice as many candidates are picked,
--            and jobs.admit lets through those every limit has room for; it blocks,
--            defers or fails the others (never as an attempt).
--   CLAIM    each picked job: running, attempt + 1, a new claim token (greater than
--            the last, its low 32 bits random: sql/00_schema.sql, "Fencing tokens"),
--            lease_expires_at = now + lease_s, worker recorded; first_started_at set
--            on the first claim (the event-wait cursor, sql/60_events.sql). Answers
--            the claim time (started_at) and the job's stored steps (sql/50_steps.sql).
--
-- options: {"names": [..]} claims only those job names (a worker claims what it can
--          run; others wait for a worker that knows them).
--          {"recover": false} skips the RECOVER phase: a busy worker claiming again as
--          slots free leaves recovery to its periodic (poll) claims, which keep the
--          default true, and calls jobs.recover on its poll when it has no slot free
--          to claim with: recovery stays within lease TTL + one poll.
--          {"after": {"<queue>": [priority, "<run_at>"], ..}} a claim cursor: in that
--          queue, pick only jobs at or after that place in line, and jobs of better
--          priority. A scan from the head steps over every entry of a job claimed
--          since the oldest snapshot still open (no vacuum may remove them: a report,
--          a session idle in transaction); a cursor starts past them. What it misses
--          is a job made claimable behind it (a lapsed lease recovered, a job handed
--          back or interrupted, a limit's waiter freed, an enqueue whose run_at is
--          older than the cursor): a claim without a cursor takes those. The worker
--          keeps one per queue from the `run_at` each claim answers, a few seconds
--          back (commit order is not run_at order), and asks jobs.claimable_behind
--          (below) on each poll whether it must read a queue from its head again
--          (pyclient/sqljobs/_runtime/worker/claiming.py). Ignored when limits exist
--          (their freed waiters are all behind) and by a claim whose RECOVER phase
--          moved a job.
-- Locks: row locks only, all taken with skip locked; with limits, each limit group's
-- lock row of the candidates too (jobs.lock_keys, in group order), held to commit.
-- Errors: queues_required (SJ005) for no queue; invalid_argument (SJ001) for a missing
--         worker, limit outside 1..1000, lease_s <= 0, or a bad option.

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

comment on function jobs.claim(text[], text, integer, double precision, jsonb) is
  'Claim up to p_limit jobs from p_queues under a new claim token and a lease; recovers lapsed leases.';

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
