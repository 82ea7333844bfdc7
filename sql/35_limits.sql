-- sqljobs: flow control — concurrency and rate limits enforced by the claim, and named
-- leases (fenced locks). docs/howto-limits.md says what each guarantees;
-- docs/design/limits.md why it is built this way.
--
-- LIMITS (jobs.limit). A limit applies to the jobs of its scope; each job it applies to
-- belongs to one GROUP of it, '<limit>|<key>' (the key: the job's tenant for a tenant
-- limit without a target, the payload value at key_path for a key limit, '' else). A
-- job enqueued with throttle= belongs to the group 'sqljobs.throttle|<name>|<tenant>|<group>'
-- (the group that singleton and debounce act on too).
--   concurrency  at most N jobs of a group running at once. A running job holds its
--                groups (`slots`, and a row per group in jobs.slot); a group's use is
--                a count of its rows, so a lapsed lease holds its slot until lease
--                recovery moves the job, and then frees it.
--   rate         at most N starts of a group in any window of per_s seconds (a sliding
--                window over the group's last N starts, jobs.limit_start).
-- The claim admits candidates in its usual order while every group of theirs has room.
-- A candidate refused by a concurrency limit waits: `blocked_on` = the full group takes
-- it out of job_claimable_idx (the claim never reads it again) until a slot of that
-- group frees (trigger job_slots_freed, and a sweep in every recovering claim). A full
-- global or queue limit holds back every job of the claim (or of its queue) alike: it
-- leaves them claimable, the claim skips picking while it is full, and its freed slot
-- wakes the queues instead. One refused by a rate limit is deferred (run_at = when the
-- window lets it start). None of this counts as an attempt. A key limit with when_busy = 'fail' fails the job for good
-- instead (last_error kind key_busy, SQLSTATE SJ012), but only on evidence: another
-- run of the group holds a live lease; held by lapsed leases only, it waits.
-- Locks: the claim takes each group's lock row (jobs.lock_key, skip locked) of its
-- candidates, in group order, before it counts their use: no two claims admit into one
-- group at once, so no two can both take its last slot, and a claim that finds a group
-- held leaves that group's candidates for the next claim instead of waiting.
--
-- LEASES (jobs.lease). A named lease has a holder, a TTL and a fencing token that
-- moves every time the lease changes hands (never reset). jobs.lease_acquire takes a
-- free or lapsed lease (or renews one the caller holds), jobs.lease_renew extends it
-- while the caller still holds it under its token, jobs.lease_release gives it up. A
-- resource guarded by a lease checks the token it is handed against the highest it
-- has seen, so a holder that lost the lease (a pause longer than the TTL) cannot write
-- with its old token. The scheduler's leadership is the lease named 'scheduler'.

-- ---------------------------------------------------------------------------
-- Leases
-- ---------------------------------------------------------------------------

-- jobs.lease_take(name, holder, ttl_s, renew) -> the fencing token, or null while a
-- live lease holds it. Private: what jobs.lease_acquire (an application's lock) and
-- jobs.leader_acquire (the scheduler's leadership) share. A free, released or lapsed
-- lease is taken under a new token (greater than the last, its low 32 bits random:
-- sql/00_schema.sql, "Fencing tokens"), even by the holder it lapsed from; with `renew`,
-- the holder of a live lease renews it under the same token (the leader's habit: its
-- role alone may call it). Locks: the lease row.
create or replace function jobs.lease_take(p_name text, p_holder text, p_ttl_s double precision,
                                           p_renew boolean)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now   timestamptz := jobs.now();
  v_token bigint;
begin
  perform jobs.check_lease_args(p_name, p_holder, p_ttl_s);
  insert into jobs.lease as l (name, holder, token, lease_expires_at, acquired_at)
  values (p_name, p_holder, (1::bigint << 32) | jobs.random32(),
          v_now + pg_catalog.make_interval(secs => p_ttl_s), v_now)
  on conflict (name) do update
     set holder = excluded.holder,
         token = case when l.holder = excluded.holder and l.lease_expires_at > v_now
                      then l.token
                      else (((l.token >> 32) + 1) << 32) | (excluded.token & 4294967295) end,
         acquired_at = case when l.holder = excluded.holder and l.lease_expires_at > v_now
                            then l.acquired_at else excluded.acquired_at end,
         lease_expires_at = excluded.lease_expires_at
   where l.holder is null or l.lease_expires_at <= v_now
      or (p_renew and l.holder = excluded.holder)
  returning l.token into v_token;
  return v_token;
end
$$;

comment on function jobs.lease_take(text, text, double precision, boolean) is
  'Private: take a free or lapsed lease under a new token (with renew: or renew the holder''s live one).';

-- jobs.check_lock_name(name): an application's lock may not be a lease the engine
-- keeps for itself: the scheduler's leadership ('scheduler') and any 'sqljobs.' name.
create or replace function jobs.check_lock_name(p_name text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_name = 'scheduler' or pg_catalog.starts_with(p_name, 'sqljobs.') then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease %s is the engine''s own (the scheduler''s leadership): '
                        'name a lock otherwise', p_name));
  end if;
end
$$;

-- jobs.lease_acquire(name, holder, ttl_s) -> the fencing token, or null while a live
-- lease holds it (this caller's too: a holder renews with jobs.lease_renew and its
-- token, never by its name, which jobs.leases() shows to everyone). A free, released
-- or lapsed lease is taken under a new token. Locks: the lease row.
-- Errors: invalid_argument (SJ001) for an empty name or holder, one of the engine's own
-- names, a ttl that is not positive and finite.
create or replace function jobs.lease_acquire(p_name text, p_holder text, p_ttl_s double precision)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_acquire');  -- (sql/15_tenancy.sql)
  perform jobs.check_lock_name(p_name);
  return jobs.lease_take(p_name, p_holder, p_ttl_s, false);
end
$$;

comment on function jobs.lease_acquire(text, text, double precision) is
  'Take a free or lapsed named lease; answers its new fencing token, or null while a live lease holds it.';

-- jobs.lease_renew(name, holder, token, ttl_s) -> true while the caller still holds the
-- lease under that token (it is extended to now + ttl_s); false, changing nothing, once
-- another holder took it. Errors as lease_acquire.
create or replace function jobs.lease_renew(p_name text, p_holder text, p_token bigint,
                                            p_ttl_s double precision)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_renew');  -- (sql/15_tenancy.sql)
  perform jobs.check_lease_args(p_name, p_holder, p_ttl_s);
  perform jobs.check_lock_name(p_name);
  update jobs.lease as l
     set lease_expires_at = jobs.now() + pg_catalog.make_interval(secs => p_ttl_s)
   where l.name = p_name and l.holder = p_holder and l.token = p_token;
  return found;
end
$$;

comment on function jobs.lease_renew(text, text, bigint, double precision) is
  'Extend a lease the caller holds under its token; false once another holder took it.';

-- jobs.lease_give_up(name, holder, token) -> true when released. Private: what
-- jobs.lease_release and jobs.leader_release share. Fenced on holder and token: a
-- deposed holder releases nothing. The token is kept, so the next is higher.
create or replace function jobs.lease_give_up(p_name text, p_holder text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  update jobs.lease as l
     set holder = null, lease_expires_at = null
   where l.name = p_name and l.holder = p_holder and l.token = p_token;
  return found;
end
$$;

-- jobs.lease_release(name, holder, token) -> true when released (jobs.lease_give_up).
create or replace function jobs.lease_release(p_name text, p_holder text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_release');  -- (sql/15_tenancy.sql)
  perform jobs.check_lock_name(p_name);
  return jobs.lease_give_up(p_name, p_holder, p_token);
end
$$;

comment on function jobs.lease_release(text, text, bigint) is
  'Give up a lease (fenced on holder and token).';

-- jobs.lease_holds(name, token) -> true while `token` is the token of the live lease
-- `name`. It locks the lease row FOR SHARE to the end of the caller's transaction, so a
-- takeover waits for that transaction: a write in this database guarded by it
-- (`update ... where jobs.lease_holds('name', $token)`) never lands after the lease
-- moved on. (A resource elsewhere keeps the highest token it has seen and refuses lower.)
create or replace function jobs.lease_holds(p_name text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.lease_holds');  -- (sql/15_tenancy.sql)
  perform jobs.check_lock_name(p_name);
  return coalesce((select l.holder is not null and l.lease_expires_at > jobs.now()
                          and l.token = p_token
                     from jobs.lease l
                    where l.name = p_name
                      for share), false);
end
$$;

comment on function jobs.lease_holds(text, bigint) is
  'True while the token holds the live lease; locks it for share so a fenced write commits first.';

-- jobs.leases() -> every lease: name, holder, lease_expires_at, acquired_at, live. Not
-- its token: the proof of holding it is its holder's alone (sql/00_schema.sql).
create or replace function jobs.leases()
returns table (name text, holder text, lease_expires_at timestamptz,
               acquired_at timestamptz, live boolean)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.leases');  -- (sql/15_tenancy.sql)
  select l.name, l.holder, l.lease_expires_at, l.acquired_at,
         l.holder is not null and l.lease_expires_at > jobs.now()
    from jobs.lease l
   order by l.name
$$;

comment on function jobs.leases() is 'Named leases and whether each is live.';

-- Shared guard of the lease functions.
create or replace function jobs.check_lease_args(p_name text, p_holder text,
                                                 p_ttl_s double precision)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_name is null or p_name = '' or pg_catalog.octet_length(p_name) > 200
     or p_holder is null or p_holder = '' or pg_catalog.octet_length(p_holder) > 200 then
    perform jobs.raise_error('invalid_argument',
      'a lease needs a name and a holder, each of at most 200 bytes');
  end if;
  -- bounded (about 31 years): now + ttl must stay a timestamp (NaN is refused too)
  if p_ttl_s is null or not (p_ttl_s > 0 and p_ttl_s <= 1e9) then
    perform jobs.raise_error('invalid_argument', 'ttl_s must be positive and at most 1e9 seconds');
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- Limits: define, remove, list
-- ---------------------------------------------------------------------------

-- jobs.limit_problem(name, definition) -> what is wrong with a limit definition, or null.
create or replace function jobs.limit_problem(p_name text, p_def jsonb)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_scope text := p_def->>'scope';
begin
  if p_name is null or p_name = '' or pg_catalog.length(p_name) > 200 or p_name like '%|%' then
    return 'a limit name is 1 to 200 characters, without |';
  end if;
  if p_name like 'sqljobs.%' then
    return 'limit names starting with sqljobs. are the engine''s own';
  end if;
  if p_def is null or pg_catalog.jsonb_typeof(p_def) <> 'object' then
    return 'a limit is a JSON object';
  end if;
  if p_def - array['scope', 'target', 'key', 'concurrency', 'rate', 'when_busy', 'origin'] <> '{}' then
    return pg_catalog.format('unknown field %L (a limit takes scope, target, key, concurrency, '
                             'rate, when_busy, origin)',
      (select k from pg_catalog.jsonb_object_keys(
         p_def - array['scope', 'target', 'key', 'concurrency', 'rate', 'when_busy', 'origin']) k
        limit 1));
  end if;
  if v_scope is null or v_scope not in ('global', 'queue', 'name', 'tenant', 'key') then
    return 'scope must be global, queue, name, tenant or key';
  end if;
  if pg_catalog.jsonb_typeof(p_def->'target') not in ('string', 'null') or p_def->>'target' = '' then
    return 'target must be a non-empty string';
  end if;
  if v_scope in ('queue', 'name', 'key') and p_def->>'target' is null then
    return pg_catalog.format('a %s limit needs a target (the %s)', v_scope,
                             case v_scope when 'queue' then 'queue' else 'job name' end);
  end if;
  if v_scope = 'global' and p_def->>'target' is not null then
    return 'a global limit takes no target';
  end if;
  if (v_scope = 'key') <> (p_def ? 'key') then
    return 'a key limit, and only it, needs key: the payload field (a name, or a path as a list of names)';
  end if;
  if v_scope = 'key' and not (
       (pg_catalog.jsonb_typeof(p_def->'key') = 'string' and p_def->>'key' <> '')
       or (pg_catalog.jsonb_typeof(p_def->'key') = 'array'
           and pg_catalog.jsonb_array_length(p_def->'key') between 1 and 10
           and not p_def->'key' @? '$[*] ? (@.type() != "string" || @ == "")')) then
    return 'key must be a payload field name, or a path as a list of names';
  end if;
  if not (p_def ? 'concurrency' or p_def ? 'rate') then
    return 'a limit needs concurrency, rate, or both';
  end if;
  if p_def ? 'concurrency' and not (pg_catalog.jsonb_typeof(p_def->'concurrency') = 'number'
       and (p_def->'concurrency')::numeric % 1 = 0
       and (p_def->'concurrency')::numeric between 1 and 1000000) then
    return 'concurrency must be a whole number from 1 to 1000000';
  end if;
  if p_def ? 'rate' and not (pg_catalog.jsonb_typeof(p_def->'rate') = 'object'
       and (p_def->'rate') - array['n', 'per_s'] = '{}'
       and pg_catalog.jsonb_typeof(p_def->'rate'->'n') = 'number'
       and (p_def->'rate'->'n')::numeric % 1 = 0
       and (p_def->'rate'->'n')::numeric between 1 and 100000
       and pg_catalog.jsonb_typeof(p_def->'rate'->'per_s') = 'number'
       and (p_def->'rate'->'per_s')::numeric > 0
       and (p_def->'rate'->'per_s')::numeric <= 31536000) then
    return 'rate must be {"n": starts (1 to 100000), "per_s": seconds (more than 0, at most a year)}';
  end if;
  if p_def ? 'when_busy' and (p_def->>'when_busy' is null
                              or p_def->>'when_busy' not in ('wait', 'fail')) then
    return 'when_busy must be wait or fail';
  end if;
  if p_def->>'when_busy' = 'fail' and (v_scope <> 'key' or not p_def ? 'concurrency') then
    return 'when_busy fail is for a key limit with concurrency';
  end if;
  if p_def ? 'origin' and (p_def->>'origin' is null or p_def->>'origin' not in ('declared', 'api')) then
    return 'origin must be declared or api';
  end if;
  return null;
end
$$;

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

comment on function jobs.limit_put(text, jsonb) is
  'Define (or replace) a concurrency and/or rate limit; true when it is new.';

-- jobs.limit_remove(name): the limit goes; jobs waiting on it are claimable again.
-- Errors: limit_not_found (SJ013).
create or replace function jobs.limit_remove(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.limit_remove');  -- (sql/15_tenancy.sql)
  delete from jobs.limit l where l.name = p_name;
  if not found then
    perform jobs.raise_error('limit_not_found', pg_catalog.format('no limit named %L', p_name));
  end if;
  perform jobs.unblock(array(
    select b.id from jobs.job b
     where pg_catalog.split_part(b.blocked_on, '|', 1) = p_name
       and b.state in ('ready', 'interrupted')));
end
$$;

comment on function jobs.limit_remove(text) is
  'Remove a limit; the jobs waiting on it become claimable. SJ013 when there is none.';

-- jobs.limits() -> every limit as defined.
create or replace function jobs.limits()
returns table (name text, scope text, target text, key_path text[], concurrency integer,
               rate_n integer, rate_per_s double precision, when_busy text, origin text,
               updated_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.limits');  -- (sql/15_tenancy.sql: a tenant's limit names others)
  select l.name, l.scope, l.target, l.key_path, l.concurrency, l.rate_n, l.rate_per_s,
         l.when_busy, l.origin, l.updated_at
    from jobs.limit l
   where l.scope <> 'throttle'
   order by l.name
$$;

comment on function jobs.limits() is 'The concurrency and rate limits, as defined.';

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

comment on function jobs.limit_stats() is
  'Per limit group in use: concurrency and running, waiting jobs, rate and recent starts.';

-- ---------------------------------------------------------------------------
-- The claim's admission (called by jobs.claim when any limit exists)
-- ---------------------------------------------------------------------------

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
