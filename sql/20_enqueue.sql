-- sqljobs: enqueue.
--
-- A job spec is a jsonb object. `name` and `key` are required; everything else has a
-- default:
--
--   name          text     the job type (required, non-empty)
--   key           text     idempotency key (required, non-empty)
--   payload       jsonb    default {}; at most jobs.max_payload_bytes() as text
--   queue         text     default 'default'
--   tenant        text     default null
--   priority      int      default 0, lower runs first, -32768..32767
--   run_at        timestamptz   not before this time (default now)
--   delay_s       float    seconds from now; exclusive with run_at
--   max_attempts  int      default 25, >= 1
--   retry_base_s  float    backoff base, default 1, > 0
--   retry_cap_s   float    backoff cap, default 3600, >= retry_base_s
--   retry_jitter  text     none | full (default) | equal
--   dead_letter   bool     default true: exhausted -> dead; false -> failed
--   timeout_s     float    per-attempt timeout, > 0, default none
--   traceparent   text     W3C traceparent of the producer span
--   on_conflict   text     'return' (default): answer the existing job as deduped;
--                          'error': raise duplicate_job (SJ003)
--
-- Text fields must be JSON strings and numbers finite; anything else is invalid_argument.
--
-- Idempotency namespace: (name, coalesce(tenant, ''), key). A second enqueue in it
-- answers the existing job, live or finished, with outcome 'deduped'.
--
-- Wake-ups: one pg_notify('jobs_wake', <queue>) per queue that got a job runnable now,
-- per call; PostgreSQL folds repeats within one transaction. `set jobs.notify = off`
-- turns it off for a session (workers also poll).

-- ---------------------------------------------------------------------------
-- jobs.job_spec: the fields of a spec, for jsonb_populate_record. Private: callers pass
-- jsonb, so a field added here needs no new function signature.
-- ---------------------------------------------------------------------------
do $$
begin
  if not exists (select 1 from pg_catalog.pg_type t
                 join pg_catalog.pg_namespace n on n.oid = t.typnamespace
                 where n.nspname = 'jobs' and t.typname = 'job_spec') then
    create type jobs.job_spec as (
      name text, key text, payload jsonb, queue text, tenant text, priority integer,
      run_at timestamptz, delay_s double precision, max_attempts integer,
      retry_base_s double precision, retry_cap_s double precision, retry_jitter text,
      dead_letter boolean, timeout_s double precision, traceparent text, on_conflict text);
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.spec_problem(specs): the first thing wrong with a batch of specs, or null.
-- Pure: reads no table. Used by enqueue_many (and by jobs.stage) before any write.
-- ---------------------------------------------------------------------------
create or replace function jobs.spec_problem(p_specs jsonb)
returns text
language plpgsql
stable
set search_path = ''
-- Generic plans: re-planning these statements on every call cost more than running them.
set plan_cache_mode = force_generic_plan
as $$
declare
  v_problem text;
begin
  if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array' then
    return 'specs must be a JSON array of job specs';
  end if;

  -- Shape: each spec an object with known fields only; text fields hold JSON strings
  -- (the text cast below would turn {"a": 1} into a job named '{"a": 1}').
  select pg_catalog.format('spec %s: %s', e.ord, case
           when pg_catalog.jsonb_typeof(e.spec) <> 'object' then 'must be a JSON object'
           when k.field is not null then 'unknown field ' || pg_catalog.quote_literal(k.field)
           else pg_catalog.quote_literal(t.field) || ' must be a string' end)
    into v_problem
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
    left join lateral (
      select f.field from pg_catalog.jsonb_object_keys(
               case when pg_catalog.jsonb_typeof(e.spec) = 'object' then e.spec else '{}' end) as f(field)
       where f.field <> all (array['name', 'key', 'payload', 'queue', 'tenant', 'priority',
                                   'run_at', 'delay_s', 'max_attempts', 'retry_base_s',
                                   'retry_cap_s', 'retry_jitter', 'dead_letter', 'timeout_s',
                                   'traceparent', 'on_conflict'])
       limit 1) k on true
    left join lateral (
      select f.key as field from pg_catalog.jsonb_each(
               case when pg_catalog.jsonb_typeof(e.spec) = 'object' then e.spec else '{}' end) as f
       where f.key = any (array['name', 'key', 'queue', 'tenant', 'retry_jitter', 'traceparent',
                                'on_conflict'])
         and pg_catalog.jsonb_typeof(f.value) not in ('string', 'null')
       limit 1) t on true
   where pg_catalog.jsonb_typeof(e.spec) <> 'object' or k.field is not null or t.field is not null
   order by e.ord
   limit 1;
  if v_problem is not null then
    return v_problem;
  end if;

  -- Values: types are checked by the casts (caught below), ranges here.
  begin
    select pg_catalog.format('spec %s: %s', e.ord, case
             when s.name is null or s.name = '' then 'name is required'
             when s.key is null or s.key = '' then 'key is required (the idempotency key)'
             when s.queue = '' then 'queue must not be empty'
             when s.priority not between -32768 and 32767 then 'priority must be between -32768 and 32767'
             when s.max_attempts < 1 then 'max_attempts must be at least 1'
             -- 'NaN' and 'Infinity' arrive as strings; NaN sorts above Infinity.
             when greatest(@ s.delay_s, @ s.retry_base_s, @ s.retry_cap_s, @ s.timeout_s)
                  >= 'Infinity'::double precision
               then 'delay_s, retry_base_s, retry_cap_s and timeout_s must be finite'
             when s.retry_base_s <= 0 then 'retry_base_s must be positive'
             when s.retry_cap_s < coalesce(s.retry_base_s, 1) then 'retry_cap_s must be at least retry_base_s'
             when s.retry_jitter not in ('none', 'full', 'equal') then 'retry_jitter must be none, full or equal'
             when s.timeout_s <= 0 then 'timeout_s must be positive'
             when s.delay_s < 0 then 'delay_s must not be negative'
             when s.delay_s is not null and s.run_at is not null then 'give run_at or delay_s, not both'
             when s.on_conflict not in ('return', 'error') then 'on_conflict must be return or error'
           end)
      into v_problem
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
    cross join lateral pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as s
     where s.name is null or s.name = '' or s.key is null or s.key = '' or s.queue = ''
        or s.priority not between -32768 and 32767 or s.max_attempts < 1
        or greatest(@ s.delay_s, @ s.retry_base_s, @ s.retry_cap_s, @ s.timeout_s)
           >= 'Infinity'::double precision
        or s.retry_base_s <= 0 or s.retry_cap_s < coalesce(s.retry_base_s, 1)
        or s.retry_jitter not in ('none', 'full', 'equal') or s.timeout_s <= 0
        or s.delay_s < 0 or (s.delay_s is not null and s.run_at is not null)
        or s.on_conflict not in ('return', 'error')
     order by e.ord
     limit 1;
  exception when data_exception then
    return 'a field has the wrong type: ' || sqlerrm;
  end;
  return v_problem;
end
$$;

comment on function jobs.spec_problem(jsonb) is
  'The first problem in a jsonb array of job specs, or null when all are valid. Reads no table.';

-- ---------------------------------------------------------------------------
-- jobs.check_specs(specs): raise invalid_argument (SJ001) for the first problem
-- jobs.spec_problem finds, or payload_too_large (SJ002) for the first payload over
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
  v_max     integer := jobs.max_payload_bytes();
begin
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  select pg_catalog.format('spec %s: payload is %s bytes; the limit is %s', e.ord,
                           pg_catalog.octet_length(e.spec->>'payload'), v_max)
    into v_problem
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
   where pg_catalog.octet_length(e.spec->>'payload') > v_max
   order by e.ord
   limit 1;
  if v_problem is not null then
    perform jobs.raise_error('payload_too_large', v_problem, null,
                             'store large data elsewhere and pass a reference in the payload');
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.wake(queues): one pg_notify('jobs_wake', queue) per queue, unless the session
-- set jobs.notify = off. PostgreSQL delivers them at commit and folds repeats within
-- a transaction, so a transaction wakes each queue once however many calls it makes.
-- ---------------------------------------------------------------------------
create or replace function jobs.wake(p_queues text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue text;
begin
  if coalesce(pg_catalog.current_setting('jobs.notify', true), '') = 'off' then
    return;
  end if;
  foreach v_queue in array coalesce(p_queues, '{}') loop
    perform pg_catalog.pg_notify('jobs_wake', v_queue);
  end loop;
end
$$;

comment on function jobs.wake(text[]) is
  'Notify jobs_wake once per queue (off when the session sets jobs.notify = off).';

-- ---------------------------------------------------------------------------
-- jobs.enqueue_many(specs jsonb) -> (ord, id, outcome), one row per spec, in input order.
--
-- Contract:
--   * Refuses the whole call before the first write when any spec is invalid
--     (invalid_argument SJ001, payload_too_large SJ002) or when a spec with
--     on_conflict = 'error' meets an existing key, or a key an earlier spec of the
--     same batch takes (duplicate_job SJ003).
--   * Inserts every new job as ready in one statement; a key already present (also a
--     key repeated inside the batch) answers the existing job with outcome 'deduped'.
--   * Notifies 'jobs_wake' once per queue that received a job runnable now.
-- Locks: inserts rows in (name, tenant, key) order, so two batches that share keys
--   wait for each other instead of deadlocking.
-- Clients send at most 1,000 specs per call (one statement per chunk).
-- Plans: generic (see plan_cache_mode below). Each key look-up is a lateral subquery with
-- `limit 1`, so a plan cached while jobs.job was small stays an index probe per spec
-- instead of hash-joining a sequential scan of the whole table (bench/sustained.py).
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
  v_created  bigint[];
  v_wake     text[];
begin
  -- GUARD: every refusal happens here, before the first write.
  perform jobs.check_specs(p_specs);

  v_strict := p_specs @? '$[*] ? (@.on_conflict == "error")';
  select pg_catalog.format('spec %s: job %s already exists for key %s', e.ord, j.id,
                           pg_catalog.quote_literal(s.key))
    into v_dup
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
    cross join lateral pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as s
    cross join lateral (select k.id from jobs.job k
                         where k.name = s.name and coalesce(k.tenant, '') = coalesce(s.tenant, '')
                           and k.key = s.key
                         limit 1) as j
   where v_strict and s.on_conflict = 'error'
   order by e.ord
   limit 1;
  if v_dup is not null then
    perform jobs.raise_error('duplicate_job', v_dup);
  end if;
  -- A strict spec whose key an earlier spec of the same batch already takes.
  select pg_catalog.format('spec %s: key %s is already taken by spec %s of this batch',
                           e.ord, pg_catalog.quote_literal(s.key), f.ord)
    into v_dup
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
    cross join lateral pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as s
    cross join lateral (
      select p.ord
        from pg_catalog.jsonb_array_elements(p_specs) with ordinality as p(spec, ord)
       where p.ord < e.ord and p.spec->>'name' = s.name and p.spec->>'key' = s.key
         and coalesce(p.spec->>'tenant', '') = coalesce(s.tenant, '')
       limit 1) as f
   where v_strict and s.on_conflict = 'error'
   order by e.ord
   limit 1;
  if v_dup is not null then
    perform jobs.raise_error('duplicate_job', v_dup);
  end if;

  -- WRITE: one insert for the whole batch, in key order.
  with ins as (
    insert into jobs.job as j (name, queue, tenant, key, payload, priority, run_at,
                               max_attempts, retry_base_s, retry_cap_s, retry_jitter,
                               dead_letter, timeout_s, traceparent, created_at)
    select s.name, coalesce(s.queue, 'default'), s.tenant, s.key, coalesce(s.payload, '{}'),
           coalesce(s.priority, 0),
           coalesce(s.run_at, v_now + pg_catalog.make_interval(secs => coalesce(s.delay_s, 0))),
           coalesce(s.max_attempts, 25), coalesce(s.retry_base_s, 1),
           coalesce(s.retry_cap_s, greatest(3600, coalesce(s.retry_base_s, 1))),
           coalesce(s.retry_jitter, 'full'), coalesce(s.dead_letter, true), s.timeout_s,
           s.traceparent, v_now
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     cross join lateral pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as s
     -- ord breaks ties: a key repeated in the batch is inserted from its first spec.
     order by s.name, coalesce(s.tenant, ''), s.key, e.ord
    on conflict (name, (coalesce(tenant, '')), key) do nothing
    returning j.id, j.queue, j.run_at
  )
  select pg_catalog.array_agg(ins.id),
         pg_catalog.array_agg(distinct ins.queue) filter (where ins.run_at <= v_now)
    into v_created, v_wake
    from ins;

  -- A key that met a concurrent insert after the guard: still refuse when asked to.
  select pg_catalog.format('spec %s: job %s already exists for key %s', e.ord, j.id,
                           pg_catalog.quote_literal(s.key))
    into v_dup
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
    cross join lateral pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as s
    cross join lateral (select k.id from jobs.job k
                         where k.name = s.name and coalesce(k.tenant, '') = coalesce(s.tenant, '')
                           and k.key = s.key
                         limit 1) as j
   where v_strict and s.on_conflict = 'error' and j.id <> all (coalesce(v_created, '{}'))
   order by e.ord
   limit 1;
  if v_dup is not null then
    perform jobs.raise_error('duplicate_job', v_dup);
  end if;

  -- WAKE: once per queue.
  perform jobs.wake(v_wake);

  -- ANSWER: one row per spec, in input order. A key repeated inside the batch was
  -- created by its first spec; the repeats are deduped.
  return query
    select a.ord::integer, a.id,
           case when a.id = any (coalesce(v_created, '{}')) and a.first then 'created'
                else 'deduped' end
      from (select e.ord, j.id,
                   pg_catalog.row_number() over (partition by j.id order by e.ord) = 1 as first
              from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
             cross join lateral pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as s
             cross join lateral (select k.id from jobs.job k
                                  where k.name = s.name and coalesce(k.tenant, '') = coalesce(s.tenant, '')
                                    and k.key = s.key
                                  limit 1) as j) a
     order by a.ord;
end
$$;

comment on function jobs.enqueue_many(jsonb) is
  'Enqueue a jsonb array of job specs; one (ord, id, outcome) per spec in input order.';

-- ---------------------------------------------------------------------------
-- jobs.one_spec(name, key, payload, options) -> a one-spec jsonb array, for the
-- single-job wrappers (enqueue, stage). Refuses options that are not an object or that
-- carry name, key or payload (invalid_argument SJ001).
-- ---------------------------------------------------------------------------
create or replace function jobs.one_spec(
  p_name    text,
  p_key     text,
  p_payload jsonb,
  p_options jsonb
)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'options must be a JSON object');
  end if;
  if p_options ?| array['name', 'key', 'payload'] then
    perform jobs.raise_error('invalid_argument',
      'options must not carry name, key or payload: pass them as arguments');
  end if;
  return pg_catalog.jsonb_build_array(
    p_options || pg_catalog.jsonb_build_object('name', p_name, 'key', p_key,
                                               'payload', coalesce(p_payload, '{}')));
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.enqueue(name, key, payload, options) -> (id, outcome): one job.
-- A thin wrapper over enqueue_many: options takes every spec field but name, key and
-- payload. Same refusals, same wake-up.
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
begin
  return query
    select m.id, m.outcome
      from jobs.enqueue_many(jobs.one_spec(p_name, p_key, p_payload, p_options)) m;
end
$$;

comment on function jobs.enqueue(text, text, jsonb, jsonb) is
  'Enqueue one job; answers its id and created | deduped.';
