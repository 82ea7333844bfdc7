-- sqljobs: error codes.
--
-- One SQLSTATE class for the whole product: `SJ`. Each code has a stable symbolic name;
-- the Python client maps each SQLSTATE to one exception class (sqljobs/errors.py) and
-- never parses message text. docs/reference/errors.md is the same table for people; a
-- test keeps the three in step.
--
--   SQLSTATE  name                  raised when
--   SJ001     invalid_argument      an argument is missing, malformed or out of range
--   SJ002     payload_too_large     a payload is larger than jobs.max_payload_bytes
--   SJ003     duplicate_job         on_conflict = 'error' and the key already has a job
--   SJ004     lease_lost            a fenced call's claim token or state no longer holds
--   SJ005     queues_required       jobs.claim was given no queue
--   SJ006     job_not_found         an operator verb names a job that does not exist
--   SJ007     job_not_requeueable   requeue of a job that succeeded
--   SJ008     job_live              requeue of a job that is still live (ready/running/…)
--   SJ009     job_running           remove or promote of a job that a worker is running
--   SJ010     job_finished          cancel or promote of a job already in a final state
--   SJ011     reserved_step_name    a step name starting with 'sqljobs.' (the runtime's own)
--   SJ012     key_busy              a job of a key limit with when_busy = 'fail' found its key held
--                                   (stored in the failed job's last_error, not raised)
--   SJ013     limit_not_found       a limit verb names a limit that does not exist
--   SJ014     invalid_retention     a retention age is negative or not a number, or a purge batch < 1
--   SJ015     unknown_retention_key a retention policy names no final state (or awaited, events)
--   SJ016     job_type_not_found    a job-type verb names a job type that is not registered
--   SJ017     invalid_job_type      a job-type definition is refused (unknown field, bad path)
--   SJ018     tenant_refused        a tenant-bound session named another tenant, its job, or a fleet-wide function
--   SJ019     setting_refused       a session setting would widen what the caller may do (the test clock)
--   SJ020     worker_id_taken       a live worker row of that id was registered by another login
--   SJ021     step_not_found        a fork names a step the job's stored history does not have
--   SJ022     tenant_policy         an enqueue breaks its job type's tenant policy (required, forbidden)
--   SJ023     invalid_actor         an actor is not a non-empty JSON string or object of at most 512 bytes
--   SJ030     not_leader            a scheduler fire whose leader token is not the live lease's
--   SJ031     schedule_not_found    a schedule verb names a schedule that does not exist
--   SJ040     backfill_environment_refused  a backfill began in an environment it does not list
--   SJ041     backfill_requires_unmet       a backfill began before a backfill it requires completed
--   SJ042     backfill_checksum_changed     a completed backfill began again under another checksum
--   SJ043     backfill_busy         a backfill began while another live job runs it
--   SJ044     backfill_not_found    a backfill verb names a backfill that never ran there
--   SJ045     backfill_state        pause/resume/cancel of a backfill not in a state that allows it
--   SJ046     backfill_stalled      a backfill's last batch left fewer rows than its count
--                                   (answered by jobs.backfill_finish, raised by the client)
--   SJ050     webhook_disabled      a webhook job of a disabled endpoint (raised by the client)
--   SJ051     webhook_rejected      a webhook endpoint answered a 4xx other than 408/429 (client)
--   SJ052     webhook_tenant_refused  a webhook event of another tenant than its endpoint's (client)
--   SJ053     ledger_unbalanced     a ledger posting does not sum to zero per currency
--   SJ054     ledger_posting_conflict  a posting key written again with other lines
--   SJ060     citus_worker_node     a schema revision was applied to a Citus worker node
--                                   (raised by the guard every revision runs first)
--   SJ061     citus_required        sqljobs migrate --distributed on a database without Citus
--   SJ062     jobs_before_buckets   live jobs made before schema version 3 stop the
--                                   distributing step (their ids carry no bucket)

create or replace function jobs.error_codes()
returns table (sqlstate text, name text, meaning text)
language sql
immutable
set search_path = ''
as $$
  values
    ('SJ001', 'invalid_argument',    'an argument is missing, malformed or out of range'),
    ('SJ002', 'payload_too_large',   'a payload is larger than jobs.max_payload_bytes()'),
    ('SJ003', 'duplicate_job',       'on_conflict = ''error'' and the key already has a job'),
    ('SJ004', 'lease_lost',          'the claim token or running state no longer holds'),
    ('SJ005', 'queues_required',     'jobs.claim was given no queue'),
    ('SJ006', 'job_not_found',       'no job has that id'),
    ('SJ007', 'job_not_requeueable', 'the job succeeded; a success is not run again'),
    ('SJ008', 'job_live',            'the job is still live (ready, running, parked or interrupted)'),
    ('SJ009', 'job_running',         'a worker is running the job'),
    ('SJ010', 'job_finished',        'the job already reached a final state'),
    ('SJ011', 'reserved_step_name',  'step names starting with sqljobs. are the runtime''s own'),
    ('SJ012', 'key_busy',            'another run held the key, and the job said when_busy = fail'),
    ('SJ013', 'limit_not_found',     'no limit has that name'),
    ('SJ014', 'invalid_retention',   'a retention age is negative or not a number, or a batch is below 1'),
    ('SJ015', 'unknown_retention_key', 'a retention policy key is not succeeded, failed, dead, cancelled, awaited or events'),
    ('SJ016', 'job_type_not_found',  'no job type has that name'),
    ('SJ017', 'invalid_job_type',    'a job type definition is refused: unknown field, bad value or bad path'),
    ('SJ018', 'tenant_refused',      'the session is bound to another tenant, or the function acts on every tenant'),
    ('SJ019', 'setting_refused',     'a session setting would widen what the caller may do (the test clock)'),
    ('SJ020', 'worker_id_taken',     'a live worker of that id was registered by another login role'),
    ('SJ021', 'step_not_found',      'the job''s stored history has no step of that name'),
    ('SJ022', 'tenant_policy',       'the job type requires a tenant and none was given, or forbids one'),
    ('SJ023', 'invalid_actor',       'an actor must be a non-empty JSON string or object of at most 512 bytes'),
    ('SJ030', 'not_leader',          'the leader token does not hold the live lease'),
    ('SJ031', 'schedule_not_found',  'no schedule has that name'),
    ('SJ040', 'backfill_environment_refused', 'the backfill may not run in this environment'),
    ('SJ041', 'backfill_requires_unmet', 'a backfill this one requires has not completed in this environment'),
    ('SJ042', 'backfill_checksum_changed', 'the backfill completed under another checksum; it is not run again silently'),
    ('SJ043', 'backfill_busy',       'another live job is running this backfill'),
    ('SJ044', 'backfill_not_found',  'no backfill of that name and scope has run in this environment'),
    ('SJ045', 'backfill_state',      'the backfill is not in a state that allows this verb'),
    ('SJ046', 'backfill_stalled',    'the backfill ended with fewer rows than its declared count'),
    ('SJ050', 'webhook_disabled',    'the outbound webhook endpoint is disabled: no request was sent'),
    ('SJ051', 'webhook_rejected',    'the webhook endpoint refused the event with a 4xx other than 408 or 429'),
    ('SJ052', 'webhook_tenant_refused', 'the webhook event names another tenant than its endpoint''s'),
    ('SJ053', 'ledger_unbalanced',   'the posting''s amounts do not sum to zero in each currency'),
    ('SJ054', 'ledger_posting_conflict', 'the posting key was written with other lines'),
    ('SJ060', 'citus_worker_node',   'this database is a Citus worker node; sqljobs lives on the coordinator'),
    ('SJ061', 'citus_required',      'the distributed mode needs the Citus extension in this database'),
    ('SJ062', 'jobs_before_buckets', 'live jobs made before schema version 3 stop the distributing step')
$$;

comment on function jobs.error_codes() is 'The sqljobs SQLSTATE table: code, symbolic name, meaning.';

-- jobs.raise_error(name, message, detail, hint): raise the coded error `name`.
-- The message is prefixed with the symbolic name so a log line is self-explaining.
-- An unknown name is itself a bug and raises SJ001 saying so.
create or replace function jobs.raise_error(
  p_name    text,
  p_message text,
  p_detail  text default null,
  p_hint    text default null
)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_state text;
begin
  select c.sqlstate into v_state from jobs.error_codes() c where c.name = p_name;
  if v_state is null then
    raise exception 'sqljobs.invalid_argument: unknown error name %', p_name
      using errcode = 'SJ001';
  end if;
  -- RAISE refuses a null DETAIL or HINT, and an empty one prints as a blank line.
  if p_detail is null and p_hint is null then
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message;
  elsif p_hint is null then
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message,
      detail = p_detail;
  elsif p_detail is null then
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message,
      hint = p_hint;
  else
    raise exception using errcode = v_state, message = 'sqljobs.' || p_name || ': ' || p_message,
      detail = p_detail, hint = p_hint;
  end if;
end
$$;

comment on function jobs.raise_error(text, text, text, text) is
  'Raise the coded sqljobs error p_name (see jobs.error_codes()).';

-- The largest payload accepted, in bytes of its jsonb text form: 1 MiB unless an
-- administrator set `jobs.max_payload_bytes` for the login role or the database
-- (`alter role ... set`, `alter database ... set`; the most specific one holds, as
-- PostgreSQL applies them). A session may LOWER it (`set jobs.max_payload_bytes`,
-- PGOPTIONS), never raise it past what its role and database allow: a session setting
-- is the caller's input and widens nothing (docs/design/roles.md).
-- PL/pgSQL for the same reason as jobs.now() (sql/00_schema.sql); the catalog is read
-- only when the setting is there.
create or replace function jobs.max_payload_bytes()
returns integer
language plpgsql
stable
set search_path = ''
as $$
declare
  -- null: the setting exists nowhere (no role or database set it either); '' or a
  -- value: read what an administrator configured, which the session may only lower
  v_text       text := pg_catalog.current_setting('jobs.max_payload_bytes', true);
  v_configured text;
  v_cap        integer;
begin
  if v_text is null then
    return 1048576;
  end if;
  -- what an administrator configured for this login role and database
  select pg_catalog.substr(c.setting, pg_catalog.length('jobs.max_payload_bytes=') + 1)
    into v_configured
    from pg_catalog.pg_db_role_setting s
   cross join lateral pg_catalog.unnest(s.setconfig) as c(setting)
   where s.setdatabase in (0, (select d.oid from pg_catalog.pg_database d
                                where d.datname = pg_catalog.current_database()))
     and s.setrole in (0, (select r.oid from pg_catalog.pg_roles r where r.rolname = session_user))
     and c.setting like 'jobs.max\_payload\_bytes=%'
   order by (s.setrole <> 0) desc, (s.setdatabase <> 0) desc
   limit 1;
  begin
    v_cap := coalesce(nullif(v_configured, ''), '1048576')::integer;
    return least(coalesce(nullif(v_text, '')::integer, v_cap), v_cap);
  exception when invalid_text_representation or numeric_value_out_of_range then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('jobs.max_payload_bytes must be a whole number of bytes, got %s',
                        pg_catalog.quote_literal(v_text)));
  end;
end
$$;

comment on function jobs.max_payload_bytes() is
  'Payload size limit in bytes: 1 MiB, or what jobs.max_payload_bytes is set to for the role or database; a session may only lower it.';

-- ---------------------------------------------------------------------------
-- Bounds on what a caller stores (docs/reference/sql.md, "Limits"). No value a caller
-- may pass breaks an index, a fleet-wide read or a worker that must read it back: each
-- is refused at the door (invalid_argument, SJ001) and nothing is written.
-- ---------------------------------------------------------------------------

-- jobs.too_deep(): the JSON path that finds an object or array 99 levels below the
-- top, i.e. a value nested 100 levels deep or more. Strict mode, so an array counts as
-- a level as an object does (lax mode unwraps arrays). Immutable with no arguments: the
-- planner folds `value @? jobs.too_deep()` to a constant path once per plan.
create or replace function jobs.too_deep()
returns jsonpath
language sql
immutable
set search_path = ''
as $$ select 'strict $.**{99} ? (@.type() == "object" || @.type() == "array")'::pg_catalog.jsonpath $$;

comment on function jobs.too_deep() is
  'Private: the JSON path matching a value nested 100 levels deep or more.';

-- jobs.too_deep_item(): jobs.too_deep() for each item of an array (a batch's payloads),
-- in one pass over the array instead of taking each item out.
create or replace function jobs.too_deep_item()
returns jsonpath
language sql
immutable
set search_path = ''
as $$ select 'strict $[*].**{99} ? (@.type() == "object" || @.type() == "array")'::pg_catalog.jsonpath $$;

comment on function jobs.too_deep_item() is
  'Private: the JSON path matching an array item nested 100 levels deep or more.';

-- jobs.check_value(value, what): a JSON value (a result, progress, an error, a step's
-- value, an event's payload) nested 100 levels deep or more is refused: JSON readers
-- give up somewhere deeper (Python's with a RecursionError at a few thousand), and a
-- worker must read what it is given.
create or replace function jobs.check_value(p_value jsonb, p_what text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value @? jobs.too_deep() then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('%s must be nested less than 100 levels deep', p_what));
  end if;
end
$$;

comment on function jobs.check_value(jsonb, text) is
  'Refuse (SJ001) a stored JSON value nested 100 levels deep or more.';

-- jobs.check_values(values, what): jobs.check_value for each of an array ("what N").
create or replace function jobs.check_values(p_values jsonb[], p_what text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_ord bigint;
begin
  select v.ord into v_ord
    from pg_catalog.unnest(p_values) with ordinality as v(value, ord)
   where v.value @? jobs.too_deep()
   order by v.ord
   limit 1;
  if v_ord is not null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('%s %s must be nested less than 100 levels deep', p_what, v_ord));
  end if;
end
$$;

comment on function jobs.check_values(jsonb[], text) is
  'Refuse (SJ001) an array of stored JSON values when one is nested 100 levels deep or more.';

-- jobs.check_name(value, what): a name (of a queue, an event, a step, a worker, a
-- lease, a limit, a schedule, a job type) must be 1 to 200 bytes.
create or replace function jobs.check_name(p_value text, p_what text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_value is null or p_value = '' or pg_catalog.octet_length(p_value) > 200 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('%s must be a non-empty string of at most 200 bytes', p_what));
  end if;
end
$$;

comment on function jobs.check_name(text, text) is
  'Refuse (SJ001) a name that is empty or longer than 200 bytes.';

-- jobs.caller_is(role) -> whether this session's login role may act as `role`: a
-- superuser, a member of the schema's owner, or a member of `role` (false when no role
-- of that name exists). For the few functions that do more for an operator than for
-- the roles also granted them (sql/45_workers.sql).
create or replace function jobs.caller_is(p_role text)
returns boolean
language sql
stable
set search_path = ''
as $$
  select coalesce((select r.rolsuper
                          or pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')
                          or (pg_catalog.to_regrole(p_role) is not null
                              and pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole(p_role),
                                                         'MEMBER'))
                     from pg_catalog.pg_roles r, pg_catalog.pg_namespace n
                    where r.rolname = session_user and n.nspname = 'jobs'), false)
$$;

comment on function jobs.caller_is(text) is
  'Whether the session''s login role is a superuser, the schema owner, or a member of the role.';

-- ---------------------------------------------------------------------------
-- jobs.lock_keys(keys, modes) -> the keys locked, in key order.
-- Row locks on jobs.lock_key, held to commit, taken in key order (two transactions
-- locking overlapping keys never deadlock on them). modes, per key: 'update' (wait,
-- exclusive), 'share' (wait, shared) or 'skip' (exclusive, and a key another
-- transaction holds is left out of the answer instead of waited for). A key's row is
-- made on first use; one swept by jobs.purge between that and the lock is made again.
-- ---------------------------------------------------------------------------
create or replace function jobs.lock_keys(p_keys text[], p_modes text[])
returns text[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_key    text;
  v_mode   text;
  v_locked text[] := '{}';
begin
  for v_key, v_mode in
    select k.key, pg_catalog.max(k.mode)  -- (a key asked twice: the strongest, update)
      from rows from (pg_catalog.unnest(p_keys), pg_catalog.unnest(p_modes)) as k(key, mode)
     where k.key is not null
     group by k.key
     order by k.key
  loop
    loop
      insert into jobs.lock_key (key, created_at) values (v_key, pg_catalog.now())
      on conflict (key) do nothing;
      if v_mode = 'share' then
        perform from jobs.lock_key l where l.key = v_key for share;
      elsif v_mode = 'skip' then
        perform from jobs.lock_key l where l.key = v_key for update skip locked;
        exit;  -- held elsewhere (or swept): left out
      else
        perform from jobs.lock_key l where l.key = v_key for update;
      end if;
      exit when found;  -- (swept meanwhile: made again)
    end loop;
    if found then
      v_locked := v_locked || v_key;
    end if;
  end loop;
  return v_locked;
end
$$;

comment on function jobs.lock_keys(text[], text[]) is
  'Lock rows of jobs.lock_key in key order (update | share | skip, per key); answers the keys locked.';
