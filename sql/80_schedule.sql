-- sqljobs: schedules (cron tasks) and the scheduler's leader lease (docs/howto-scheduler.md).
--
-- A schedule names a job type, a cron expression in a time zone, a catch-up policy and
-- the enqueue options and payload of each occurrence. The database stores schedules
-- and what has been fired; the scheduler role (sqljobs/scheduler.py) evaluates cron
-- (PostgreSQL has no cron arithmetic) and calls jobs.schedule_fire.
--
-- Exactly once: an occurrence is enqueued with the key '<schedule>@<occurrence in UTC,
-- ISO 8601>' through jobs.enqueue_many, so a second scheduler, a restart or a skewed
-- clock that fires it again gets the same job back (deduped), never a second one. The
-- watermark ("every occurrence at or before this instant is done: fired or skipped")
-- moves in the same transaction as the fire and never moves back.
--
-- One leader at a time: the lease named 'scheduler' (jobs.lease) carries a fencing
-- token that moves on every change of holder. jobs.schedule_fire is fenced on that
-- token and on the lease being live, and holds the leader row FOR SHARE while it fires,
-- so a takeover waits for a fire in flight and a deposed leader's fire changes nothing.
--
-- Lock order everywhere: the 'scheduler' lease row, then the jobs.schedule row, then job rows.

-- ---------------------------------------------------------------------------
-- The scheduler's leadership is the named lease 'scheduler' (jobs.lease, sql/35_limits.sql):
-- jobs.leader_acquire(role, holder, lease_s), jobs.leader_release(role, holder, token)
-- and jobs.leaders() are jobs.lease_acquire / lease_release / leases() under the
-- scheduler's own names.
-- ---------------------------------------------------------------------------
create or replace function jobs.leader_acquire(
  p_role    text,
  p_holder  text,
  p_lease_s double precision
)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.leader_acquire');  -- (sql/15_tenancy.sql)
  return jobs.lease_take(p_role, p_holder, p_lease_s, true);
end
$$;

comment on function jobs.leader_acquire(text, text, double precision) is
  'Take or renew the role''s leader lease; answers the fencing token, or null when another holds it.';

create or replace function jobs.leader_release(p_role text, p_holder text, p_token bigint)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.leader_release');  -- (sql/15_tenancy.sql)
  return jobs.lease_give_up(p_role, p_holder, p_token);
end
$$;

comment on function jobs.leader_release(text, text, bigint) is
  'Give up a leader lease (fenced on holder and token).';

-- jobs.leaders(): version 1's view of the leases. Its token column stays (a released
-- result never changes) but is null: a token is its holder's proof (sql/00_schema.sql).
create or replace function jobs.leaders()
returns table (role text, holder text, token bigint, lease_expires_at timestamptz,
               acquired_at timestamptz, live boolean)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.leaders');  -- (sql/15_tenancy.sql)
  select l.name, l.holder, null::bigint, l.lease_expires_at, l.acquired_at, l.live
    from jobs.leases() l
$$;

comment on function jobs.leaders() is 'Leader leases and whether each is live (the token column is always null).';

-- ---------------------------------------------------------------------------
-- jobs.schedule_definition_problem(definition) -> the first thing wrong, or null.
-- Private. Cron syntax is checked by the client (which evaluates it); here: required
-- fields, known fields, a known time zone, the catch-up policy, and options that make a
-- valid enqueue spec.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_definition_problem(p_definition jsonb)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  v_field text;
begin
  if p_definition is null or pg_catalog.jsonb_typeof(p_definition) <> 'object' then
    return 'the definition must be a JSON object';
  end if;
  select f.key into v_field
    from pg_catalog.jsonb_each(p_definition) f
   where f.key <> all (array['job', 'cron', 'timezone', 'catch_up', 'options', 'payload',
                             'origin'])
   limit 1;
  if v_field is not null then
    return 'unknown field ' || pg_catalog.quote_literal(v_field);
  end if;
  select f.key into v_field
    from pg_catalog.jsonb_each(p_definition) f
   where f.key = any (array['job', 'cron', 'timezone', 'catch_up', 'origin'])
     and pg_catalog.jsonb_typeof(f.value) <> 'string'
   limit 1;
  if v_field is not null then
    return pg_catalog.quote_literal(v_field) || ' must be a string';
  end if;
  if coalesce(p_definition->>'job', '') = '' then
    return 'job is required (the job type each occurrence enqueues)';
  end if;
  if pg_catalog.btrim(coalesce(p_definition->>'cron', '')) = '' then
    return 'cron is required';
  end if;
  if p_definition ? 'timezone' and not exists (
       select 1 from pg_catalog.pg_timezone_names z where z.name = p_definition->>'timezone') then
    return 'unknown time zone ' || pg_catalog.quote_literal(p_definition->>'timezone');
  end if;
  if coalesce(p_definition->>'catch_up', 'latest') not in ('all', 'latest', 'none') then
    return 'catch_up must be all, latest or none';
  end if;
  if coalesce(p_definition->>'origin', 'api') not in ('declared', 'api') then
    return 'origin must be declared or api';
  end if;
  if p_definition ? 'options' then
    if pg_catalog.jsonb_typeof(p_definition->'options') <> 'object' then
      return 'options must be a JSON object';
    end if;
    if p_definition->'options' ?| array['name', 'key', 'payload', 'run_at', 'delay_s',
                                        'on_conflict'] then
      return 'options must not carry name, key, payload, run_at, delay_s or on_conflict';
    end if;
  end if;
  return jobs.spec_problem(pg_catalog.jsonb_build_array(
    coalesce(p_definition->'options', '{}')
    || pg_catalog.jsonb_build_object('name', p_definition->>'job', 'key', 'check',
                                     'payload', coalesce(p_definition->'payload', '{}'))));
end
$$;

comment on function jobs.schedule_definition_problem(jsonb) is
  'The first problem in a schedule definition, or null. Cron syntax is the client''s to check.';

-- ---------------------------------------------------------------------------
-- jobs.schedule_put(name, definition) -> true when the schedule is new.
--
-- definition: {job, cron, timezone = 'UTC', catch_up = 'latest', options = {},
-- payload = {}, origin = 'api'}. A new schedule's watermark is now: it fires the first
-- occurrence after it was added, never the past. Updating keeps paused, the watermark
-- and last_fired_at. Refuses (invalid_argument) an empty name or a bad definition.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_put(p_name text, p_definition jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_problem text;
  v_new     boolean;
begin
  perform jobs.fleet_only('jobs.schedule_put');  -- (sql/15_tenancy.sql)
  perform jobs.check_name(p_name, 'a schedule name');
  perform jobs.check_value(p_definition, 'a schedule definition');
  v_problem := jobs.schedule_definition_problem(p_definition);
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', 'schedule ' || p_name || ': ' || v_problem);
  end if;
  insert into jobs.schedule as s (name, job_name, cron, timezone, catch_up, options, payload,
                                  origin, watermark, created_at, updated_at)
  values (p_name, p_definition->>'job', pg_catalog.btrim(p_definition->>'cron'),
          coalesce(p_definition->>'timezone', 'UTC'),
          coalesce(p_definition->>'catch_up', 'latest'),
          coalesce(p_definition->'options', '{}'), coalesce(p_definition->'payload', '{}'),
          coalesce(p_definition->>'origin', 'api'), v_now, v_now, v_now)
  on conflict (name) do update
     set job_name = excluded.job_name, cron = excluded.cron, timezone = excluded.timezone,
         catch_up = excluded.catch_up, options = excluded.options, payload = excluded.payload,
         origin = excluded.origin,
         updated_at = case when (s.job_name, s.cron, s.timezone, s.catch_up, s.options,
                                 s.payload, s.origin)
                                is distinct from
                                (excluded.job_name, excluded.cron, excluded.timezone,
                                 excluded.catch_up, excluded.options, excluded.payload,
                                 excluded.origin)
                           then v_now else s.updated_at end
  returning (xmax = 0) into v_new;
  return v_new;
end
$$;

comment on function jobs.schedule_put(text, jsonb) is
  'Add a schedule (watermark now) or update its definition (keeps paused and watermark).';

-- ---------------------------------------------------------------------------
-- jobs.schedule_pause(name) / jobs.schedule_resume(name) / jobs.schedule_remove(name).
-- Refuse schedule_not_found (SJ031) for an unknown name. Resuming moves the watermark
-- to now: occurrences missed while paused are skipped, whatever the catch-up policy.
-- Pausing or resuming twice is harmless.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_pause(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.schedule_pause');  -- (sql/15_tenancy.sql)
  update jobs.schedule s set paused = true, updated_at = jobs.now()
   where s.name = p_name and not s.paused;
  if not found and not exists (select 1 from jobs.schedule s where s.name = p_name) then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

comment on function jobs.schedule_pause(text) is 'Stop firing a schedule until it is resumed.';

create or replace function jobs.schedule_resume(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.schedule_resume');  -- (sql/15_tenancy.sql)
  update jobs.schedule s
     set paused = false, updated_at = jobs.now(), watermark = greatest(s.watermark, jobs.now())
   where s.name = p_name and s.paused;
  if not found and not exists (select 1 from jobs.schedule s where s.name = p_name) then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

comment on function jobs.schedule_resume(text) is
  'Fire a paused schedule again, from now (what it missed while paused is skipped).';

create or replace function jobs.schedule_remove(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.schedule_remove');  -- (sql/15_tenancy.sql)
  delete from jobs.schedule s where s.name = p_name;
  if not found then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
end
$$;

comment on function jobs.schedule_remove(text) is
  'Delete a schedule (jobs it already enqueued stay).';

-- ---------------------------------------------------------------------------
-- jobs.schedules() -> every schedule, by name.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedules()
returns table (name text, job_name text, cron text, timezone text, catch_up text,
               options jsonb, payload jsonb, paused boolean, origin text,
               watermark timestamptz, last_fired_at timestamptz, created_at timestamptz,
               updated_at timestamptz)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.schedules');  -- (sql/15_tenancy.sql)
  select s.name, s.job_name, s.cron, s.timezone, s.catch_up, s.options, s.payload, s.paused,
         s.origin, s.watermark, s.last_fired_at, s.created_at, s.updated_at
    from jobs.schedule s
   order by s.name
$$;

comment on function jobs.schedules() is 'Every schedule with its watermark.';

-- ---------------------------------------------------------------------------
-- jobs.occurrence_key(schedule, occurrence) -> '<schedule>@YYYY-MM-DDTHH:MI:SSZ'
-- (the occurrence in UTC, to the second; fractions are kept when present).
-- ---------------------------------------------------------------------------
create or replace function jobs.occurrence_key(p_schedule text, p_occurrence timestamptz)
returns text
language sql
immutable
set search_path = ''
as $$
  select p_schedule || '@'
         || pg_catalog.to_char(p_occurrence at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
         || case when pg_catalog.date_part('microseconds', p_occurrence)::bigint % 1000000 = 0
                 then ''
                 else pg_catalog.rtrim(pg_catalog.to_char(p_occurrence at time zone 'UTC', '.US'), '0')
            end
         || 'Z'
$$;

comment on function jobs.occurrence_key(text, timestamptz) is
  'The idempotency key of one occurrence of a schedule.';

-- ---------------------------------------------------------------------------
-- jobs.schedule_fire(name, occurrences, watermark, token) -> (occurrence, job_id, outcome)
--
-- Contract (one transaction; the watermark moves with the fire):
--   GUARD    p_token must be the live 'scheduler' lease's token, else not_leader (SJ030),
--            nothing written. An unknown schedule is schedule_not_found (SJ031). The
--            watermark must be given, not in the future, and not before any occurrence
--            given; occurrences must not be in the future (invalid_argument SJ001).
--   SKIP     a paused schedule fires nothing and keeps its watermark (answers no row).
--            Occurrences at or before the current watermark are already done: not fired,
--            not answered (a repeat, a restart or a skewed clock).
--   FIRE     the other occurrences, oldest first, through jobs.enqueue_many with the key
--            jobs.occurrence_key(name, occurrence), the schedule's options and payload,
--            run_at = the occurrence: created, or deduped when it was fired before.
--   MOVE     watermark = greatest(current, p_watermark); last_fired_at = the latest fired.
-- Locks: the 'scheduler' leader row FOR SHARE (a takeover waits), then the schedule row
--   FOR UPDATE (one fire per schedule at a time), then job rows by enqueue_many.
-- ---------------------------------------------------------------------------
create or replace function jobs.schedule_fire(
  p_name        text,
  p_occurrences timestamptz[],
  p_watermark   timestamptz,
  p_token       bigint
)
returns table (occurrence timestamptz, job_id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_live    boolean;
  v_s       record;
  v_due     timestamptz[];
  v_specs   jsonb;
begin
  perform jobs.fleet_only('jobs.schedule_fire');  -- (sql/15_tenancy.sql)
  -- GUARD: the leader lease, held for share until commit.
  select l.holder is not null and l.lease_expires_at > v_now and l.token = p_token
    into v_live
    from jobs.lease l
   where l.name = 'scheduler'
     for share;
  if not coalesce(v_live, false) then
    perform jobs.raise_error('not_leader',
      pg_catalog.format('token %s does not hold the live scheduler lease', p_token),
      null, 'stop dispatching and acquire the lease again (jobs.leader_acquire)');
  end if;
  if p_watermark is null or p_watermark > v_now then
    perform jobs.raise_error('invalid_argument', 'the watermark must be given and not in the future');
  end if;
  if exists (select 1 from pg_catalog.unnest(p_occurrences) o(at)
              where o.at is null or o.at > p_watermark) then
    perform jobs.raise_error('invalid_argument',
      'occurrences must be given, and at or before the watermark (never in the future)');
  end if;

  -- LOCK: the schedule.
  select s.name, s.job_name, s.options, s.payload, s.paused, s.watermark
    into v_s
    from jobs.schedule s
   where s.name = p_name
     for update;
  if not found then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
  if v_s.paused then
    return;
  end if;

  -- FIRE: occurrences after the watermark, oldest first.
  select pg_catalog.array_agg(distinct o.at order by o.at)
    into v_due
    from pg_catalog.unnest(p_occurrences) o(at)
   where o.at > v_s.watermark;
  if v_due is not null then
    select pg_catalog.jsonb_agg(
             v_s.options || pg_catalog.jsonb_build_object(
               'name', v_s.job_name, 'key', jobs.occurrence_key(v_s.name, d.at),
               'payload', v_s.payload, 'run_at', d.at)
             order by d.at)
      into v_specs
      from pg_catalog.unnest(v_due) d(at);
  end if;

  -- MOVE: the watermark, in this transaction.
  update jobs.schedule s
     set watermark = greatest(s.watermark, p_watermark),
         last_fired_at = coalesce(v_due[pg_catalog.array_length(v_due, 1)], s.last_fired_at)
   where s.name = p_name;

  if v_specs is not null then
    return query
      select v_due[e.ord], e.id, e.outcome
        from jobs.enqueue_many(v_specs) e
       order by e.ord;
  end if;
end
$$;

comment on function jobs.schedule_fire(text, timestamptz[], timestamptz, bigint) is
  'Fire occurrences of a schedule (exactly once per occurrence key) and move its watermark, fenced on the leader token.';
