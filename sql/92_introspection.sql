-- sqljobs: introspection with redaction (docs/howto-redaction.md, docs/howto-introspection.md).
--
-- A job type (jobs.job_type) lists the payload paths that are sensitive: every view
-- here hides their values, so psql or a Node service redacts as the Python worker does
-- without the pydantic model. A path names object keys joined by dots; `[]` steps into
-- every element of an array, `*` into every value of an object:
--
--   password, card.number, items[].ssn, tokens[], headers.*
--
-- Two rules:
--   payload   the value at each sensitive path becomes "[redacted]". A job whose name
--             has no job type shows no payload at all ("[redacted]", unless it is {}):
--             nothing is known of it, so nothing of it is shown (fail closed).
--   outputs   progress, last_error, result and step values: every sensitive value the
--             job's payload holds (at least 3 characters long) is replaced inside their
--             strings, so `raise ValueError(f"card {number} declined")` shows no number.
--
-- jobs.job_payload(id) (sql/90_operator.sql) stays the one unredacted read: grant it
-- only to whom may see secrets.

-- ---------------------------------------------------------------------------
-- Paths.
-- ---------------------------------------------------------------------------

-- Why p_path is not a redaction path (null when it is one).
create or replace function jobs.redaction_path_problem(p_path text)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_segment text;
begin
  if p_path is null or p_path = '' then
    return 'a path is a non-empty string';
  end if;
  foreach v_segment in array pg_catalog.string_to_array(p_path, '.') loop
    if v_segment !~ '^(\*|[^.\[\]*]+)(\[\])*$' then
      return pg_catalog.format(
        'path %L: segment %L is not a key, ''*'', or a key followed by []', p_path, v_segment);
    end if;
  end loop;
  return null;
end
$$;

comment on function jobs.redaction_path_problem(text) is
  'Why a text is not a redaction path (null when it is one).';

-- 'items[].ssn' -> {items,[],ssn}
create or replace function jobs.redaction_path_steps(p_path text)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_segment text;
  v_base    text;
  v_steps   text[] := '{}';
begin
  foreach v_segment in array pg_catalog.string_to_array(p_path, '.') loop
    v_base := pg_catalog.replace(v_segment, '[]', '');
    if v_base <> '' then
      v_steps := v_steps || v_base;
    end if;
    for i in 1 .. (pg_catalog.length(v_segment) - pg_catalog.length(v_base)) / 2 loop
      v_steps := v_steps || '[]'::text;
    end loop;
  end loop;
  return v_steps;
end
$$;

comment on function jobs.redaction_path_steps(text) is
  'A redaction path as its steps: ''items[].ssn'' -> {items,[],ssn}.';

-- p_value with the value at the path p_steps replaced by "[redacted]" (JSON nulls stay).
create or replace function jobs.redact_at(p_value jsonb, p_steps text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_head text := p_steps[1];
  v_rest text[] := p_steps[2:];
  v_type text := pg_catalog.jsonb_typeof(p_value);
begin
  if p_value is null or v_type = 'null' then
    return p_value;
  end if;
  if v_head is null then
    return '"[redacted]"'::jsonb;
  end if;
  if v_head = '[]' then
    if v_type <> 'array' then
      return p_value;
    end if;
    return coalesce((select pg_catalog.jsonb_agg(jobs.redact_at(e.value, v_rest) order by e.n)
                       from pg_catalog.jsonb_array_elements(p_value) with ordinality e(value, n)),
                    '[]'::jsonb);
  end if;
  if v_type <> 'object' then
    return p_value;
  end if;
  if v_head = '*' then
    return coalesce((select pg_catalog.jsonb_object_agg(e.key, jobs.redact_at(e.value, v_rest))
                       from pg_catalog.jsonb_each(p_value) e),
                    '{}'::jsonb);
  end if;
  if not p_value ? v_head then
    return p_value;
  end if;
  return pg_catalog.jsonb_set(p_value, array[v_head], jobs.redact_at(p_value->v_head, v_rest));
end
$$;

comment on function jobs.redact_at(jsonb, text[]) is
  'A JSON value with the value at one path (as steps) replaced by "[redacted]".';

-- A redaction path as a strict jsonpath that reaches every scalar under it:
-- 'items[].ssn' -> strict $."items"[*]."ssn".** (jsonb_path_query runs it in C).
create or replace function jobs.redaction_jsonpath(p_path text)
returns jsonpath
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_step text;
  v_path text := 'strict $';
begin
  foreach v_step in array jobs.redaction_path_steps(p_path) loop
    v_path := v_path || case v_step
      when '[]' then '[*]'
      when '*' then '.*'
      else '."' || pg_catalog.replace(pg_catalog.replace(v_step, '\', '\\'), '"', '\"') || '"'
    end;
  end loop;
  return (v_path || '.**')::jsonpath;
end
$$;

comment on function jobs.redaction_jsonpath(text) is
  'A redaction path as the strict jsonpath of every scalar under it.';

-- ---------------------------------------------------------------------------
-- Redaction.
-- ---------------------------------------------------------------------------

-- The payload with each path's value "[redacted]". p_paths null (the job's name has no
-- job type): the whole payload is "[redacted]", unless it is empty.
create or replace function jobs.redact_payload(p_payload jsonb, p_paths text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_path  text;
  v_value jsonb := p_payload;
begin
  if p_paths is null then
    return case when p_payload is null or p_payload = '{}'::jsonb then p_payload
                else '"[redacted]"'::jsonb end;
  end if;
  foreach v_path in array p_paths loop
    v_value := jobs.redact_at(v_value, jobs.redaction_path_steps(v_path));
  end loop;
  return v_value;
end
$$;

comment on function jobs.redact_payload(jsonb, text[]) is
  'A payload with the value at each path "[redacted]"; all of it when the paths are null (unknown type).';

-- The sensitive values a payload holds at p_paths, at least 3 characters long, longest
-- first (so a value that contains another is replaced whole).
create or replace function jobs.redaction_secrets(p_payload jsonb, p_paths text[])
returns text[]
language sql
immutable
set search_path = ''
as $$
  select coalesce(pg_catalog.array_agg(s.v order by pg_catalog.length(s.v) desc, s.v), '{}')
    from (select distinct l.value #>> '{}' as v
            from pg_catalog.unnest(coalesce(p_paths, '{}')) p(path),
                 pg_catalog.jsonb_path_query(p_payload, jobs.redaction_jsonpath(p.path),
                                             '{}', true) l(value)
           where pg_catalog.jsonb_typeof(l.value) in ('string', 'number', 'boolean')
             and pg_catalog.length(l.value #>> '{}') >= 3) s
$$;

comment on function jobs.redaction_secrets(jsonb, text[]) is
  'The sensitive values (as text, 3 characters or more, longest first) a payload holds at the paths.';

create or replace function jobs.redact_text(p_text text, p_secrets text[])
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_secret text;
  v_text   text := p_text;
begin
  if p_text is null or p_secrets is null then
    return p_text;
  end if;
  foreach v_secret in array p_secrets loop
    v_text := pg_catalog.replace(v_text, v_secret, '[redacted]');
  end loop;
  return v_text;
end
$$;

comment on function jobs.redact_text(text, text[]) is
  'A text with every one of the secrets replaced by [redacted].';

-- Every string inside p_value (object keys too) with the secrets replaced; a number
-- that is one of them becomes "[redacted]".
create or replace function jobs.redact_strings(p_value jsonb, p_secrets text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value is null or p_secrets is null or pg_catalog.cardinality(p_secrets) = 0 then
    return p_value;
  end if;
  case pg_catalog.jsonb_typeof(p_value)
    when 'string' then
      return pg_catalog.to_jsonb(jobs.redact_text(p_value #>> '{}', p_secrets));
    when 'number' then
      return case when (p_value #>> '{}') = any (p_secrets) then '"[redacted]"'::jsonb
                  else p_value end;
    when 'object' then
      return coalesce((select pg_catalog.jsonb_object_agg(jobs.redact_text(e.key, p_secrets),
                                                          jobs.redact_strings(e.value, p_secrets))
                         from pg_catalog.jsonb_each(p_value) e), '{}'::jsonb);
    when 'array' then
      return coalesce((select pg_catalog.jsonb_agg(jobs.redact_strings(e.value, p_secrets) order by e.n)
                         from pg_catalog.jsonb_array_elements(p_value) with ordinality e(value, n)),
                      '[]'::jsonb);
    else
      return p_value;
  end case;
end
$$;

comment on function jobs.redact_strings(jsonb, text[]) is
  'A JSON value with every secret replaced inside its strings (and a number equal to one).';

-- A job's output (progress, last_error, result) with the sensitive values of its payload
-- replaced; what jobs.job_view shows. Nothing to do for a null output or a type without
-- sensitive paths, so the secrets are read only for the outputs that need them.
create or replace function jobs.redact_job_output(p_value jsonb, p_payload jsonb, p_paths text[])
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value is null or p_paths is null or pg_catalog.cardinality(p_paths) = 0 then
    return p_value;
  end if;
  return jobs.redact_strings(p_value, jobs.redaction_secrets(p_payload, p_paths));
end
$$;

comment on function jobs.redact_job_output(jsonb, jsonb, text[]) is
  'A job output (progress, last_error, result) with the sensitive values of its payload at the paths replaced.';

-- jobs.redact(name, payload): the payload as every view shows it. (This and the next
-- are PL/pgSQL so that an upgrade may create them before the functions they call.)
create or replace function jobs.redact(p_name text, p_payload jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return jobs.redact_payload(p_payload,
                             (select t.sensitive_paths from jobs.job_type t where t.name = p_name));
end
$$;

comment on function jobs.redact(text, jsonb) is
  'The payload of a job of this name as views show it: sensitive paths "[redacted]" (all of it for an unknown name).';

-- jobs.redact_output(name, payload, value): an error record, result, progress or step
-- value with the sensitive values of that payload replaced.
create or replace function jobs.redact_output(p_name text, p_payload jsonb, p_value jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return jobs.redact_strings(p_value, jobs.redaction_secrets(p_payload,
           (select t.sensitive_paths from jobs.job_type t where t.name = p_name)));
end
$$;

comment on function jobs.redact_output(text, jsonb, jsonb) is
  'A value a job produced (error, result, progress) with the sensitive values of its payload replaced.';

-- ---------------------------------------------------------------------------
-- The job-type registry.
-- ---------------------------------------------------------------------------

-- Why p_def is not a job type definition (null when it is one):
--   {"queue": text, "sensitive": [path, ...], "personal": [path, ...],
--    "payload_schema": {...}, "retry": {...}, "timeout_s": number,
--    "origin": "declared" | "api", "tenant": "required" | "forbidden",
--    "factory": {"kind": text, ...settings}}, every field optional.
create or replace function jobs.job_type_problem(p_name text, p_def jsonb)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_field   text;
  v_problem text;
begin
  if p_name is null or p_name = '' or pg_catalog.octet_length(p_name) > 200 then
    return 'a job type needs a name of at most 200 bytes';
  end if;
  if p_def is null or pg_catalog.jsonb_typeof(p_def) <> 'object' then
    return 'a job type definition is a JSON object';
  end if;
  if p_def @? jobs.too_deep() then
    return 'a job type definition must be nested less than 100 levels deep';
  end if;
  if pg_catalog.octet_length(p_def->>'queue') > 200 then
    return 'queue must be at most 200 bytes';
  end if;
  select k into v_field from pg_catalog.jsonb_object_keys(p_def) k
   where k not in ('queue', 'sensitive', 'personal', 'payload_schema', 'retry', 'timeout_s',
                   'origin', 'tenant', 'factory')
   limit 1;
  if v_field is not null then
    return pg_catalog.format('unknown field %L (fields: queue, sensitive, personal, '
                             'payload_schema, retry, timeout_s, origin, tenant, factory)',
                             v_field);
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'factory'), 'null') not in ('object', 'null')
     or (pg_catalog.jsonb_typeof(p_def->'factory') = 'object'
         and coalesce(pg_catalog.jsonb_typeof(p_def->'factory'->'kind'), 'null') <> 'string') then
    return 'factory must be a JSON object with a string "kind"';
  end if;
  if coalesce(p_def->>'tenant', 'required') not in ('required', 'forbidden') then
    return 'tenant must be "required", "forbidden" or null';
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'queue'), 'string') not in ('string', 'null') then
    return 'queue must be a string';
  end if;
  foreach v_field in array array['sensitive', 'personal'] loop
    if coalesce(pg_catalog.jsonb_typeof(p_def->v_field), 'array') <> 'array' then
      return pg_catalog.format('%s must be an array of paths', v_field);
    end if;
    if exists (select 1 from pg_catalog.jsonb_array_elements(coalesce(p_def->v_field, '[]')) e
                where pg_catalog.jsonb_typeof(e) <> 'string') then
      return pg_catalog.format('%s must hold strings', v_field);
    end if;
    select jobs.redaction_path_problem(e) into v_problem
      from pg_catalog.jsonb_array_elements_text(coalesce(p_def->v_field, '[]')) e
     where jobs.redaction_path_problem(e) is not null
     limit 1;
    if v_problem is not null then
      return pg_catalog.format('%s: %s', v_field, v_problem);
    end if;
  end loop;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'payload_schema'), 'object') not in ('object', 'null')
     or coalesce(pg_catalog.jsonb_typeof(p_def->'retry'), 'object') not in ('object', 'null') then
    return 'payload_schema and retry must be JSON objects';
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'timeout_s'), 'number') not in ('number', 'null')
     or (p_def->>'timeout_s')::double precision <= 0 then
    return 'timeout_s must be a positive number';
  end if;
  if coalesce(p_def->>'origin', 'api') not in ('declared', 'api') then
    return 'origin must be declared or api';
  end if;
  return null;
end
$$;

comment on function jobs.job_type_problem(text, jsonb) is
  'Why a job type definition is refused (null when it is fine).';

-- jobs.text_set(texts, json array of texts) -> both together, each once, sorted. Private.
create or replace function jobs.text_set(p_texts text[], p_more jsonb)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
begin
  return array(select distinct e
                 from (select pg_catalog.unnest(p_texts)
                       union all
                       select pg_catalog.jsonb_array_elements_text(p_more)) as u(e)
                order by e);
end
$$;

comment on function jobs.text_set(text[], jsonb) is
  'Private: a set of texts (a job type''s paths), sorted, each once.';

-- jobs.job_type_write(name, definition, widen) -> true when the type is new. Private:
-- what job_type_put (replace) and job_type_declare (widen) share. A new type is
-- registered as given. Replacing a known one writes every field; widening one only
-- adds: its sensitive and personal paths become the union of the stored and the given
-- ones, its queue and origin are kept, and its schema, retry policy and timeout
-- (descriptions) follow the code. Errors: invalid_job_type (SJ017), nothing written.
create or replace function jobs.job_type_write(p_name text, p_def jsonb, p_widen boolean)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_problem text := jobs.job_type_problem(p_name, p_def);
  v_new     boolean;
begin
  if v_problem is not null then
    perform jobs.raise_error('invalid_job_type', v_problem);
  end if;
  -- (no subquery in the insert: Citus plans none in an insert into a reference table,
  -- docs/design/citus.md)
  insert into jobs.job_type as t (name, queue, sensitive_paths, personal_paths, payload_schema,
                                  retry, timeout_s, origin, updated_at, tenant_policy, factory)
  values (p_name, p_def->>'queue',
          jobs.text_set(array[]::text[], coalesce(p_def->'sensitive', '[]')),
          jobs.text_set(array[]::text[], coalesce(p_def->'personal', '[]')),
          pg_catalog.jsonb_strip_nulls(p_def)->'payload_schema',
          pg_catalog.jsonb_strip_nulls(p_def)->'retry',
          (p_def->>'timeout_s')::double precision,
          case when p_widen then 'declared' else coalesce(p_def->>'origin', 'api') end, jobs.now(),
          p_def->>'tenant', nullif(p_def->'factory', 'null'::jsonb))
  on conflict (name) do update
     set queue = case when p_widen then coalesce(t.queue, excluded.queue) else excluded.queue end,
         sensitive_paths = case when p_widen
                             then jobs.text_set(t.sensitive_paths || excluded.sensitive_paths, '[]')
                             else excluded.sensitive_paths end,
         personal_paths = case when p_widen
                            then jobs.text_set(t.personal_paths || excluded.personal_paths, '[]')
                            else excluded.personal_paths end,
         payload_schema = excluded.payload_schema, retry = excluded.retry,
         timeout_s = excluded.timeout_s,
         origin = case when p_widen then t.origin else excluded.origin end,
         -- a worker's declaration sets a policy where none is stored; an operator's put
         -- replaces it
         tenant_policy = case when p_widen then coalesce(t.tenant_policy, excluded.tenant_policy)
                              else excluded.tenant_policy end,
         factory = excluded.factory,  -- a description: follows the code
         updated_at = excluded.updated_at
  returning (xmax = 0) into v_new;
  return v_new;
end
$$;

comment on function jobs.job_type_write(text, jsonb, boolean) is
  'Private: register a job type, replacing a known one or (widen) only adding to it; true when new.';

-- jobs.job_type_put(name, definition): register (or replace) a job type; true when it
-- is new. An operator's: it may narrow what a type hides, or move it to another queue.
-- Errors: invalid_job_type (SJ017), nothing written.
create or replace function jobs.job_type_put(p_name text, p_def jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.job_type_put');  -- (sql/15_tenancy.sql)
  return jobs.job_type_write(p_name, p_def, false);
end
$$;

comment on function jobs.job_type_put(text, jsonb) is
  'Register (or replace) a job type and its sensitive and personal paths; true when it is new. SJ017 when refused.';

-- jobs.job_type_declare(name, definition): what a worker writes of the jobs it serves
-- as it starts. A new job type is registered as given (origin 'declared'); a known one
-- only gains: its sensitive and personal paths become the union of the stored and the
-- given ones, and its schema, retry policy and timeout (descriptions) follow the code.
-- What would expose or move a job (dropping a sensitive path, another queue) is an
-- operator's (jobs.job_type_put): a worker's login cannot narrow what every reader's
-- view hides. True when it is new. Errors: invalid_job_type (SJ017), nothing written.
create or replace function jobs.job_type_declare(p_name text, p_def jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.job_type_declare');  -- (sql/15_tenancy.sql)
  return jobs.job_type_write(p_name, p_def, true);
end
$$;

comment on function jobs.job_type_declare(text, jsonb) is
  'A worker''s registration of a job type it serves: new as given, known only widened (redaction kept); true when new.';

-- jobs.job_type_remove(name). Errors: job_type_not_found (SJ016).
create or replace function jobs.job_type_remove(p_name text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.job_type_remove');  -- (sql/15_tenancy.sql)
  delete from jobs.job_type t where t.name = p_name;
  if not found then
    perform jobs.raise_error('job_type_not_found', pg_catalog.format('no job type named %L', p_name));
  end if;
end
$$;

comment on function jobs.job_type_remove(text) is
  'Remove a job type (its jobs then show no payload). SJ016 when there is none.';

create or replace function jobs.job_types()
returns table (name text, queue text, sensitive_paths text[], personal_paths text[],
               payload_schema jsonb, retry jsonb, timeout_s double precision, origin text,
               updated_at timestamptz, factory jsonb)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.job_types');  -- (sql/15_tenancy.sql)
  select t.name, t.queue, t.sensitive_paths, t.personal_paths, t.payload_schema, t.retry,
         t.timeout_s, t.origin, t.updated_at, t.factory
    from jobs.job_type t
   order by t.name
$$;

comment on function jobs.job_types() is 'Every registered job type with its sensitive and personal paths, and the data factory that declared it (version 3: the column factory).';

-- jobs.personal_data(): the job types whose payload holds personal data, and where,
-- with how many jobs of each are stored (for a data-subject export or erase).
create or replace function jobs.personal_data()
returns table (name text, personal_paths text[], jobs bigint)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.personal_data');  -- (sql/15_tenancy.sql)
  -- (the jobs counted per name in one read: Citus plans no subquery per type over them)
  select t.name, t.personal_paths, coalesce(c.n, 0)
    from jobs.job_type t
    left join (select j.name, pg_catalog.count(*) as n
                 from jobs.job j
                where j.name = any (array(select p.name from jobs.job_type p
                                           where pg_catalog.cardinality(p.personal_paths) > 0))
                group by j.name) c on c.name = t.name
   where pg_catalog.cardinality(t.personal_paths) > 0
   order by t.name
$$;

comment on function jobs.personal_data() is
  'Job types whose payload holds personal data: their paths and how many jobs are stored.';

-- ---------------------------------------------------------------------------
-- The read side: every view of a job redacts.
-- ---------------------------------------------------------------------------
create or replace view jobs.job_view as
  select j.id, j.name, j.queue, j.tenant, j.key, j.state, j.priority, j.run_at, j.attempt,
         j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.dead_letter,
         -- which claim of the job this is (its token's high bits), never the token: a
         -- live token is its worker's proof (sql/00_schema.sql, "Fencing tokens")
         j.timeout_s, j.claim >> 32 as claim, j.lease_expires_at, j.worker,
         jobs.redact_job_output(j.progress, j.payload, t.sensitive_paths) as progress,
         jobs.redact_job_output(j.last_error, j.payload, t.sensitive_paths) as last_error,
         jobs.redact_job_output(j.result, j.payload, t.sensitive_paths) as result,
         j.traceparent, j.created_at, j.started_at, j.finished_at,
         jobs.redact_payload(j.payload, t.sensitive_paths) as payload,
         j.parent_id, j.parent_step,
         j.actor  -- version 3: who asked for the job (the caller's word, not authentication)
    from jobs.job j
    left join jobs.job_type t on t.name = j.name
   -- a tenant-bound session sees its tenant's jobs only (sql/15_tenancy.sql); each
   -- sub-select runs once per query
   where (select jobs.bound_tenant()) is null or j.tenant = (select jobs.bound_tenant());

comment on view jobs.job_view is
  'Every job (of the session''s tenant, when bound), redacted: sensitive payload paths "[redacted]", their values hidden in progress, last_error and result.';

-- jobs.list_jobs(filter, after_id, limit): a page of jobs, newest first, redacted.
-- Filter fields: state, queue, name, tenant, key (a string or an array of strings),
-- created_after, created_before, finished_after, finished_before (timestamps). Keyset
-- pagination: pass the last id of a page as p_after_id for the next one.
-- A page is read by index, never by scanning the table: job_pkey from the newest, or a
-- state's partial index when few rows have it. (jobs.job_view's tenant condition, two
-- values the planner cannot see when it plans, was priced as matching one row in two
-- hundred: a page then cost a sequential scan of every job, finished ones included.)
create or replace function jobs.list_jobs(
  p_filter   jsonb default '{}',
  p_after_id bigint default null,
  p_limit    integer default 50
)
returns setof jobs.job_view
language plpgsql
stable
set search_path = ''
set enable_seqscan = off
as $$
declare
  v_states jobs.job_state[];
  v_times  timestamptz[];
  v_field  text;
begin
  if p_filter is null or pg_catalog.jsonb_typeof(p_filter) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'filter must be a JSON object');
  end if;
  p_filter := jobs.tenant_filter(p_filter);  -- a bound session: its tenant only
  select k into v_field from pg_catalog.jsonb_object_keys(p_filter) k
   where k not in ('state', 'queue', 'name', 'tenant', 'key', 'created_after', 'created_before',
                   'finished_after', 'finished_before')
   limit 1;
  if v_field is not null then
    perform jobs.raise_error('invalid_argument', pg_catalog.format(
      'unknown filter field %L (fields: state, queue, name, tenant, key, created_after, '
      'created_before, finished_after, finished_before)', v_field));
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('limit must be between 1 and 1000, got %s', p_limit));
  end if;
  begin
    v_states := jobs.filter_values(p_filter, 'state')::jobs.job_state[];
  exception when invalid_text_representation then
    perform jobs.raise_error('invalid_argument', 'filter.state names an unknown state',
      null, 'states: ready, running, parked, succeeded, failed, dead, cancelled, interrupted');
  end;
  begin
    v_times := array[(p_filter->>'created_after')::timestamptz,
                     (p_filter->>'created_before')::timestamptz,
                     (p_filter->>'finished_after')::timestamptz,
                     (p_filter->>'finished_before')::timestamptz];
  exception when invalid_datetime_format or datetime_field_overflow then
    perform jobs.raise_error('invalid_argument', 'filter times must be ISO 8601 timestamps');
  end;
  return query
    select v.id, v.name, v.queue, v.tenant, v.key, v.state, v.priority, v.run_at, v.attempt,
           v.max_attempts, v.retry_base_s, v.retry_cap_s, v.retry_jitter, v.dead_letter,
           v.timeout_s, v.claim, v.lease_expires_at, v.worker, v.progress, v.last_error,
           v.result, v.traceparent, v.created_at, v.started_at, v.finished_at, v.payload,
           v.parent_id, v.parent_step, v.actor
      from jobs.job_view v
     where (p_after_id is null or v.id < p_after_id)
       and (v_states is null or v.state = any (v_states))
       and (p_filter->'queue' is null or v.queue = any (jobs.filter_values(p_filter, 'queue')))
       and (p_filter->'name' is null or v.name = any (jobs.filter_values(p_filter, 'name')))
       and (p_filter->'tenant' is null or v.tenant = any (jobs.filter_values(p_filter, 'tenant')))
       and (p_filter->'key' is null or v.key = any (jobs.filter_values(p_filter, 'key')))
       and (v_times[1] is null or v.created_at >= v_times[1])
       and (v_times[2] is null or v.created_at < v_times[2])
       and (v_times[3] is null or v.finished_at >= v_times[3])
       and (v_times[4] is null or v.finished_at < v_times[4])
     order by v.id desc
     limit p_limit;
end
$$;

comment on function jobs.list_jobs(jsonb, bigint, integer) is
  'A page of jobs, newest first, redacted; filter by state, queue, name, tenant, key and times; keyset by after_id.';

-- jobs.job_detail(id): one job as JSON, redacted: {"job": its job_view row, "attempts":
-- [...], "steps": [...], "children": [...], "waits": [...]}; null when no job has that
-- id. "attempts" is the job's attempt history (jobs.job.attempts: the last 20 attempts
-- that ended without success, oldest first; [] when none), redacted as last_error is.
-- PL/pgSQL: an upgrade creates it before it replaces jobs.job_view.
create or replace function jobs.job_detail(p_id bigint)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_view     jsonb;    -- its job_view row (none: missing, or another tenant's)
  v_attempts jsonb;
  v_secrets  text[];   -- the payload's sensitive values, redacted wherever they appear
begin
  perform jobs.check_tenant(array[p_id]);
  -- One read per part, each naming the job (distributed, its steps and waits are on its
  -- shard and its children on any: Citus plans no subquery per part over them).
  select pg_catalog.to_jsonb(v) into v_view from jobs.job_view v where v.id = p_id;
  if v_view is null then
    return null;
  end if;
  select j.attempts, jobs.redaction_secrets(j.payload, (select t.sensitive_paths
                                                         from jobs.job_type t
                                                        where t.name = j.name))
    into v_attempts, v_secrets
    from jobs.job j where j.id = p_id;
  return pg_catalog.jsonb_build_object(
    'job', v_view,
    'attempts', coalesce(jobs.redact_strings(v_attempts, v_secrets), '[]'::jsonb),
    'steps', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'name', st.name, 'ordinal', st.ordinal, 'kind', st.kind,
               'value', jobs.redact_strings(st.value, v_secrets), 'created_at', st.created_at)
             order by st.ordinal)
        from jobs.step st where st.job_id = p_id), '[]'::jsonb),
    'children', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'id', c.id, 'name', c.name, 'state', c.state, 'parent_step', c.parent_step,
               'attempt', c.attempt, 'finished_at', c.finished_at) order by c.id)
        from jobs.job c where c.parent_id = p_id), '[]'::jsonb),
    'waits', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'step', w.step, 'events', w.names, 'specs', jobs.redact_strings(w.specs, v_secrets),
               'deadline', w.deadline, 'created_at', w.created_at) order by w.created_at, w.step)
        from jobs.event_wait w where w.job_id = p_id), '[]'::jsonb));
end
$$;

comment on function jobs.job_detail(bigint) is
  'One job as JSON, redacted: its job_view row, attempt history, steps, children and open event waits (null when missing).';
