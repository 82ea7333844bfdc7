-- sqljobs: retention — jobs.purge deletes finished jobs by age, in bounded batches
-- (docs/howto-retention.md).
--
-- Policy. An age per final state (succeeded, failed, dead, cancelled), `awaited` (the
-- least a job someone awaited through app.result is kept) and `events`, in seconds.
-- Where an age comes from, the most specific first: the call's p_policy for the job's
-- queue ({"queues": {"mail": {...}}}), the stored row of the queue (jobs.retention),
-- the call's p_policy top level, the stored '*' row, the built-in default
-- (jobs.retention_defaults). So a queue kept longer on purpose stays so under a
-- call-wide age; a call overrides it only by naming the queue.
-- "forever" (stored as 'Infinity') keeps a state for good.
--
-- Rules: a job is purged only when ALL of these hold.
--   1. It is final and finished_at is older than its (queue, state) age.
--   2. Awaited: when settle_watched (someone called jobs.watch_outcome), finished_at is
--      also older than the awaited age, so a waiter that was told it settled still finds
--      its outcome.
--   3. A parent: none of its children (parent_id) is live.
--   4. A child: its parent is not live (the parent's step_invoke reads the child row,
--      and would enqueue it anew if the row were gone).
-- What goes with a job: its steps and event waits (on delete cascade), and its outbox
-- row (the staged row that created it shares its id). An outbox row that found its key
-- already taken (deduped), or whose job is kept longer, is left to the relay's own age
-- sweep (jobs.purge_outbox): jobs.purge subsumes nothing else of the outbox.
-- Schedule history is the jobs the schedules fired: they go by the rules above (the
-- watermark, not the job, is what stops an occurrence firing twice).
-- Events go by age (the '*' row's events_s), never one created at or after the first
-- start of a live job with an open event wait (its look-back cursor).
--
-- Bound: one call deletes at most p_max rows (jobs and events; a job's steps, waits and
-- outbox row go with it), oldest first, one final state at a time (job_retention_idx),
-- skipping rows another transaction holds (skip locked): no long lock, no rewrite.
-- Concurrent purges are safe; each takes what the others do not hold.

-- ---------------------------------------------------------------------------
-- jobs.retention_defaults() -> the built-in policy (jsonb, seconds).
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_defaults()
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select '{"succeeded": 86400, "failed": 2592000, "dead": 2592000, "cancelled": 604800,
           "awaited": 3600, "events": 604800}'::jsonb
$$;

comment on function jobs.retention_defaults() is
  'The built-in retention policy: succeeded 1 day, cancelled 7 days, failed and dead 30 days, awaited 1 hour, events 7 days.';

-- ---------------------------------------------------------------------------
-- jobs.retention_age(value, what) -> seconds: a policy value read. JSON null or absent:
-- null (inherit); "forever": 'Infinity'; a number >= 0. Anything else raises
-- invalid_retention (SJ014) naming `what`.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_age(p_value jsonb, p_what text)
returns double precision
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_value is null or pg_catalog.jsonb_typeof(p_value) = 'null' then
    return null;
  elsif p_value = '"forever"'::jsonb then
    return 'Infinity'::double precision;
  elsif pg_catalog.jsonb_typeof(p_value) = 'number' and (p_value #>> '{}')::numeric >= 0 then
    return (p_value #>> '{}')::double precision;
  end if;
  perform jobs.raise_error('invalid_retention',
    pg_catalog.format('%s must be a number of seconds >= 0, "forever" or null, not %s',
                      p_what, p_value::text));
  return null;
end
$$;

comment on function jobs.retention_age(jsonb, text) is
  'Read one retention age: null inherits, "forever" is Infinity, else seconds >= 0 (SJ014 otherwise).';

-- ---------------------------------------------------------------------------
-- jobs.retention_check(policy, queues_allowed): refuse a malformed policy object before
-- any write. Keys: succeeded, failed, dead, cancelled, awaited, events (and, when
-- queues_allowed, "queues": {queue: policy without queues}). An unknown key raises
-- unknown_retention_key (SJ015); a bad value or a policy that is not an object
-- invalid_retention (SJ014).
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_check(p_policy jsonb, p_queues_allowed boolean)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_key  text;
  v_q    text;
begin
  if p_policy is null or pg_catalog.jsonb_typeof(p_policy) <> 'object' then
    perform jobs.raise_error('invalid_retention', 'a retention policy must be a JSON object');
  end if;
  for v_key in select k from pg_catalog.jsonb_object_keys(p_policy) k order by 1 loop
    if v_key = 'queues' and p_queues_allowed then
      if pg_catalog.jsonb_typeof(p_policy->'queues') <> 'object' then
        perform jobs.raise_error('invalid_retention', 'queues must be an object {queue: policy}');
      end if;
      for v_q in select k from pg_catalog.jsonb_object_keys(p_policy->'queues') k order by 1 loop
        if v_q = '' or v_q = '*' then
          perform jobs.raise_error('invalid_retention',
            'a queue override needs a queue name (the top level is every queue''s)');
        end if;
        perform jobs.retention_check(p_policy->'queues'->v_q, false);
        if p_policy->'queues'->v_q ? 'events' then
          perform jobs.raise_error('invalid_retention',
            'events have no queue: give their age at the top level');
        end if;
      end loop;
    elsif v_key in ('succeeded', 'failed', 'dead', 'cancelled', 'awaited', 'events') then
      perform jobs.retention_age(p_policy->v_key, v_key);
    else
      perform jobs.raise_error('unknown_retention_key',
        pg_catalog.format('%L is not a retention key', v_key), null,
        'keys: succeeded, failed, dead, cancelled, awaited, events'
        || case when p_queues_allowed then ', queues' else '' end);
    end if;
  end loop;
end
$$;

comment on function jobs.retention_check(jsonb, boolean) is
  'Refuse a malformed retention policy: SJ015 for an unknown key, SJ014 for a bad value.';

-- ---------------------------------------------------------------------------
-- jobs.retention_put(queue, policy) -> the queue's row as stored. queue null or '*':
-- the default of every queue. Sets the keys given (JSON null: inherit again) and keeps
-- the others. Errors: SJ014, SJ015 (jobs.retention_check); events only on '*'.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_put(p_queue text, p_policy jsonb)
returns table (queue text, succeeded_s double precision, failed_s double precision,
               dead_s double precision, cancelled_s double precision,
               awaited_s double precision, events_s double precision)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue text := coalesce(p_queue, '*');
begin
  perform jobs.fleet_only('jobs.retention_put');  -- (sql/15_tenancy.sql)
  -- GUARD ('' names no queue: it is not another way to write '*')
  perform jobs.check_name(v_queue, 'queue');
  perform jobs.retention_check(p_policy, false);
  if v_queue <> '*' and p_policy ? 'events' then
    perform jobs.raise_error('invalid_retention',
      'events have no queue: set their age on the default (queue ''*'')');
  end if;
  -- WRITE (upsert; a key not given keeps its stored value)
  insert into jobs.retention as r (queue, succeeded_s, failed_s, dead_s, cancelled_s,
                                   awaited_s, events_s, updated_at)
  values (v_queue,
          jobs.retention_age(p_policy->'succeeded', 'succeeded'),
          jobs.retention_age(p_policy->'failed', 'failed'),
          jobs.retention_age(p_policy->'dead', 'dead'),
          jobs.retention_age(p_policy->'cancelled', 'cancelled'),
          jobs.retention_age(p_policy->'awaited', 'awaited'),
          jobs.retention_age(p_policy->'events', 'events'),
          jobs.now())
  on conflict on constraint retention_pkey do update
     set succeeded_s = case when p_policy ? 'succeeded' then excluded.succeeded_s else r.succeeded_s end,
         failed_s    = case when p_policy ? 'failed' then excluded.failed_s else r.failed_s end,
         dead_s      = case when p_policy ? 'dead' then excluded.dead_s else r.dead_s end,
         cancelled_s = case when p_policy ? 'cancelled' then excluded.cancelled_s else r.cancelled_s end,
         awaited_s   = case when p_policy ? 'awaited' then excluded.awaited_s else r.awaited_s end,
         events_s    = case when p_policy ? 'events' then excluded.events_s else r.events_s end,
         updated_at  = excluded.updated_at;
  return query
    select r.queue, r.succeeded_s, r.failed_s, r.dead_s, r.cancelled_s, r.awaited_s, r.events_s
      from jobs.retention r where r.queue = v_queue;
end
$$;

comment on function jobs.retention_put(text, jsonb) is
  'Store retention ages for a queue (or ''*'', every queue); keys not given are kept.';

-- ---------------------------------------------------------------------------
-- jobs.retention_remove(queue) -> true when a stored row was removed ('*' included:
-- the built-in defaults apply again). Idempotent.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_remove(p_queue text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.retention_remove');  -- (sql/15_tenancy.sql)
  perform jobs.check_name(coalesce(p_queue, '*'), 'queue');
  delete from jobs.retention r where r.queue = coalesce(p_queue, '*');
  return found;
end
$$;

comment on function jobs.retention_remove(text) is
  'Remove a queue''s stored retention row (or ''*''); answers whether one existed.';

-- ---------------------------------------------------------------------------
-- jobs.retention_policy(policy) -> the ages in effect, resolved (no nulls; 'Infinity':
-- forever): one row for '*' and one per queue that a stored row or the given call
-- policy overrides, '*' first. p_policy is what a jobs.purge call would be given.
-- ---------------------------------------------------------------------------
create or replace function jobs.retention_policy(p_policy jsonb default null)
returns table (queue text, succeeded_s double precision, failed_s double precision,
               dead_s double precision, cancelled_s double precision,
               awaited_s double precision, events_s double precision)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_p jsonb := coalesce(p_policy, '{}');
begin
  perform jobs.fleet_only('jobs.retention_policy');  -- (sql/15_tenancy.sql)
  perform jobs.retention_check(v_p, true);
  return query
    with qs as (
      select '*'::text as queue
      union select r.queue from jobs.retention r
      union select k from pg_catalog.jsonb_object_keys(coalesce(v_p->'queues', '{}')) k
    )
    select qs.queue,
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'succeeded', 'succeeded'), q.succeeded_s,
                    jobs.retention_age(v_p->'succeeded', 'succeeded'), d.succeeded_s,
                    (b->>'succeeded')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'failed', 'failed'), q.failed_s,
                    jobs.retention_age(v_p->'failed', 'failed'), d.failed_s,
                    (b->>'failed')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'dead', 'dead'), q.dead_s,
                    jobs.retention_age(v_p->'dead', 'dead'), d.dead_s,
                    (b->>'dead')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'cancelled', 'cancelled'), q.cancelled_s,
                    jobs.retention_age(v_p->'cancelled', 'cancelled'), d.cancelled_s,
                    (b->>'cancelled')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'awaited', 'awaited'), q.awaited_s,
                    jobs.retention_age(v_p->'awaited', 'awaited'), d.awaited_s,
                    (b->>'awaited')::double precision),
           -- events have no queue: the '*' row's age for every row
           coalesce(jobs.retention_age(v_p->'events', 'events'),
                    d.events_s, (b->>'events')::double precision)
      from qs
      cross join jobs.retention_defaults() b
      left join jobs.retention q on q.queue = qs.queue and qs.queue <> '*'
      left join jobs.retention d on d.queue = '*'
     order by qs.queue <> '*', qs.queue;
end
$$;

comment on function jobs.retention_policy(jsonb) is
  'The retention ages in effect (resolved; Infinity = forever): ''*'' and each overridden queue.';

-- ---------------------------------------------------------------------------
-- jobs.purge_cutoff(now, age_s) -> the instant before which a row is old enough
-- ('-infinity' for forever).
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_cutoff(p_now timestamptz, p_age_s double precision)
returns timestamptz
language sql
immutable
set search_path = ''
as $$
  select case when p_age_s >= 'Infinity'::double precision then '-infinity'::timestamptz
              else p_now - pg_catalog.make_interval(secs => p_age_s) end
$$;

comment on function jobs.purge_cutoff(timestamptz, double precision) is
  'now - age, or -infinity when the age is forever (jobs.purge).';

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

comment on function jobs.purge_unreferenced(bigint, bigint) is
  'True when no live job refers to this one (no live child, no live parent): jobs.purge''s reference rule.';

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

comment on function jobs.purge(integer, boolean, jsonb) is
  'Retention: delete at most p_max finished jobs (with their steps, waits, outbox rows) and old events; answers deleted and still eligible.';

-- jobs.retention_sweep(max) -> jobs.purge(max) under the stored policy: what the
-- scheduler's leader runs every period (sql/98_roles.sql grants it to the scheduler's
-- role, which may not pass a policy of its own: only an operator deletes by other ages).
create or replace function jobs.retention_sweep(p_max integer default 1000)
returns table (what text, deleted bigint, remaining bigint)
language sql
volatile
set search_path = ''
as $$
  select p.what, p.deleted, p.remaining from jobs.purge(p_max, false, null) p
$$;

comment on function jobs.retention_sweep(integer) is
  'One bounded retention batch under the stored policy (jobs.purge without an override).';
