-- sqljobs: events — emit, durable event waits, wake.
--
-- jobs.emit_event(name, payload) records an event and wakes, at once, EVERY parked job
-- with an open wait that the event matches (broadcast: one event is seen by every
-- matching waiter; each waiting job consumes it once). Callable from plain SQL anywhere,
-- e.g. in the transaction that made the change the event announces: it counts, and
-- wakes, only if that transaction commits.
--
-- A wait is a durable step (jobs.step_wait): it resolves with the first matching event
-- emitted since the job's FIRST claim (first_started_at: the cursor), not consumed by an
-- earlier step of the same job, and not after the wait's deadline; or, once the
-- deadline passed with no such event, with a timeout. Either outcome is stored as the
-- step, so a replay answers the same thing. An event emitted after the job started but
-- before the wait was registered is therefore not lost.
--
-- Match: jsonb containment, `payload @> match` ({} matches every payload).
-- Tenancy (sql/15_tenancy.sql): an event carries its emitter's bound tenant and is seen
-- only by jobs of that tenant; an event of an unbound emitter (tenant null) by all.
--
-- Locks (why no event falls between a wait and an emit): both lock rows of
-- jobs.lock_key per event name and tenant (jobs.event_locks below) — an emit SHARE
-- (emits never block each other), a wait EXCLUSIVE, in key order — so a wait's
-- look-back and an emit's wake-up never run concurrently for one name: either the emit
-- commits first and the wait sees the event, or the wait (and its park) commits first
-- and the emit sees the wait and wakes it. Row locks on a private table, not advisory
-- locks: no session can take them but through these functions, and the keys carry the
-- tenant, so a tenant's session holds up only its own tenant's emits and waits (and,
-- through a wait held open in a transaction, the emits that carry no tenant). An emit
-- inside a long transaction holds its share lock until commit, delaying waits on that
-- name (not other emits). Lock order: the job row (fence), then the key rows. A
-- transaction that emits several names may deadlock with a wait on the same names
-- (PostgreSQL aborts one; the client retries the wait).
-- Retention: event waits go with their job (on delete cascade); events themselves are
-- purged by age with jobs.purge_events.

-- jobs.event_lock_key(name): version 1's advisory lock key of an event name. Nothing
-- calls it since version 2 (row locks, below); a released function stays until the
-- release its retirement names (migrations/versions/RETIRED).
create or replace function jobs.event_lock_key(p_name text)
returns bigint
language sql
immutable
set search_path = ''
as $$ select pg_catalog.hashtextextended('sqljobs.event:' || p_name, 0) $$;

-- jobs.event_locks(tenant, names, waiting) -> lock keys and modes for jobs.lock_keys
-- (sql/10_errors.sql): what an emit or a wait of these event names by that tenant
-- (null: none) must hold so that a wait's look-back and an emit's wake-up never run
-- concurrently for one name. An emit of tenant T shares 'event|T|<name>'; an emit
-- without a tenant (it wakes every tenant's waiters) takes 'event||<name>' exclusive;
-- a wait of tenant T takes 'event|T|<name>' exclusive and shares 'event||<name>'; a
-- wait of a job without a tenant takes 'event||<name>' exclusive. So emits of one
-- tenant never wait on another tenant's, and a tenant's session can hold up only its
-- own tenant's emits and waits, or (by a wait held open) the emits without a tenant.
create or replace function jobs.event_locks(p_tenant text, p_names text[], p_waiting boolean,
                                            out keys text[], out modes text[])
language sql
immutable
set search_path = ''
as $$
  select pg_catalog.array_agg(l.key order by l.key), pg_catalog.array_agg(l.mode order by l.key)
    from pg_catalog.unnest(p_names) as n(name)
   cross join lateral (
     values ('event|' || coalesce(p_tenant, '') || '|' || n.name,
             case when p_waiting or p_tenant is null then 'update' else 'share' end),
            (case when p_waiting and p_tenant is not null then 'event||' || n.name end, 'share')
   ) as l(key, mode)
   where l.key is not null
$$;

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

comment on function jobs.emit_event(text, jsonb) is
  'Record an event; wake every parked job waiting for a matching one. Answers the event id.';

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

comment on function jobs.step_wait(bigint, bigint, text, jsonb, double precision, double precision) is
  'Durable event wait: the first matching event since the job started, or a timeout, stored as a step; parks until then.';

-- ---------------------------------------------------------------------------
-- jobs.purge_events(before, max) -> events deleted: at most p_max events created
-- before p_before, oldest first. A wait looks back only to its job's first claim, so
-- keep events at least as long as your longest-running waiting job.
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_events(p_before timestamptz, p_max integer default 10000)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_n integer;
begin
  perform jobs.fleet_only('jobs.purge_events');  -- (sql/15_tenancy.sql)
  if p_before is null or p_max is null or p_max not between 1 and 100000 then
    perform jobs.raise_error('invalid_argument', 'purge_events needs a time and 1 <= max <= 100000');
  end if;
  delete from jobs.event as e
   where e.id in (select o.id from jobs.event o where o.created_at < p_before
                   order by o.created_at limit p_max);
  get diagnostics v_n = row_count;
  return v_n;
end
$$;

comment on function jobs.purge_events(timestamptz, integer) is
  'Delete at most p_max events created before p_before; answers how many.';
