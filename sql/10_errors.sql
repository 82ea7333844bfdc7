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
--   SJ030     not_leader            a scheduler fire whose leader token is not the live lease's
--   SJ031     schedule_not_found    a schedule verb names a schedule that does not exist

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
    ('SJ030', 'not_leader',          'the leader token does not hold the live lease'),
    ('SJ031', 'schedule_not_found',  'no schedule has that name')
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

-- The largest payload accepted, in bytes of its jsonb text form. A session or a role
-- may lower or raise it with `set jobs.max_payload_bytes = ...`.
-- PL/pgSQL for the same reason as jobs.now() (sql/00_schema.sql).
create or replace function jobs.max_payload_bytes()
returns integer
language plpgsql
stable
set search_path = ''
as $$
begin
  return coalesce(nullif(pg_catalog.current_setting('jobs.max_payload_bytes', true), '')::integer,
                  1048576);
end
$$;

comment on function jobs.max_payload_bytes() is
  'Payload size limit in bytes (setting jobs.max_payload_bytes, default 1 MiB).';
