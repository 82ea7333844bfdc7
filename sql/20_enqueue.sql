-- sqljobs: enqueue.
--
-- A job spec is a jsonb object. Its fields are the columns of jobs.job that a caller
-- may set (sql/00_schema.sql; jobs.spec_fields() lists them with their types), plus two
-- that only steer the enqueue:
--
--   delay_s      float   run_at = now + delay_s; exclusive with run_at
--   on_conflict  text    'return' (default): answer the existing job as deduped;
--                        'error': raise duplicate_job (SJ003)
--
-- `name` and `key` are required; every other field takes its column's DEFAULT
-- (jobs.spec_defaults()), and a field given as JSON null does too. run_at defaults to
-- now (+ delay_s). Values must be of their column's JSON type (text: a string; a whole
-- number within the column's range; a number; true/false; a time as an ISO 8601
-- string) and within the rules of jobs.spec_problem; anything else is invalid_argument.
--
-- Idempotency namespace: (name, coalesce(tenant, ''), key). A second enqueue in it
-- answers the existing job, live or finished, with outcome 'deduped'.
--
-- Wake-ups: one pg_notify('jobs_wake', <queue>) per queue that got a job runnable now,
-- per call; PostgreSQL folds repeats within one transaction. `set jobs.notify = off`
-- turns it off for a session (workers also poll).

-- ---------------------------------------------------------------------------
-- jobs.batch_write(insert, grouped) -> the PL/pgSQL that writes a batch, for insert_jobs and
-- jobs.insert_batch (made by jobs.define_spec()). `insert` is the statement's WITH list,
-- ending in `sorted` (ord, id, queue, run_at: each row as it will be inserted) and `ins`
-- (the insert, with an {on_conflict} slot).
-- New keys (most batches): a plain insert, which makes no probe of the unique indexes
-- ahead of each row (ON CONFLICT's cost a quarter of the insert), answered from `sorted`
-- (every row of it went in, or the statement failed: joined to the insert's rows, the
-- answer cost a tenth of a batch of 1,000); a key that has a job
-- raises unique_violation, and the same insert runs again with DO NOTHING. Each try is
-- a subtransaction: at most jobs.subtransaction_allowed() per transaction. `grouped` is
-- the expression that says whether a row of the batch is singleton or debounced: such
-- a batch takes DO NOTHING at once. (A plain insert writes a row's key entry before it
-- waits on another transaction's job of the same group, and a second enqueue of that
-- key in that transaction would then deadlock; ON CONFLICT checks every unique index
-- before it writes any.)
-- ---------------------------------------------------------------------------
create or replace function jobs.batch_write(p_insert text, p_grouped text)
returns text
language sql
immutable
set search_path = ''
as $$
select pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($w$
      if not ({grouped}) and jobs.subtransaction_allowed() then
        declare
          v_ords    integer[];
          v_ids     bigint[];
          v_queues  text[];
          v_run_ats timestamptz[];
        begin
          {insert_or_raise}
          select pg_catalog.array_agg(s.ord), pg_catalog.array_agg(s.id),
                 pg_catalog.array_agg(s.queue), pg_catalog.array_agg(s.run_at)
            into v_ords, v_ids, v_queues, v_run_ats
            from sorted s;
          return query
            select u.ord, u.id, u.queue, u.run_at
              from rows from (pg_catalog.unnest(v_ords), pg_catalog.unnest(v_ids),
                              pg_catalog.unnest(v_queues), pg_catalog.unnest(v_run_ats))
                   as u(ord, id, queue, run_at);
          return;
        exception when unique_violation then
          null;  -- a key (or a singleton's group) that has a job: the insert below skips it
        end;
      end if;
      return query
      {insert_or_skip}
      select s.ord, ins.id, ins.queue, ins.run_at from ins join sorted s on s.id = ins.id;$w$,
  '{insert_or_raise}', pg_catalog.replace(p_insert, '{on_conflict}', '')),
  '{insert_or_skip}', pg_catalog.replace(p_insert, '{on_conflict}',
                                         'on conflict do nothing  -- the key, or a group''s job')),
  '{grouped}', p_grouped)
$$;

comment on function jobs.batch_write(text, text) is
  'Private: the PL/pgSQL that writes a batch of jobs (used by jobs.define_spec()).';

-- jobs.subtransaction_allowed() -> whether this call may try its fast way in a
-- subtransaction: a batch's plain insert (jobs.batch_write), a batch settle's write
-- without a lock pass (jobs.ack_batch). True for the first 8 tries of a transaction.
-- Each try is a subtransaction with its own transaction id, and a transaction with more
-- than 64 of those makes every other session's snapshot check look them up in
-- pg_subtrans; 8 leaves room for the caller's own savepoints. The count is a
-- transaction-local setting: a session that sets it only chooses which way its own
-- calls take.
create or replace function jobs.subtransaction_allowed()
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_used text := pg_catalog.current_setting('jobs.subtransactions', true);
  v_n    integer := case when v_used ~ '^[0-9]$' then v_used::integer
                         when coalesce(v_used, '') = '' then 0
                         else 8 end;
begin
  if v_n >= 8 then
    return false;
  end if;
  perform pg_catalog.set_config('jobs.subtransactions', (v_n + 1)::text, true);
  return true;
end
$$;

comment on function jobs.subtransaction_allowed() is
  'Private: whether a call may try its fast way in a subtransaction (the first 8 of a transaction).';

-- ---------------------------------------------------------------------------
-- jobs.define_spec(): derive the job spec from jobs.job. (Re)creates
--   jobs.job_spec         the spec's fields as a record type
--   jobs.spec_fields()    {field: type} of every spec field (and delay_s, on_conflict)
--   jobs.spec_defaults()  {field: default} from the columns' DEFAULTs
--   jobs.spec_problem_of() the validation of one spec: each rule once, the type rules
--                         read off the columns' types
--   jobs.insert_jobs()    the one insert of jobs that enqueue, enqueue_many, stage's
--                         relay and every other path share
--   jobs.new_job_id()     a new job's id (jobs.job_id_sql), for the outbox's staged rows
-- from the catalog, so a column added to jobs.job is a spec field with its default
-- everywhere at once. Runs at install, and again in any revision that changes jobs.job.
-- The engine's own columns, which no caller sets, are named here.
-- ---------------------------------------------------------------------------
create or replace function jobs.define_spec()
returns void
language plpgsql
volatile
set search_path = ''
as $define$
declare
  v_engine   text[] := array['id', 'state', 'attempt', 'claim', 'lease_expires_at', 'worker',
                             'progress', 'last_error', 'result', 'created_at', 'started_at',
                             'finished_at', 'first_started_at', 'step_seq', 'compensable',
                             'compensating', 'parent_id', 'parent_step', 'settle_watched',
                             'slots', 'blocked_on', 'deferred_by', 'attempts',
                             'code_version', 'bucket'];
  -- the fields that only steer an enqueue (not columns)
  v_steering jsonb := '{"delay_s": "double precision", "on_conflict": "text"}';
  v_fields   jsonb := '{}';
  v_defaults jsonb := '{}';
  v_columns  text[] := '{}';  -- spec columns the insert names (run_at is computed)
  v_order    text[];          -- the record's fields: steering ones, then columns in order
  v_checks   text := '';      -- one WHEN per field: a value not of its column's JSON type
  v_values   text;            -- the value rules
  v_given    text;            -- a spec without the fields it gives as JSON null
  v_base     text;            -- the spec's fields with their defaults, before it gives any
  v_known    text;            -- the fields' names
  v_col      record;
  v_default  jsonb;
  v_wrong    text;
  v_want     text;
  v_insert   text;            -- a batch's WITH list (jobs.batch_write)
begin
  -- FIELDS and DEFAULTS, from the columns of jobs.job
  v_order := array(select k from pg_catalog.jsonb_object_keys(v_steering) k order by k);
  for v_col in
    select a.attname::text as name, pg_catalog.format_type(a.atttypid, a.atttypmod) as type,
           pg_catalog.pg_get_expr(d.adbin, d.adrelid) as default_expr
      from pg_catalog.pg_attribute a
      left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
     where a.attrelid = 'jobs.job'::pg_catalog.regclass and a.attnum > 0
       and not a.attisdropped and a.attname <> all (v_engine)
     order by a.attnum
  loop
    v_fields := v_fields || pg_catalog.jsonb_build_object(v_col.name, v_col.type);
    v_order := v_order || v_col.name;
    if v_col.default_expr is not null then
      -- a constant the catalog wrote itself (e.g. 'default'::text, 25, '{}'::jsonb)
      execute 'select pg_catalog.to_jsonb(' || v_col.default_expr || ')' into v_default;
      v_defaults := v_defaults || pg_catalog.jsonb_build_object(v_col.name, v_default);
    end if;
    if v_col.name <> 'run_at' then
      v_columns := v_columns || v_col.name;
    end if;
  end loop;
  v_fields := v_fields || v_steering;

  -- TYPES: what a JSON value of each column type must be (null always is: the field
  -- then takes its default). One WHEN per field, in jsonb key order, so the first
  -- wrong field named is the first in the spec as jsonb stores it.
  for v_col in
    select f.key as name, f.value #>> '{}' as type, pg_catalog.quote_literal(f.key) as lit
      from pg_catalog.jsonb_each(v_fields) f
     order by pg_catalog.octet_length(f.key), f.key
  loop
    v_wrong := case v_col.type
      when 'jsonb' then null
      when 'text' then 'when ''string'' then false'
      when 'boolean' then 'when ''boolean'' then false'
      when 'double precision' then 'when ''number'' then @ ({spec}->{field})::numeric > 1e308'
      when 'smallint' then 'when ''number'' then ({spec}->{field})::numeric % 1 <> 0 '
                           'or ({spec}->{field})::numeric not between -32768 and 32767'
      when 'integer' then 'when ''number'' then ({spec}->{field})::numeric % 1 <> 0 '
                          'or ({spec}->{field})::numeric not between -2147483648 and 2147483647'
      when 'timestamp with time zone' then 'when ''string'' then not jobs.is_time({spec}->>{field})'
    end;
    v_want := case v_col.type
      when 'text' then 'a string'
      when 'boolean' then 'true or false'
      when 'double precision' then 'a number'
      when 'smallint' then 'a whole number between -32768 and 32767'
      when 'integer' then 'a whole number between -2147483648 and 2147483647'
      when 'timestamp with time zone' then 'a time (ISO 8601, e.g. 2030-01-02T03:04:05Z)'
    end;
    if v_col.type <> 'jsonb' and v_wrong is null then
      raise exception 'jobs.define_spec: no JSON rule for column type % (field %)',
        v_col.type, v_col.name;
    end if;
    if v_wrong is not null then
      v_checks := v_checks || pg_catalog.format(
        E'\n        when case pg_catalog.jsonb_typeof({spec}->%1$s) when ''null'' then false %2$s'
        || E'\n                  else {spec} ? %1$s end then %3$L',
        v_col.lit, pg_catalog.replace(v_wrong, '{field}', v_col.lit),
        pg_catalog.format('%L must be %s', v_col.name, v_want));
    end if;
  end loop;

  -- jobs.job_spec: a spec's fields as one record (narrow, so reading a spec is cheap).
  -- Fields are added, never dropped or changed: a column of jobs.job is never either.
  -- A column added to jobs.job comes last, so does its field here: an upgraded type
  -- and a fresh one list the same fields in the same order.
  if pg_catalog.to_regtype('jobs.job_spec') is null then
    execute 'create type jobs.job_spec as (' ||
            (select pg_catalog.string_agg(pg_catalog.format('%I %s', f.name, v_fields->>f.name),
                                          ', ' order by f.ord)
               from pg_catalog.unnest(v_order) with ordinality as f(name, ord)) || ')';
  else
    for v_col in
      select f.name, v_fields->>f.name as type
        from pg_catalog.unnest(v_order) with ordinality as f(name, ord)
       where not exists (select from pg_catalog.pg_attribute a
                          where a.attrelid = 'jobs.job_spec'::pg_catalog.regclass
                            and a.attname = f.name and not a.attisdropped)
       order by f.ord
    loop
      execute pg_catalog.format('alter type jobs.job_spec add attribute %I %s',
                                v_col.name, v_col.type);
    end loop;
  end if;
  comment on type jobs.job_spec is
    'Private: the fields of a job spec (made by jobs.define_spec() from jobs.job).';

  execute pg_catalog.format($f$
    create or replace function jobs.spec_fields()
    returns jsonb language sql immutable set search_path = ''
    as $b$ select %L::jsonb $b$ $f$, v_fields);
  comment on function jobs.spec_fields() is
    'The job spec''s fields and their types (made by jobs.define_spec()).';
  execute pg_catalog.format($f$
    create or replace function jobs.spec_defaults()
    returns jsonb language sql immutable set search_path = ''
    as $b$ select %L::jsonb $b$ $f$, v_defaults);
  comment on function jobs.spec_defaults() is
    'The job spec''s defaults (made by jobs.define_spec() from the DEFAULTs of jobs.job).';

  -- The validation of one spec, written once here as two pieces of SQL over {spec} (the
  -- spec) and {r} (its fields with their defaults), then used by jobs.spec_problem_of
  -- (one spec: simple expressions, no query) and jobs.spec_problem (a batch: one query).
  v_values := $rules$case
        when {r}.name is null or {r}.name = '' then 'name is required'
        when {r}.key is null or {r}.key = '' then 'key is required (the idempotency key)'
        -- a payload is what a handler takes as keyword arguments (null or absent: {})
        when pg_catalog.jsonb_typeof({r}.payload) <> 'object' then 'payload must be a JSON object'
        -- BOUNDS (docs/reference/sql.md, "Limits"): no value a caller may pass breaks an
        -- index, a fleet-wide read or a later settle of the job
        when pg_catalog.octet_length({r}.name) > 200 then 'name must be at most 200 bytes'
        when pg_catalog.octet_length({r}.key) > 1000 then 'key must be at most 1000 bytes'
        when pg_catalog.octet_length({r}.queue) > 200 then 'queue must be at most 200 bytes'
        when pg_catalog.octet_length({r}.tenant) > 200 then 'tenant must be at most 200 bytes'
        when pg_catalog.octet_length({r}.group_key) > 1000 then 'group_key must be at most 1000 bytes'
        when pg_catalog.octet_length({r}.traceparent) > 256 then 'traceparent must be at most 256 bytes'
        when {r}.payload @? jobs.too_deep() then 'payload must be nested less than 100 levels deep'
        when {r}.run_at not between '1970-01-01 00:00:00+00' and '2200-01-01 00:00:00+00'
          then 'run_at must be between 1970-01-01 and 2200-01-01'
        when {r}.delay_s > 3.2e9 then 'delay_s must be at most 3.2e9 seconds (a century)'
        when {r}.timeout_s > 1e9 then 'timeout_s must be at most 1e9 seconds'
        when {r}.retry_base_s > 1e9 then 'retry_base_s must be at most 1e9 seconds'
        when {r}.retry_cap_s > 1e9 then 'retry_cap_s must be at most 1e9 seconds'
        when {r}.debounce_s > 1e9 then 'debounce_s must be at most 1e9 seconds'
        when {r}.throttle_per_s > 1e9 then 'throttle_per_s must be at most 1e9 seconds'
        when {r}.queue = '' then 'queue must not be empty'
        when {r}.max_attempts < 1 then 'max_attempts must be at least 1'
        when {r}.retry_base_s <= 0 then 'retry_base_s must be positive'
        when {r}.retry_cap_s < {r}.retry_base_s then 'retry_cap_s must be at least retry_base_s'
        when {r}.retry_jitter not in ('none', 'full', 'equal')
          then 'retry_jitter must be none, full or equal'
        when {r}.timeout_s <= 0 then 'timeout_s must be positive'
        when {r}.delay_s < 0 then 'delay_s must not be negative'
        when {r}.delay_s is not null and {r}.run_at is not null
          then 'give run_at or delay_s, not both'
        when {r}.on_conflict not in ('return', 'error') then 'on_conflict must be return or error'
        when {r}.group_key = '' then 'group_key must not be empty'
        when {r}.debounce_s <= 0 then 'debounce_s must be positive'
        when {r}.debounce_s is not null and ({r}.run_at is not null or {r}.delay_s is not null)
          then 'give debounce_s, or run_at / delay_s, not both'
        when ({r}.throttle_n is null) <> ({r}.throttle_per_s is null)
          then 'give throttle_n and throttle_per_s together'
        when {r}.throttle_n < 1 then 'throttle_n must be at least 1'
        when {r}.throttle_per_s <= 0 then 'throttle_per_s must be positive'
        when {r}.hooks is not null and not (
               pg_catalog.jsonb_typeof({r}.hooks) = 'object'
               and {r}.hooks - '{settled,exhausted}'::text[] = '{}'
               and not {r}.hooks @? '$.* ? (@.type() != "object" || !exists(@.name)
                                           || @.name.type() != "string" || @.name == ""
                                           || (exists(@.queue) && @.queue.type() != "string")
                                           || exists(@.keyvalue() ? (@.key != "name" && @.key != "queue")))'
               and pg_catalog.octet_length({r}.hooks::text) <= 1000)
          then 'hooks must be {"settled": {"name": "...", "queue": "..."}, "exhausted": {...}}'
      end$rules$;
  v_given := 'case when {spec} @? ''$.* ? (@ == null)'' then jobs.spec_given({spec}) else {spec} end';
  v_base := 'pg_catalog.jsonb_populate_record(null::jobs.job_spec, '
            || pg_catalog.quote_literal(v_defaults) || '::jsonb)';
  v_known := pg_catalog.quote_literal(array(select pg_catalog.jsonb_object_keys(v_fields)))
             || '::text[]';

  -- jobs.spec_problem_of(spec) -> what is wrong with one spec, or null. Reads no table.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
          pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.spec_problem_of(p_spec jsonb)
    returns text
    language plpgsql
    immutable
    set search_path = ''
    as $b$
    declare
      v_problem text;
      v_r       jobs.job_spec;
    begin
      -- SHAPE: an object of known fields, each of its column's JSON type
      if pg_catalog.jsonb_typeof({spec}) is distinct from 'object' then
        return 'must be a JSON object';
      end if;
      -- THE COMMON SPEC: only the fields most enqueues give, each plainly valid (so every
      -- rule below holds for it, the other fields taking their defaults): valid, without
      -- the full reading below. Anything else, valid or not, is read in full.
      if {spec} - '{name,key,payload,queue,priority,tenant,actor}'::text[] = '{}'
         and pg_catalog.jsonb_typeof({spec}->'name') = 'string'
         and pg_catalog.octet_length({spec}->>'name') between 1 and 200
         and pg_catalog.jsonb_typeof({spec}->'key') = 'string'
         and pg_catalog.octet_length({spec}->>'key') between 1 and 1000
         and pg_catalog.jsonb_typeof({spec}->'payload') = 'object'
         and not ({spec}->'payload' @? jobs.too_deep())
         and (case pg_catalog.jsonb_typeof({spec}->'queue')
               when 'string' then pg_catalog.octet_length({spec}->>'queue') between 1 and 200
               else not {spec} ? 'queue' end)
         and (case pg_catalog.jsonb_typeof({spec}->'tenant')
               when 'string' then pg_catalog.octet_length({spec}->>'tenant') <= 200
               else not {spec} ? 'tenant' end)
         and (case pg_catalog.jsonb_typeof({spec}->'priority')
               -- (a whole number as its text reads, as the smallint will: not 1.0)
               when 'number' then (case when ({spec}->>'priority') ~ '^-?[0-9]{1,5}$'
                                        then ({spec}->>'priority')::integer between -32768 and 32767
                                        else false end)
               else not {spec} ? 'priority' end) then
        return null;
      end if;
      if {spec} - {known} <> '{}' then  -- the first unknown field in jsonb key order
        return pg_catalog.format('unknown field %L',
          (select k from pg_catalog.jsonb_object_keys({spec} - {known}) k limit 1));
      end if;
      v_problem := case{checks}
      end;
      if v_problem is not null then
        return v_problem;
      end if;
      -- VALUES: the fields with their defaults, now that every type is right
      v_r := pg_catalog.jsonb_populate_record({base}, {given});
      return {values};
    end
    $b$ $f$, '{values}', v_values), '{given}', v_given), '{base}', v_base), '{checks}', v_checks),
      '{known}', v_known), '{spec}', 'p_spec'), '{r}', 'v_r');
  comment on function jobs.spec_problem_of(jsonb) is
    'What is wrong with one job spec, or null (made by jobs.define_spec() from jobs.job).';

  -- jobs.spec_problem(specs) -> the first thing wrong with a batch of specs, or null:
  -- 'spec N: <problem>' for the first spec that has one, and its first problem.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
          pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.spec_problem(p_specs jsonb)
    returns text
    language plpgsql
    immutable
    set search_path = ''
    -- Generic plans: re-planning this statement on every call cost more than running it.
    set plan_cache_mode = force_generic_plan
    as $b$
    begin
      if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array' then
        return 'specs must be a JSON array of job specs';
      end if;
      if pg_catalog.jsonb_array_length(p_specs) = 1 then
        return 'spec 1: ' || jobs.spec_problem_of(p_specs->0);
      end if;
      return (
        select pg_catalog.format('spec %s: %s', p.ord, p.problem)
          from (select e.ord, case
              when pg_catalog.jsonb_typeof({spec}) <> 'object' then 'must be a JSON object'
              when {spec} - {known} <> '{}' then
                pg_catalog.format('unknown field %L',
                  (select k from pg_catalog.jsonb_object_keys({spec} - {known}) k limit 1)){checks}
              else (select {values}
                      -- (offset 0: the record is made once, not once per field read)
                      from (select pg_catalog.jsonb_populate_record({base}, {given}) as r
                            offset 0) x)
            end as problem
              from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
            offset 0) p
         where p.problem is not null
         order by p.ord
         limit 1);
    end
    $b$ $f$, '{values}', v_values), '{given}', v_given), '{base}', v_base), '{checks}', v_checks),
      '{known}', v_known), '{spec}', 'e.spec'), '{r}', '(x.r)');
  comment on function jobs.spec_problem(jsonb) is
    'The first problem in a jsonb array of job specs, or null when all are valid. Reads no table.';

  -- jobs.new_job_id(name, tenant, key) -> a new job id, its bucket in the low 8 bits: for
  -- jobs.stage_many, which makes a staged row's id (a call per row, about 1 µs, which
  -- the inserts below avoid by inlining the same expression).
  execute pg_catalog.format($f$
    create or replace function jobs.new_job_id(p_name text, p_tenant text, p_key text)
    returns bigint
    language plpgsql
    volatile
    set search_path = ''
    as $b$
    begin
      return %s;
    end
    $b$ $f$, jobs.job_id_sql('p_name', 'p_tenant', 'p_key'));
  comment on function jobs.new_job_id(text, text, text) is
    'Private: a new job id for a job of this name, tenant and key (its bucket in the low 8 bits; made by jobs.define_spec()).';

  -- jobs.insert_job(spec, now, id) -> (id, queue, run_at) of the job it created, or nulls:
  -- the insert of jobs.insert_jobs for one spec (already checked), a key that has a job
  -- (or a group with its singleton or debounced job) skipped. id: the job's id (the
  -- relay's staged row); null: a new one (jobs.job_id_sql). Not a set: jobs.enqueue
  -- reads its answer in an assignment, without a query around it.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_job(p_spec jsonb, p_now timestamptz,
                                               p_id bigint default null,
                                               out id bigint, out queue text,
                                               out run_at timestamptz)
    language plpgsql volatile set search_path = ''
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      -- its fields over the defaults, read in one pass (the same record as populating
      -- the defaults' record with them)
      v_r jobs.job_spec := pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults} ||
             case when p_spec @? '$.* ? (@ == null)' then jobs.spec_given(p_spec) else p_spec end);
      v_id bigint := coalesce(p_id, {new_id});
    begin
      insert into jobs.job as j (id, bucket, {columns}, run_at, created_at)
      values (v_id, v_id & 255, {values1},
              coalesce(v_r.run_at, p_now + pg_catalog.make_interval(
                secs => coalesce(v_r.delay_s, v_r.debounce_s, 0))),
              p_now)
      on conflict do nothing  -- the key, or a singleton's or debounced job's group
      returning j.id, j.queue, j.run_at into id, queue, run_at;
    end
    $b$ $f$, '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{new_id}', jobs.job_id_sql('v_r.name', 'v_r.tenant', 'v_r.key')),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values1}', (select pg_catalog.string_agg('v_r.' || pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_job(jsonb, timestamp with time zone, bigint) is
    'Private: the insert of one job (made by jobs.define_spec()).';

  -- jobs.insert_jobs(specs, now, ids) -> (ord, id, queue, run_at) per job it created.
  -- Inserts every spec (already checked) as a ready job, in (name, tenant, key) order so
  -- two batches that share keys wait for each other instead of deadlocking (byte order:
  -- any one order does, and the locale's comparisons cost a sort of 1,000 keys twice
  -- as much, more under a locale such as en_US than C.UTF-8); a key that
  -- has a job (or that an earlier spec of the batch takes) is skipped, not answered.
  -- ids: the id of each spec (the relay's staged rows); null: a new one (jobs.job_id_sql).
  v_insert := $i$
      with s as materialized (
        select e.ord::integer as ord,
               pg_catalog.jsonb_populate_record(v_base,
                 case when e.spec @? '$.* ? (@ == null)' then jobs.spec_given(e.spec)
                      else e.spec end) as r
          from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
      ), mixed as (
        -- Whether the batch spans several (name, tenant). Usually it does not, and then
        -- key order is (name, tenant, key) order: sorting by key alone is far cheaper.
        select exists (select from s, (select (s1.r).name, (s1.r).tenant from s as s1 limit 1) f
                        where (s.r).name <> f.name
                           or coalesce((s.r).tenant, '') <> coalesce(f.tenant, '')) as yes
      ), sorted as materialized (
        -- in lock order, the ids drawn in that order too
        select o.ord, coalesce(p_ids[o.ord], {new_id}) as id, o.r, (o.r).queue,
               coalesce((o.r).run_at, p_now + pg_catalog.make_interval(
                 secs => coalesce((o.r).delay_s, (o.r).debounce_s, 0))) as run_at
          from (select s.ord, s.r
                  from s
                 order by case when (select mixed.yes from mixed) then (s.r).name collate "C" end,
                          case when (select mixed.yes from mixed)
                               then coalesce((s.r).tenant, '') collate "C" end,
                          (s.r).key collate "C", s.ord) o
      ), ins as (
        insert into jobs.job as j (id, bucket, {columns}, run_at, created_at)
        select s.id, s.id & 255, {values}, s.run_at, p_now
          from sorted s
        {on_conflict}
        returning j.id, j.queue, j.run_at
      )$i$;
  v_insert := pg_catalog.replace(v_insert, '{new_id}',
                                jobs.job_id_sql('(o.r).name', '(o.r).tenant', '(o.r).key'));
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_jobs(p_specs jsonb, p_now timestamptz,
                                                p_ids bigint[] default null)
    returns table (ord integer, id bigint, queue text, run_at timestamptz)
    language plpgsql volatile set search_path = ''
    -- PL/pgSQL, not SQL: its plan is kept for the session instead of made on every call.
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      v_base jobs.job_spec;
    begin
      -- ONE SPEC (most calls): one row, without the batch statement's set-up.
      if pg_catalog.jsonb_array_length(p_specs) = 1 then
        select o.id, o.queue, o.run_at into id, queue, run_at
          from jobs.insert_job(p_specs->0, p_now, p_ids[1]) o;
        if id is not null then
          ord := 1;
          return next;
        end if;
        return;
      end if;
      -- A BATCH: one statement.
      v_base := pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults});{write}
    end
    $b$ $f$, '{write}', jobs.batch_write(v_insert,
        $g$p_specs @? '$[*] ? (@.singleton == true || @.debounce_s != null)'$g$)),
      '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values}', (select pg_catalog.string_agg('(s.r).' || pg_catalog.quote_ident(c), ', ')
                     from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_jobs(jsonb, timestamp with time zone, bigint[]) is
    'Private: the one insert of jobs (made by jobs.define_spec()).';

  -- jobs.insert_batch(spec, keys, payloads, now) -> (ord, id, queue, run_at) per job it
  -- created: the insert of jobs.insert_jobs for jobs that share one spec (already
  -- checked), each with its own key and payload (null: {}). The shared fields are read
  -- once, not once per job. In key order (one name and tenant), as insert_jobs locks.
  v_insert := $i$
      with sorted as materialized (
        -- in lock order, the ids drawn in that order too
        select o.ord, {new_id} as id, o.key, o.payload, v_r.queue, v_run_at as run_at
          from (select k.ord::integer as ord, k.key,
                       coalesce(nullif(k.payload, 'null'), '{}') as payload
                  -- each key beside its payload (as many: enqueue_batch checks), none: {}
                  from rows from (pg_catalog.unnest(p_keys),
                                  pg_catalog.jsonb_array_elements(p_payloads))
                       with ordinality as k(key, payload, ord)
                 order by k.key collate "C", k.ord) o
      ), ins as (
        insert into jobs.job as j (id, bucket, {columns}, run_at, created_at)
        select s.id, s.id & 255, {values}, s.run_at, p_now
          from sorted s
        {on_conflict}
        returning j.id, j.queue, j.run_at
      )$i$;
  v_insert := pg_catalog.replace(v_insert, '{new_id}',
                                jobs.job_id_sql('v_r.name', 'v_r.tenant', 'o.key'));
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_batch(p_spec jsonb, p_keys text[],
                                                 p_payloads jsonb, p_now timestamptz)
    returns table (ord integer, id bigint, queue text, run_at timestamptz)
    language plpgsql volatile set search_path = ''
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      v_r      jobs.job_spec := pg_catalog.jsonb_populate_record(
                  pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults}),
                  jobs.spec_given(p_spec));
      v_run_at timestamptz := coalesce(v_r.run_at, p_now + pg_catalog.make_interval(
                  secs => coalesce(v_r.delay_s, v_r.debounce_s, 0)));
    begin{write}
    end
    $b$ $f$, '{write}', jobs.batch_write(v_insert, 'v_r.singleton or v_r.debounce_s is not null')),
      '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values}', (select pg_catalog.string_agg(case c when 'key' then 's.key'
                                                       when 'payload' then 's.payload'
                                                       else 'v_r.' || pg_catalog.quote_ident(c) end,
                                                  ', ')
                     from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_batch(jsonb, text[], jsonb, timestamp with time zone) is
    'Private: the insert of jobs sharing one spec (made by jobs.define_spec()).';
end
$define$;

comment on function jobs.define_spec() is
  'Derive the job spec (fields, defaults, the insert) from the columns of jobs.job.';

-- jobs.spec_given(spec): the fields a spec gives, without those given as JSON null
-- (which take their default). Private.
create or replace function jobs.spec_given(p_spec jsonb)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if not p_spec @? '$.* ? (@ == null)' then
    return p_spec;  -- the common case: a spec gives no nulls
  end if;
  return coalesce((select pg_catalog.jsonb_object_agg(f.key, f.value)
                     from pg_catalog.jsonb_each(p_spec) as f
                    where pg_catalog.jsonb_typeof(f.value) <> 'null'), '{}');
end
$$;

-- jobs.is_time(text): whether the text reads as a timestamptz. Private.
create or replace function jobs.is_time(p_text text)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  perform p_text::timestamptz;
  return true;
exception when data_exception then
  return false;
end
$$;

-- jobs.job_of_key(name, tenant, key) -> the id of the job that holds the key, or null.
create or replace function jobs.job_of_key(p_name text, p_tenant text, p_key text)
returns bigint
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
begin
  return (select k.id from jobs.job k
           where k.name = p_name and coalesce(k.tenant, '') = coalesce(p_tenant, '')
             and k.key = p_key
           limit 1);
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.actor_problem(actor) -> what is wrong with an actor, or null (none, or JSON
-- null, is no actor). An actor says who asked for a job (a user or service id): a
-- non-empty JSON string or object, at most 512 bytes as JSON text. Reads no table.
-- ---------------------------------------------------------------------------
create or replace function jobs.actor_problem(p_actor jsonb)
returns text
language plpgsql
immutable
set search_path = ''
as $$
begin
  return case
    when p_actor is null or pg_catalog.jsonb_typeof(p_actor) = 'null' then null
    when pg_catalog.jsonb_typeof(p_actor) not in ('string', 'object')
      then pg_catalog.format('an actor must be a JSON string or object (a user or service id), not %s',
                             pg_catalog.jsonb_typeof(p_actor))
    when p_actor = '""' or p_actor = '{}' then 'an actor must not be empty'
    when pg_catalog.octet_length(p_actor::text) > 512
      then pg_catalog.format('an actor must be at most 512 bytes as JSON, this one is %s',
                             pg_catalog.octet_length(p_actor::text))
  end;
end
$$;

comment on function jobs.actor_problem(jsonb) is
  'What is wrong with an actor (a non-empty JSON string or object of at most 512 bytes), or null.';

-- ---------------------------------------------------------------------------
-- jobs.run_actor() -> the actor of the run this transaction writes for, or null.
-- jobs.fence_run (sql/40_settle.sql), which a client sends first in the transaction of
-- every write a handler makes, sets it (the transaction-local setting jobs.run_actor)
-- to its job's actor; enqueue_many, enqueue_batch, stage_many and emit_event_v2 give
-- it to what they write that names no actor. A session may set it by hand: an actor
-- is the caller's word anyway. Not JSON: invalid_actor (SJ023).
-- ---------------------------------------------------------------------------
create or replace function jobs.run_actor()
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_text text := pg_catalog.current_setting('jobs.run_actor', true);
begin
  if v_text is null or v_text = '' then
    return null;
  end if;
  begin
    return v_text::jsonb;
  exception when invalid_text_representation then
    perform jobs.raise_error('invalid_actor', 'the setting jobs.run_actor is not JSON');
  end;
end
$$;

-- jobs.run_actor_specs(specs) -> the specs, each that names no actor (or JSON null)
-- given the run's (jobs.run_actor()); no run: the specs as they are. An explicit actor
-- is kept. Private.
create or replace function jobs.run_actor_specs(p_specs jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_actor jsonb := jobs.run_actor();
begin
  if v_actor is null or pg_catalog.jsonb_typeof(p_specs) is distinct from 'array' then
    return p_specs;
  end if;
  return (select pg_catalog.jsonb_agg(
                   case when pg_catalog.jsonb_typeof(e.spec) = 'object'
                             and coalesce(pg_catalog.jsonb_typeof(e.spec->'actor'), 'null') = 'null'
                        then e.spec || pg_catalog.jsonb_build_object('actor', v_actor)
                        else e.spec end
                   order by e.ord)
            from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord));
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.check_specs(specs): raise invalid_argument (SJ001) for the first problem
-- jobs.spec_problem finds, invalid_actor (SJ023) for the first spec whose actor
-- jobs.actor_problem refuses, or payload_too_large (SJ002) for the first payload over
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
  -- ACTORS: a jsonb field, so no type rule of jobs.spec_problem reads it
  if pg_catalog.jsonb_array_length(p_specs) = 1 then  -- one spec: no query
    if p_specs->0 ? 'actor' then
      v_problem := jobs.actor_problem(p_specs->0->'actor');
      v_ord := 1;
    end if;
  elsif p_specs @? '$[*].actor' then
    select e.ord, jobs.actor_problem(e.spec->'actor') into v_ord, v_problem
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     where jobs.actor_problem(e.spec->'actor') is not null
     order by e.ord
     limit 1;
  end if;
  if v_problem is not null then
    perform jobs.raise_error('invalid_actor', pg_catalog.format('spec %s: %s', v_ord, v_problem),
      null, 'pass a user or service id: a string, or a small object such as {"user": "42"}');
  end if;
  v_ord := null;
  if pg_catalog.jsonb_array_length(p_specs) = 1 then  -- one spec: no query
    if pg_catalog.octet_length(p_specs->0->>'payload') > v_max then
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
-- Notification payloads (channels jobs_wake and jobs_settled). Any session may LISTEN
-- on any channel, a tenant-bound one too: so a payload names no queue and no job, but is
-- a token, the first 16 hex digits of sha256(jobs.channel_key || what), where `what` is
-- 'queue:<name>' or 'job:<id>'. A worker asks the tokens of its queues once
-- (jobs.wake_tokens), a result waiter the token of its job (jobs.watch_token).
-- ---------------------------------------------------------------------------
-- PL/pgSQL, not SQL: a SQL function that reads a table is planned again in every
-- transaction that calls it (about 40 µs of each one-job enqueue); PL/pgSQL keeps the
-- plan for the session.
create or replace function jobs.channel_token(p_what text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
                   k.key || pg_catalog.convert_to(p_what, 'UTF8')), 'hex'), 16)
            from jobs.channel_key k);
end
$$;

comment on function jobs.channel_token(text) is
  'The notification token of a queue (''queue:<name>'') or a job (''job:<id>'').';

-- jobs.wake_tokens(queues) -> (queue, token) per queue: what jobs_wake carries when a
-- job of that queue becomes runnable (a worker listens for its queues' tokens).
create or replace function jobs.wake_tokens(p_queues text[])
returns table (queue text, token text)
language sql
stable
set search_path = ''
as $$
  select q.name, jobs.channel_token('queue:' || q.name)
    from pg_catalog.unnest(p_queues) with ordinality as q(name, ord)
   order by q.ord
$$;

comment on function jobs.wake_tokens(text[]) is
  'Per queue, the token jobs_wake carries when a job of it becomes runnable.';

-- jobs.worker_token(worker) -> the token jobs_wake carries when an operator cancels a
-- job this worker runs (jobs.apply_cancel): the worker renews its leases at once, hears
-- the cancel, and stops the run, instead of at its next heartbeat.
create or replace function jobs.worker_token(p_worker text)
returns text
language sql
stable
set search_path = ''
as $$
  select jobs.channel_token('worker:' || p_worker)
$$;

comment on function jobs.worker_token(text) is
  'The token jobs_wake carries when a job this worker runs is cancelled.';

-- ---------------------------------------------------------------------------
-- jobs.wake(queues): one pg_notify('jobs_wake', <queue's token>) per queue, unless the
-- session set jobs.notify = off. PostgreSQL delivers them at commit and folds repeats
-- within a transaction, so a transaction wakes each queue once however many calls it
-- makes.
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
    perform pg_catalog.pg_notify('jobs_wake', jobs.channel_token('queue:' || v_queue));
  end loop;
end
$$;

comment on function jobs.wake(text[]) is
  'Notify jobs_wake once per queue, with its token (off when the session sets jobs.notify = off).';

-- jobs.job_of_group(spec) -> the job holding the spec's group (name, tenant, group_key):
-- for a singleton spec the live singleton job, for a debounced one the debounced job
-- waiting to start; null when there is none. Private.
create or replace function jobs.job_of_group(p_spec jsonb)
returns bigint
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
begin
  return (select k.id from jobs.job k
           where k.name = p_spec->>'name'
             and coalesce(k.tenant, '') = coalesce(p_spec->>'tenant', '')
             and coalesce(k.group_key, '') = coalesce(p_spec->>'group_key', '')
             and ((k.singleton and (p_spec->>'singleton')::boolean
                   and k.state in ('ready', 'running', 'parked', 'interrupted'))
                  or (k.debounce_s is not null and p_spec->>'debounce_s' is not null
                      and k.state = 'ready' and k.attempt = 0))  -- never started
           limit 1);
end
$$;

-- jobs.debounce(spec, now) -> the debounced job waiting to start in the spec's group,
-- which now carries the spec's payload and starts debounce_s from now; null when none
-- waits. (Trailing debounce: every enqueue inside the window moves the start.) Private.
create or replace function jobs.debounce(p_spec jsonb, p_now timestamptz)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_id bigint;
begin
  update jobs.job as k
     set payload = coalesce(nullif(p_spec->'payload', 'null'), '{}'),
         run_at = p_now + pg_catalog.make_interval(secs => (p_spec->>'debounce_s')::double precision)
   where k.name = p_spec->>'name'
     and coalesce(k.tenant, '') = coalesce(p_spec->>'tenant', '')
     and coalesce(k.group_key, '') = coalesce(p_spec->>'group_key', '')
     and k.debounce_s is not null and k.state = 'ready'
     and k.attempt = 0  -- waiting to start: a started job awaiting its retry is left alone
  returning k.id into v_id;
  return v_id;
end
$$;

-- jobs.refuse_duplicate(ord, id, key): raise duplicate_job (SJ003) for spec `ord`, whose
-- key already has job `id`; nothing when id is null. Private.
create or replace function jobs.refuse_duplicate(p_ord bigint, p_id bigint, p_key text)
returns void
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_id is not null then
    perform jobs.raise_error('duplicate_job',
      pg_catalog.format('spec %s: job %s already exists for key %s', p_ord, p_id,
                        pg_catalog.quote_literal(p_key)));
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.enqueue_many(specs jsonb) -> (ord, id, outcome), one row per spec, in input order.
--
-- Contract:
--   * Refuses the whole call before the first write when any spec is invalid
--     (invalid_argument SJ001, payload_too_large SJ002) or when a spec with
--     on_conflict = 'error' meets an existing key, or a key an earlier spec of the
--     same batch takes (duplicate_job SJ003).
--   * Inserts every new job as ready in one statement (jobs.insert_jobs); a key already
--     present (also a key repeated inside the batch) answers the existing job with
--     outcome 'deduped'; so does a singleton spec whose group has a live singleton job.
--     A debounced spec whose group has a debounced job waiting to start collapses into
--     it (its payload, start now + debounce_s) with outcome 'debounced'.
--   * Notifies 'jobs_wake' once per queue that received a job runnable now.
-- Locks: inserts rows in (name, tenant, key) order, so two batches that share keys
--   wait for each other instead of deadlocking.
-- Clients send at most 1,000 specs per call (one statement per chunk).
-- Answers: the insert answers the specs it created; only the other specs probe the key
--   index, in a later statement, so a key a concurrent transaction committed meanwhile
--   is seen.
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
  v_spec     jsonb;
  v_id       bigint;
  v_queue    text;
  v_run_at   timestamptz;
  v_try      integer;
begin
  -- GUARD: every refusal happens here, before the first write.
  if pg_catalog.current_setting('jobs.run_actor', true) <> '' then
    p_specs := jobs.run_actor_specs(p_specs);  -- written inside a run: its actor
  end if;
  perform jobs.check_specs(p_specs);
  p_specs := jobs.tenant_specs(p_specs);  -- a tenant-bound session's tenant (sql/15_tenancy.sql)
  perform jobs.check_tenant_policy(p_specs);

  -- Throttled jobs: make the claim enforce their rates (sql/35_limits.sql).
  if p_specs @? '$[*].throttle_n ? (@ != null)' then
    insert into jobs.limit (name, scope, updated_at)
    values ('sqljobs.throttle', 'throttle', v_now)
    on conflict (name) do nothing;
  end if;

  -- ONE SPEC (jobs.enqueue, most client calls): the same steps for one row, without the
  -- batch statements' set-up.
  if pg_catalog.jsonb_array_length(p_specs) = 1 then
    v_spec := p_specs->0;
    v_strict := v_spec->>'on_conflict' = 'error';
    if v_strict then
      perform jobs.refuse_duplicate(1, jobs.job_of_key(v_spec->>'name', v_spec->>'tenant',
                                                       v_spec->>'key'), v_spec->>'key');
    end if;
    ord := 1;
    -- (a job of a debounced or singleton group that starts or ends meanwhile frees the
    -- group: then try again)
    for v_try in 1..3 loop
      if v_spec->>'debounce_s' is not null then
        id := jobs.debounce(v_spec, v_now);
        if id is not null then
          outcome := 'debounced';
          return next;
          return;
        end if;
      end if;
      select c.id, c.queue, c.run_at into v_id, v_queue, v_run_at
        from jobs.insert_jobs(p_specs, v_now) c;
      if v_id is not null then
        if v_run_at <= v_now then
          perform jobs.wake(array[v_queue]);  -- WAKE: runnable now
        end if;
        id := v_id;
        outcome := 'created';
        return next;
        return;
      end if;
      -- The key has a job: an existing one, or one a concurrent transaction committed
      -- first (this later statement sees it). Or its group has a live singleton.
      id := jobs.job_of_key(v_spec->>'name', v_spec->>'tenant', v_spec->>'key');
      if v_strict then
        perform jobs.refuse_duplicate(1, id, v_spec->>'key');
      end if;
      id := coalesce(id, case when v_spec->>'debounce_s' is null then jobs.job_of_group(v_spec) end);
      if id is not null then
        outcome := 'deduped';
        return next;
        return;
      end if;
    end loop;
    perform jobs.raise_error('invalid_argument',
      'spec 1: its group changed under three tries in a row; enqueue it again');
  end if;

  -- A BATCH with debounced specs: one at a time (each may collapse into a waiting job).
  if p_specs @? '$[*].debounce_s ? (@ != null)' then
    return query
      select e.ord::integer, m.id, m.outcome
        from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
       cross join lateral jobs.enqueue_many(pg_catalog.jsonb_build_array(e.spec)) m
       order by e.ord;
    return;
  end if;

  -- A BATCH
  v_strict := p_specs @? '$[*] ? (@.on_conflict == "error")';
  if v_strict then
    perform jobs.refuse_duplicate(e.ord, e.id, e.key)
       from (select e.ord, e.spec->>'key' as key,
                    jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key') as id
               from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
              where e.spec->>'on_conflict' = 'error') e
      where e.id is not null
      order by e.ord
      limit 1;
    -- A strict spec whose key an earlier spec of the same batch already takes.
    select pg_catalog.format('spec %s: key %s is already taken by spec %s of this batch',
                             e.ord, pg_catalog.quote_literal(e.spec->>'key'), f.ord)
      into v_dup
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
      cross join lateral (
        select p.ord
          from pg_catalog.jsonb_array_elements(p_specs) with ordinality as p(spec, ord)
         where p.ord < e.ord and p.spec->>'name' = e.spec->>'name'
           and p.spec->>'key' = e.spec->>'key'
           and coalesce(p.spec->>'tenant', '') = coalesce(e.spec->>'tenant', '')
         limit 1) as f
     where e.spec->>'on_conflict' = 'error'
     order by e.ord
     limit 1;
    if v_dup is not null then
      perform jobs.raise_error('duplicate_job', v_dup);
    end if;
  end if;

  -- WRITE: one insert for the whole batch. A key repeated in the batch is created by
  -- its first spec; the repeats answer that job as deduped.
  with created as (select c.ord, c.id, c.queue, c.run_at from jobs.insert_jobs(p_specs, v_now) c)
  select pg_catalog.array_agg(c.id order by u.ord),
         pg_catalog.array_agg(c.id is not null order by u.ord),
         (select pg_catalog.array_agg(distinct w.queue) from created w where w.run_at <= v_now)
    into v_ids, v_created, v_wake
    from pg_catalog.generate_series(1, pg_catalog.jsonb_array_length(p_specs)) as u(ord)
    left join created c on c.ord = u.ord;

  -- Specs the insert did not take: their key had a job already, or a concurrent
  -- transaction committed one first. This later statement sees it: answer that job.
  if pg_catalog.array_position(v_created, false) is not null then
    v_ids := array(
      select coalesce(e.id, jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key'),
                      jobs.job_of_group(e.spec))
        from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids))
             with ordinality as e(spec, id, ord)
       order by e.ord);
    -- A key that met a concurrent insert after the guard: still refuse when asked to.
    if v_strict then
      perform jobs.refuse_duplicate(e.ord, e.id, e.spec->>'key')
         from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids),
                         pg_catalog.unnest(v_created)) with ordinality as e(spec, id, created, ord)
        where e.spec->>'on_conflict' = 'error' and not e.created and e.id is not null
        order by e.ord
        limit 1;
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
-- jobs.enqueue_batch(spec, keys, payloads) -> (ord, id, outcome), one row per key, in
-- input order.
--
-- Jobs that share one spec: `spec` holds every field but key and payload (name, queue,
-- retry policy, ...), `keys` the jobs' keys and `payloads` (a jsonb array, or null) their
-- payloads, one per key. It is jobs.enqueue_many over the specs `spec + {key, payload}`:
-- the same refusals (spec N: ...), answers, locks and wake-up. The shared fields are
-- read and checked once, not once per job, which is most of enqueue_many's cost; a
-- batch the shared path does not take (a debounced or strict or throttled spec, a
-- tenant-bound session, any key or payload enqueue_many would refuse) goes through
-- jobs.enqueue_many itself. What client libraries send for a batch of one job type.
-- ---------------------------------------------------------------------------
create or replace function jobs.enqueue_batch(
  p_spec     jsonb,
  p_keys     text[],
  p_payloads jsonb default null
)
returns table (ord integer, id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  v_now     timestamptz := jobs.now();
  v_n       integer := coalesce(pg_catalog.cardinality(p_keys), 0);
  v_max     integer := jobs.max_payload_bytes();
  v_ids     bigint[];
  v_ords    integer[];
  v_made    integer;
  v_queue   text;
  v_created boolean[];
  v_wake    text[];
  v_first   jsonb;    -- spec 1, as enqueue_many would read it
  v_problem text;
begin
  -- GUARD: the shapes of the three arguments
  if p_spec is null or pg_catalog.jsonb_typeof(p_spec) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'spec must be a JSON object');
  end if;
  if p_spec ?| array['key', 'payload'] then
    perform jobs.raise_error('invalid_argument',
      'spec must not carry key or payload: pass them as keys and payloads');
  end if;
  if p_payloads is not null and (pg_catalog.jsonb_typeof(p_payloads) <> 'array'
                                 or pg_catalog.jsonb_array_length(p_payloads) <> v_n) then
    perform jobs.raise_error('invalid_argument',
      'payloads must be a JSON array holding one payload per key (or null)');
  end if;
  if v_n = 0 then
    return;
  end if;
  if pg_catalog.current_setting('jobs.run_actor', true) <> ''
     and coalesce(pg_catalog.jsonb_typeof(p_spec->'actor'), 'null') = 'null' then
    p_spec := p_spec || pg_catalog.jsonb_build_object('actor', jobs.run_actor());  -- a run's
  end if;

  -- What the shared path does not take goes through enqueue_many, spec by spec, which
  -- refuses or answers it exactly as it would.
  if jobs.spec_problem_of(p_spec || '{"key": "k"}') is not null
     or p_spec->>'debounce_s' is not null or p_spec->>'on_conflict' = 'error'
     or p_spec->>'throttle_n' is not null or jobs.bound_tenant() is not null
     or jobs.actor_problem(p_spec->'actor') is not null
     or pg_catalog.array_position(p_keys, null) is not null or '' = any (p_keys)
     or exists (select from pg_catalog.unnest(p_keys) k where pg_catalog.octet_length(k) > 1000)
     -- each payload's checks in a pass over the array (taking each out cost twice as
     -- much); an item's text is part of the array's, so only a long array is measured
     -- item by item
     or (p_payloads is not null and (
           p_payloads @? 'strict $[*] ? (@.type() != "object" && @.type() != "null")'
           or p_payloads @? jobs.too_deep_item()
           or (pg_catalog.octet_length(p_payloads::text) > v_max and exists (
                 select from pg_catalog.jsonb_array_elements(p_payloads) as p(payload)
                  where pg_catalog.octet_length(p.payload::text) > v_max)))) then
    -- Refused here, before the spec is copied once per key, what enqueue_many would
    -- refuse in every copy (a 45 kB spec nested 5,000 deep times 10,000 keys took a
    -- backend's memory until the OOM killer stopped the server): spec 1's problem is
    -- the first it names, and an actor it refuses makes every spec's actor wrong. The
    -- answers and errors stay enqueue_many's; only what is copied per key changes.
    v_first := p_spec || pg_catalog.jsonb_build_object(
                 'key', p_keys[1], 'payload', coalesce(p_payloads -> 0, '{}'));
    v_problem := jobs.spec_problem_of(v_first);
    if v_problem is not null then
      perform jobs.raise_error('invalid_argument', 'spec 1: ' || v_problem);
    end if;
    if jobs.actor_problem(p_spec->'actor') is not null then
      -- the other specs' problems come first (jobs.check_specs), read without the actor
      v_problem := jobs.spec_problem((
        select pg_catalog.jsonb_agg(
                 (p_spec - 'actor') || pg_catalog.jsonb_build_object(
                   'key', k.key, 'payload', coalesce(p_payloads -> (k.ord::integer - 1), '{}'))
                 order by k.ord)
          from pg_catalog.unnest(p_keys) with ordinality as k(key, ord)));
      if v_problem is not null then
        perform jobs.raise_error('invalid_argument', v_problem);
      end if;
      perform jobs.check_specs(pg_catalog.jsonb_build_array(v_first));  -- spec 1's actor
    end if;
    return query
      select m.ord, m.id, m.outcome
        from jobs.enqueue_many((
          select pg_catalog.jsonb_agg(
                   p_spec || pg_catalog.jsonb_build_object(
                     'key', k.key, 'payload', coalesce(p_payloads -> (k.ord::integer - 1), '{}'))
                   order by k.ord)
            from pg_catalog.unnest(p_keys) with ordinality as k(key, ord))) m;
    return;
  end if;
  perform jobs.check_tenant_policy(pg_catalog.jsonb_build_array(p_spec));

  -- WRITE: one insert for the whole batch (a key repeated in it: its first spec). Its
  -- jobs share the spec's queue and run_at; usually it took every key, in key order.
  select pg_catalog.count(*)::integer, pg_catalog.array_agg(c.id order by c.ord),
         pg_catalog.array_agg(c.ord order by c.ord),
         pg_catalog.max(c.queue) filter (where c.run_at <= v_now)
    into v_made, v_ids, v_ords, v_queue
    from jobs.insert_batch(p_spec, p_keys, p_payloads, v_now) c;
  v_wake := case when v_queue is not null then array[v_queue] end;
  if v_made = v_n then
    v_created := pg_catalog.array_fill(true, array[v_n]);
  else  -- each id in its key's place, null where the insert took none
    select pg_catalog.array_agg(c.id order by u.ord), pg_catalog.array_agg(c.id is not null order by u.ord)
      into v_ids, v_created
      from pg_catalog.generate_series(1, v_n) as u(ord)
      left join rows from (pg_catalog.unnest(v_ords), pg_catalog.unnest(v_ids)) as c(ord, id)
             on c.ord = u.ord;
  end if;

  -- Keys the insert did not take: answer the job that holds each (or its singleton's).
  if pg_catalog.array_position(v_created, false) is not null then
    v_ids := array(
      select coalesce(e.id, jobs.job_of_key(p_spec->>'name', p_spec->>'tenant', e.key),
                      jobs.job_of_group(p_spec))
        from rows from (pg_catalog.unnest(p_keys), pg_catalog.unnest(v_ids))
             with ordinality as e(key, id, ord)
       order by e.ord);
  end if;

  perform jobs.wake(v_wake);

  return query
    select u.ord::integer, u.id, case when u.created then 'created' else 'deduped' end
      from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_created))
           with ordinality as u(id, created, ord)
     order by u.ord;
end
$$;

comment on function jobs.enqueue_batch(jsonb, text[], jsonb) is
  'Enqueue jobs sharing one spec, a key and a payload each: enqueue_many over those specs, the shared fields read once.';

-- ---------------------------------------------------------------------------
-- jobs.one_spec(name, key, payload, options) -> a one-spec jsonb array, for the
-- single-job wrappers (stage; jobs.enqueue makes its spec the same way, refusing the
-- same options). Refuses options that are not an object or that carry name, key or
-- payload (invalid_argument SJ001).
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
-- options takes every spec field but name, key and payload; it is exactly a one-spec
-- jobs.enqueue_many: the same refusals, answer and wake-up. The common spec (not
-- debounced, throttled or with an on_conflict) takes the one-spec steps of
-- enqueue_many here, in the same order, without making a one-spec array and reading it
-- back through each step's batch function; any other spec goes through enqueue_many.
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
  v_spec    jsonb;
  v_now     timestamptz;
  v_actor   jsonb;
  v_problem text;
  v_max     integer;
  v_tenant  text;
  v_job     record;  -- jobs.insert_job's answer
  v_try     integer;
begin
  -- the spec (jobs.one_spec's, refusing the same options)
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'options must be a JSON object');
  end if;
  if p_options ?| array['name', 'key', 'payload'] then
    perform jobs.raise_error('invalid_argument',
      'options must not carry name, key or payload: pass them as arguments');
  end if;
  v_spec := p_options || pg_catalog.jsonb_build_object('name', p_name, 'key', p_key,
                                                       'payload', coalesce(p_payload, '{}'));
  if v_spec ?| array['debounce_s', 'throttle_n', 'on_conflict'] then
    return query
      select m.id, m.outcome from jobs.enqueue_many(pg_catalog.jsonb_build_array(v_spec)) m;
    return;
  end if;
  v_now := jobs.now();
  -- GUARD (jobs.enqueue_many's, for one spec): every refusal happens here, before the
  -- first write. Written inside a run: its actor (jobs.run_actor_specs).
  if pg_catalog.current_setting('jobs.run_actor', true) <> '' then
    v_actor := jobs.run_actor();
    if v_actor is not null
       and coalesce(pg_catalog.jsonb_typeof(v_spec->'actor'), 'null') = 'null' then
      v_spec := v_spec || pg_catalog.jsonb_build_object('actor', v_actor);
    end if;
  end if;
  -- jobs.check_specs
  v_problem := 'spec 1: ' || jobs.spec_problem_of(v_spec);
  v_max := jobs.max_payload_bytes();
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  if v_spec ? 'actor' then
    v_problem := jobs.actor_problem(v_spec->'actor');
    if v_problem is not null then
      perform jobs.raise_error('invalid_actor', pg_catalog.format('spec %s: %s', 1, v_problem),
        null, 'pass a user or service id: a string, or a small object such as {"user": "42"}');
    end if;
  end if;
  if pg_catalog.octet_length(v_spec->>'payload') > v_max then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('spec %s: payload is %s bytes; the limit is %s', 1,
                        pg_catalog.octet_length(v_spec->>'payload'), v_max),
      null, 'store large data elsewhere and pass a reference in the payload');
  end if;
  -- jobs.tenant_specs: a tenant-bound session's tenant
  v_tenant := jobs.bound_tenant();
  if v_tenant is not null then
    if pg_catalog.jsonb_typeof(v_spec->'tenant') is distinct from 'null'
       and v_spec->'tenant' <> pg_catalog.to_jsonb(v_tenant) then
      perform jobs.raise_error('tenant_refused',
        pg_catalog.format('spec %s: tenant %s is not %s, to which this session is bound', 1,
                          v_spec->'tenant', v_tenant));
    end if;
    v_spec := v_spec || pg_catalog.jsonb_build_object('tenant', v_tenant);
  end if;
  perform jobs.check_tenant_policy(pg_catalog.jsonb_build_array(v_spec));

  -- WRITE (a job of a singleton group that starts or ends meanwhile frees the group:
  -- then try again)
  for v_try in 1..3 loop
    v_job := jobs.insert_job(v_spec, v_now);
    if v_job.id is not null then
      if v_job.run_at <= v_now then
        perform jobs.wake(array[v_job.queue]);  -- WAKE: runnable now
      end if;
      id := v_job.id;
      outcome := 'created';
      return next;
      return;
    end if;
    -- The key has a job: an existing one, or one a concurrent transaction committed
    -- first (this later statement sees it). Or its group has a live singleton.
    id := coalesce(jobs.job_of_key(v_spec->>'name', v_spec->>'tenant', v_spec->>'key'),
                   jobs.job_of_group(v_spec));
    if id is not null then
      outcome := 'deduped';
      return next;
      return;
    end if;
  end loop;
  perform jobs.raise_error('invalid_argument',
    'spec 1: its group changed under three tries in a row; enqueue it again');
end
$$;

comment on function jobs.enqueue(text, text, jsonb, jsonb) is
  'Enqueue one job; answers its id and created | deduped.';

select jobs.define_spec();
