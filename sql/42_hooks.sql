-- sqljobs: settlement hooks (docs/howto-hooks.md).
--
-- A job whose spec has `hooks` stages a follow-up job in the very statement that moves
-- it to a final state: by ack, nack, an operator's cancel, a saga's last compensation,
-- or the recovery that buries a lapsed lease on its final attempt (no worker present).
-- The follow-up is an ordinary job, written in the settling transaction: it exists iff
-- the settlement committed, so a worker killed right after its ack cannot lose it, and a
-- retried settle (fenced: it changes nothing) stages nothing twice.
--   settled    on every final state (succeeded, failed, dead, cancelled)
--   exhausted  when the job is dead, or failed with its attempts used up
-- The hook job's payload: {"job_id", "name", "state", "attempt", "error"} (error: the
-- last_error, null on success); its key '<id>:<hook>:<finish time>', so a job run again
-- (requeue) and settled again stages a new one; its tenant and its actor the job's own.

create or replace function jobs.stage_hooks()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_specs jsonb := '[]';
  v_hook  text;
begin
  foreach v_hook in array array['settled', 'exhausted'] loop
    continue when not new.hooks ? v_hook;
    continue when v_hook = 'exhausted'
             and not (new.state = 'dead' or (new.state = 'failed' and new.attempt >= new.max_attempts));
    v_specs := v_specs || pg_catalog.jsonb_build_array(pg_catalog.jsonb_strip_nulls(
      pg_catalog.jsonb_build_object(
        'name', new.hooks->v_hook->>'name',
        'queue', new.hooks->v_hook->>'queue',
        'tenant', new.tenant,
        'actor', new.actor,
        'key', pg_catalog.format('%s:%s:%s', new.id, v_hook,
                                 pg_catalog.to_char(new.finished_at at time zone 'UTC',
                                                    'YYYYMMDD"T"HH24MISS.US')),
        'payload', pg_catalog.jsonb_build_object(
          'job_id', new.id, 'name', new.name, 'state', new.state, 'attempt', new.attempt,
          'error', case when new.state = 'succeeded' then null else new.last_error end))));
  end loop;
  if pg_catalog.jsonb_array_length(v_specs) > 0 then
    perform from jobs.enqueue_many(v_specs);
  end if;
  return null;
end
$$;

comment on function jobs.stage_hooks() is
  'Private: stage the settlement hooks of a job that reached a final state (trigger job_hooks).';

drop trigger if exists job_hooks on jobs.job;
create trigger job_hooks
  after update of state on jobs.job
  for each row
  when (new.hooks is not null
        and new.state in ('succeeded', 'failed', 'dead', 'cancelled')
        and old.state is distinct from new.state)
  execute function jobs.stage_hooks();
