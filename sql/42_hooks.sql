-- sqljobs: settlement hooks (docs/howto-hooks.md).
--
-- A job whose spec has `hooks` stages a follow-up job right after the statement that
-- moves it to a final state, in its transaction: by ack, nack, an operator's cancel, a
-- saga's last compensation, or the recovery that buries a lapsed lease on its final
-- attempt (no worker present).
-- The follow-up is an ordinary job, written in the settling transaction: it exists iff
-- the settlement committed, so a worker killed right after its ack cannot lose it, and a
-- retried settle (fenced: it changes nothing) stages nothing twice.
--   settled    on every final state (succeeded, failed, dead, cancelled)
--   exhausted  when the job is dead, or failed with its attempts used up
-- The hook job's payload: {"job_id", "name", "state", "attempt", "error"} (error: the
-- last_error, null on success); its key '<id>:<hook>:<finish time>', so a job run again
-- (requeue) and settled again stages a new one; its tenant and its actor the job's own.

create or replace function jobs.stage_hooks(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_specs jsonb;
begin
  select pg_catalog.jsonb_agg(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
           'name', j.hooks->h.hook->>'name',
           'queue', j.hooks->h.hook->>'queue',
           'tenant', j.tenant,
           'actor', j.actor,
           'key', pg_catalog.format('%s:%s:%s', j.id, h.hook,
                                    pg_catalog.to_char(j.finished_at at time zone 'UTC',
                                                       'YYYYMMDD"T"HH24MISS.US')),
           'payload', pg_catalog.jsonb_build_object(
             'job_id', j.id, 'name', j.name, 'state', j.state, 'attempt', j.attempt,
             'error', case when j.state = 'succeeded' then null else j.last_error end)))
           order by j.id, h.ord)
    into v_specs
    from jobs.job j
   cross join lateral unnest(array['settled', 'exhausted']) with ordinality as h(hook, ord)
   where j.id = any (p_ids) and j.hooks ? h.hook
     and (h.hook = 'settled'
          or j.state = 'dead' or (j.state = 'failed' and j.attempt >= j.max_attempts));
  if v_specs is not null then
    perform from jobs.enqueue_many(v_specs);
  end if;
end
$$;

comment on function jobs.stage_hooks(bigint[]) is
  'Private: stage the settlement hooks of jobs that just reached a final state.';

-- jobs.job_final(ids): what jobs that just reached a final state set off: their hooks'
-- jobs, and their parked parents' wake-up (sql/50_steps.sql). Every statement that
-- settles a job for good calls it (ack, nack, lease recovery, cancel, a saga's last
-- settle) with those of its jobs that have hooks or a parent; a call, not a trigger, as
-- jobs.release_slots (sql/35_limits.sql). Private.
create or replace function jobs.job_final(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if p_ids is null then
    return;
  end if;
  perform jobs.stage_hooks(p_ids);
  perform jobs.wake_parents(array(select j.parent_id from jobs.job j
                                   where j.id = any (p_ids) and j.parent_id is not null));
end
$$;

comment on function jobs.job_final(bigint[]) is
  'Private: stage the hooks and wake the parents of jobs that just reached a final state.';
