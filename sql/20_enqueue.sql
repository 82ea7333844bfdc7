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
-- A batch of several specs is scanned with cheap per-spec tests for the first refused
-- one; the message is then worked out for that spec alone, by the same code that checks
-- a batch of one spec (jobs.enqueue, jobs.stage, most single client calls) directly.
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
  v_ord  bigint;
  v_spec jsonb;
  v_s    jobs.job_spec;
begin
  if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array' then
    return 'specs must be a JSON array of job specs';
  end if;

  if pg_catalog.jsonb_array_length(p_specs) = 1 then
    v_ord := 1;
  else
    -- Shape: each spec an object with known fields only (removing the known ones leaves
    -- {}); text fields hold JSON strings (the text cast below would turn {"a": 1} into a
    -- job named '{"a": 1}').
    select e.ord into v_ord
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     where case when pg_catalog.jsonb_typeof(e.spec) <> 'object' then true
                else e.spec - array['name', 'key', 'payload', 'queue', 'tenant', 'priority',
                                    'run_at', 'delay_s', 'max_attempts', 'retry_base_s',
                                    'retry_cap_s', 'retry_jitter', 'dead_letter', 'timeout_s',
                                    'traceparent', 'on_conflict'] <> '{}'
                  or pg_catalog.jsonb_typeof(e.spec -> 'name') not in ('string', 'null')
                  or pg_catalog.jsonb_typeof(e.spec -> 'key') not in ('string', 'null')
                  or pg_catalog.jsonb_typeof(e.spec -> 'queue') not in ('string', 'null')
                  or pg_catalog.jsonb_typeof(e.spec -> 'tenant') not in ('string', 'null')
                  or pg_catalog.jsonb_typeof(e.spec -> 'retry_jitter') not in ('string', 'null')
                  or pg_catalog.jsonb_typeof(e.spec -> 'traceparent') not in ('string', 'null')
                  or pg_catalog.jsonb_typeof(e.spec -> 'on_conflict') not in ('string', 'null')
           end
     order by e.ord
     limit 1;

    -- Values: types are checked by the casts (caught below), ranges here. One composite
    -- per spec, made as the scan reaches it, so a cast error in a later spec cannot hide
    -- an earlier spec's problem.
    if v_ord is null then
      begin
        select x.ord into v_ord
          from (select e.ord, pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as r
                  from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
                 order by e.ord
                offset 0) as x
         cross join lateral (select (x.r).name, (x.r).key, (x.r).queue, (x.r).priority,
                                    (x.r).run_at, (x.r).delay_s, (x.r).max_attempts,
                                    (x.r).retry_base_s, (x.r).retry_cap_s, (x.r).retry_jitter,
                                    (x.r).timeout_s, (x.r).on_conflict) as s
         where s.name is null or s.name = '' or s.key is null or s.key = '' or s.queue = ''
            or s.priority not between -32768 and 32767 or s.max_attempts < 1
            or greatest(@ s.delay_s, @ s.retry_base_s, @ s.retry_cap_s, @ s.timeout_s)
               >= 'Infinity'::double precision
            or s.retry_base_s <= 0 or s.retry_cap_s < coalesce(s.retry_base_s, 1)
            or s.retry_jitter not in ('none', 'full', 'equal') or s.timeout_s <= 0
            or s.delay_s < 0 or (s.delay_s is not null and s.run_at is not null)
            or s.on_conflict not in ('return', 'error')
         order by x.ord
         limit 1;
      exception when data_exception then
        return 'a field has the wrong type: ' || sqlerrm;
      end;
    end if;
    if v_ord is null then
      return null;
    end if;
  end if;

  -- Spec v_ord: what is wrong with it, the same rules in the same order.
  v_spec := p_specs -> (v_ord - 1)::integer;
  if pg_catalog.jsonb_typeof(v_spec) <> 'object' then
    return pg_catalog.format('spec %s: must be a JSON object', v_ord);
  end if;
  if v_spec - array['name', 'key', 'payload', 'queue', 'tenant', 'priority', 'run_at', 'delay_s',
                    'max_attempts', 'retry_base_s', 'retry_cap_s', 'retry_jitter', 'dead_letter',
                    'timeout_s', 'traceparent', 'on_conflict'] <> '{}' then
    -- the first unknown field in jsonb key order
    return pg_catalog.format('spec %s: unknown field %s', v_ord, pg_catalog.quote_literal(
      (select f.field
         from pg_catalog.jsonb_object_keys(
                v_spec - array['name', 'key', 'payload', 'queue', 'tenant', 'priority', 'run_at',
                               'delay_s', 'max_attempts', 'retry_base_s', 'retry_cap_s',
                               'retry_jitter', 'dead_letter', 'timeout_s', 'traceparent',
                               'on_conflict']) as f(field)
        limit 1)));
  end if;
  if pg_catalog.jsonb_typeof(v_spec -> 'name') not in ('string', 'null')
     or pg_catalog.jsonb_typeof(v_spec -> 'key') not in ('string', 'null')
     or pg_catalog.jsonb_typeof(v_spec -> 'queue') not in ('string', 'null')
     or pg_catalog.jsonb_typeof(v_spec -> 'tenant') not in ('string', 'null')
     or pg_catalog.jsonb_typeof(v_spec -> 'retry_jitter') not in ('string', 'null')
     or pg_catalog.jsonb_typeof(v_spec -> 'traceparent') not in ('string', 'null')
     or pg_catalog.jsonb_typeof(v_spec -> 'on_conflict') not in ('string', 'null') then
    -- the first such field in jsonb key order
    return pg_catalog.format('spec %s: %s must be a string', v_ord, pg_catalog.quote_literal(
      (select f.key from pg_catalog.jsonb_each(v_spec) as f
        where f.key = any (array['name', 'key', 'queue', 'tenant', 'retry_jitter', 'traceparent',
                                 'on_conflict'])
          and pg_catalog.jsonb_typeof(f.value) not in ('string', 'null')
        limit 1)));
  end if;
  begin
    v_s := pg_catalog.jsonb_populate_record(null::jobs.job_spec, v_spec);
  exception when data_exception then
    return 'a field has the wrong type: ' || sqlerrm;
  end;
  return pg_catalog.format('spec %s: ', v_ord) || case
           when v_s.name is null or v_s.name = '' then 'name is required'
           when v_s.key is null or v_s.key = '' then 'key is required (the idempotency key)'
           when v_s.queue = '' then 'queue must not be empty'
           when v_s.priority not between -32768 and 32767 then 'priority must be between -32768 and 32767'
           when v_s.max_attempts < 1 then 'max_attempts must be at least 1'
           -- 'NaN' and 'Infinity' arrive as strings; NaN sorts above Infinity.
           when greatest(@ v_s.delay_s, @ v_s.retry_base_s, @ v_s.retry_cap_s, @ v_s.timeout_s)
                >= 'Infinity'::double precision
             then 'delay_s, retry_base_s, retry_cap_s and timeout_s must be finite'
           when v_s.retry_base_s <= 0 then 'retry_base_s must be positive'
           when v_s.retry_cap_s < coalesce(v_s.retry_base_s, 1) then 'retry_cap_s must be at least retry_base_s'
           when v_s.retry_jitter not in ('none', 'full', 'equal') then 'retry_jitter must be none, full or equal'
           when v_s.timeout_s <= 0 then 'timeout_s must be positive'
           when v_s.delay_s < 0 then 'delay_s must not be negative'
           when v_s.delay_s is not null and v_s.run_at is not null then 'give run_at or delay_s, not both'
           when v_s.on_conflict not in ('return', 'error') then 'on_conflict must be return or error'
         end;
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
  v_ord     bigint;
  v_max     integer := jobs.max_payload_bytes();
begin
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  if pg_catalog.jsonb_array_length(p_specs) = 1 then
    if pg_catalog.octet_length(p_specs -> 0 ->> 'payload') > v_max then
      v_ord := 1;
    end if;
  else
    select e.ord into v_ord
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     where pg_catalog.octet_length(e.spec->>'payload') > v_max
     order by e.ord
     limit 1;
  end if;
  if v_ord is not null then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('spec %s: payload is %s bytes; the limit is %s', v_ord,
                        pg_catalog.octet_length(p_specs -> (v_ord - 1)::integer ->> 'payload'), v_max),
      null, 'store large data elsewhere and pass a reference in the payload');
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
-- Answers: the insert's RETURNING answers the specs it created (and the repeats of their
--   keys in the batch); only the other specs probe the key index, in a later statement,
--   so a key a concurrent transaction committed meanwhile is seen.
-- Plans: generic (see plan_cache_mode below). Each key look-up is a lateral or correlated
-- subquery with `limit 1`, so a plan cached while jobs.job was small stays an index probe
-- per spec instead of hash-joining a sequential scan of the whole table (bench/sustained.py).
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
  v_ids      bigint[];   -- per spec, in input order: the job that answers it
  v_created  boolean[];  -- per spec: whether it created that job
  v_wake     text[];
  v_s        jobs.job_spec;  -- the spec of a one-spec batch
  v_id       bigint;
  v_queue    text;
  v_run_at   timestamptz;
begin
  -- GUARD: every refusal happens here, before the first write.
  perform jobs.check_specs(p_specs);

  -- ONE SPEC (jobs.enqueue with options, most client calls): the same steps for one row,
  -- without the batch statements' set-up.
  if pg_catalog.jsonb_array_length(p_specs) = 1 then
    v_s := pg_catalog.jsonb_populate_record(null::jobs.job_spec, p_specs -> 0);
    if v_s.on_conflict = 'error' then
      select k.id into v_id
        from jobs.job k
       where k.name = v_s.name and coalesce(k.tenant, '') = coalesce(v_s.tenant, '') and k.key = v_s.key
       limit 1;
      if v_id is not null then
        perform jobs.raise_error('duplicate_job',
          pg_catalog.format('spec 1: job %s already exists for key %s', v_id,
                            pg_catalog.quote_literal(v_s.key)));
      end if;
    end if;
    insert into jobs.job as j (name, queue, tenant, key, payload, priority, run_at,
                               max_attempts, retry_base_s, retry_cap_s, retry_jitter,
                               dead_letter, timeout_s, traceparent, created_at)
    values (v_s.name, coalesce(v_s.queue, 'default'), v_s.tenant, v_s.key, coalesce(v_s.payload, '{}'),
            coalesce(v_s.priority, 0),
            coalesce(v_s.run_at, v_now + pg_catalog.make_interval(secs => coalesce(v_s.delay_s, 0))),
            coalesce(v_s.max_attempts, 25), coalesce(v_s.retry_base_s, 1),
            coalesce(v_s.retry_cap_s, greatest(3600, coalesce(v_s.retry_base_s, 1))),
            coalesce(v_s.retry_jitter, 'full'), coalesce(v_s.dead_letter, true), v_s.timeout_s,
            v_s.traceparent, v_now)
    on conflict (name, (coalesce(tenant, '')), key) do nothing
    returning j.id, j.queue, j.run_at into v_id, v_queue, v_run_at;
    ord := 1;
    if found then
      if v_run_at <= v_now then
        perform jobs.wake(array[v_queue]);
      end if;
      id := v_id;
      outcome := 'created';
      return next;
      return;
    end if;
    -- The key has a job: an existing one, or one a concurrent transaction committed
    -- first (this later statement sees it).
    select k.id into v_id
      from jobs.job k
     where k.name = v_s.name and coalesce(k.tenant, '') = coalesce(v_s.tenant, '') and k.key = v_s.key
     limit 1;
    if v_s.on_conflict = 'error' and v_id is not null then
      perform jobs.raise_error('duplicate_job',
        pg_catalog.format('spec 1: job %s already exists for key %s', v_id,
                          pg_catalog.quote_literal(v_s.key)));
    end if;
    id := v_id;
    outcome := 'deduped';
    return next;
    return;
  end if;

  v_strict := p_specs @? '$[*] ? (@.on_conflict == "error")';
  if v_strict then
    select pg_catalog.format('spec %s: job %s already exists for key %s', e.ord, j.id,
                             pg_catalog.quote_literal(s.key))
      into v_dup
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
      cross join lateral pg_catalog.jsonb_populate_record(null::jobs.job_spec, e.spec) as s
      cross join lateral (select k.id from jobs.job k
                           where k.name = s.name and coalesce(k.tenant, '') = coalesce(s.tenant, '')
                             and k.key = s.key
                           limit 1) as j
     where s.on_conflict = 'error'
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
     where s.on_conflict = 'error'
     order by e.ord
     limit 1;
    if v_dup is not null then
      perform jobs.raise_error('duplicate_job', v_dup);
    end if;
  end if;

  -- WRITE: one insert for the whole batch, in key order. The same statement matches what
  -- it inserted back to the specs: a key repeated in the batch was created by its first
  -- spec (ord breaks the sort's ties), the repeats answer that job as deduped.
  with s as (
    select r.ordinality, r.name, r.key, r.payload, r.queue, r.tenant, r.priority, r.run_at,
           r.delay_s, r.max_attempts, r.retry_base_s, r.retry_cap_s, r.retry_jitter,
           r.dead_letter, r.timeout_s, r.traceparent
      from pg_catalog.jsonb_populate_recordset(null::jobs.job_spec, p_specs) with ordinality as r
  ), mixed as (
    -- Whether the batch spans several (name, tenant). Usually it does not, and then key
    -- order is (name, tenant, key) order: sorting by key alone is far cheaper.
    select exists (select from s, (select s1.name, s1.tenant from s as s1 limit 1) as f
                    where s.name <> f.name or coalesce(s.tenant, '') <> coalesce(f.tenant, ''))
           as yes
  ), ins as (
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
      from s
     order by case when (select mixed.yes from mixed) then s.name end,
              case when (select mixed.yes from mixed) then coalesce(s.tenant, '') end,
              s.key, s.ordinality
    on conflict (name, (coalesce(tenant, '')), key) do nothing
    returning j.id, j.name, j.tenant, j.key, j.queue, j.run_at
  ), a as (
    select s.ordinality as ord, i.id,
           i.id is not null
             and pg_catalog.row_number() over (partition by i.id order by s.ordinality) = 1
             as created
      from s
      left join ins as i
        on i.name = s.name and coalesce(i.tenant, '') = coalesce(s.tenant, '') and i.key = s.key
  )
  select pg_catalog.array_agg(a.id order by a.ord), pg_catalog.array_agg(a.created order by a.ord),
         (select pg_catalog.array_agg(distinct i.queue) from ins as i where i.run_at <= v_now)
    into v_ids, v_created, v_wake
    from a;

  -- Specs the insert did not take: their key had a job already, or a concurrent
  -- transaction committed one first. This later statement sees it: answer that job.
  if pg_catalog.array_position(v_ids, null) is not null then
    v_ids := array(
      select coalesce(e.id,
                      (select k.id from jobs.job k
                        where k.name = e.spec->>'name'
                          and coalesce(k.tenant, '') = coalesce(e.spec->>'tenant', '')
                          and k.key = e.spec->>'key'
                        limit 1))
        from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids))
             with ordinality as e(spec, id, ord)
       order by e.ord);
    -- A key that met a concurrent insert after the guard: still refuse when asked to.
    if v_strict then
      select pg_catalog.format('spec %s: job %s already exists for key %s', e.ord, e.id,
                               pg_catalog.quote_literal(e.spec->>'key'))
        into v_dup
        from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids),
                        pg_catalog.unnest(v_created)) with ordinality as e(spec, id, created, ord)
       where e.spec->>'on_conflict' = 'error' and not e.created and e.id is not null
       order by e.ord
       limit 1;
      if v_dup is not null then
        perform jobs.raise_error('duplicate_job', v_dup);
      end if;
    end if;
  end if;

  -- WAKE: once per queue.
  perform jobs.wake(v_wake);

  -- ANSWER: one row per spec, in input order.
  return query
    select u.ord::integer, u.id, case when u.created then 'created' else 'deduped' end
      from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_created))
           with ordinality as u(id, created, ord)
     order by u.ord;
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
-- options takes every spec field but name, key and payload; with options it is exactly
-- a one-spec enqueue_many. Without (the common call) it takes a lean path with the same
-- refusals (codes and messages), answers and wake-up: the spec can then only be wrong in
-- name, key or payload, checked here in check_specs' order, and the row is built from
-- the arguments.
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
declare
  v_now    timestamptz;
  v_max    integer;
  v_size   integer;
  v_id     bigint;
  v_queue  text;
begin
  if p_options is distinct from '{}' then
    return query
      select m.id, m.outcome
        from jobs.enqueue_many(jobs.one_spec(p_name, p_key, p_payload, p_options)) m;
    return;
  end if;

  v_now := jobs.now();
  v_max := jobs.max_payload_bytes();

  -- GUARD: every refusal happens here, before the first write.
  if p_name is null or p_name = '' then
    perform jobs.raise_error('invalid_argument', 'spec 1: name is required');
  end if;
  if p_key is null or p_key = '' then
    perform jobs.raise_error('invalid_argument', 'spec 1: key is required (the idempotency key)');
  end if;
  -- The size of the payload's text form; none for a JSON null payload (stored as {}).
  v_size := pg_catalog.octet_length(coalesce(p_payload, '{}') #>> '{}');
  if v_size > v_max then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('spec 1: payload is %s bytes; the limit is %s', v_size, v_max), null,
      'store large data elsewhere and pass a reference in the payload');
  end if;

  -- WRITE: every other field takes its spec default.
  insert into jobs.job as j (name, queue, tenant, key, payload, priority, run_at,
                             max_attempts, retry_base_s, retry_cap_s, retry_jitter,
                             dead_letter, timeout_s, traceparent, created_at)
  values (p_name, 'default', null, p_key,
          case when v_size is null then '{}' else coalesce(p_payload, '{}') end, 0, v_now,
          25, 1, 3600, 'full', true, null, null, v_now)
  on conflict (name, (coalesce(tenant, '')), key) do nothing
  returning j.id, j.queue into v_id, v_queue;

  if found then
    -- WAKE: its run_at is now.
    perform jobs.wake(array[v_queue]);
    id := v_id;
    outcome := 'created';
    return next;
    return;
  end if;

  -- The key has a job: an existing one, or one a concurrent transaction committed first
  -- (this later statement sees it).
  select k.id into v_id
    from jobs.job k
   where k.name = p_name and coalesce(k.tenant, '') = '' and k.key = p_key
   limit 1;
  id := v_id;
  outcome := 'deduped';
  return next;
end
$$;

comment on function jobs.enqueue(text, text, jsonb, jsonb) is
  'Enqueue one job; answers its id and created | deduped.';
