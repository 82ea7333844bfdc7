-- SCRATCH ONLY: the "history table" alternative for docs/design/finished-jobs.md.
-- bench/sustained.py applies this to a throw-away database on top of the real install
-- (sqljobs.migrate.upgrade); it is never installed anywhere else.
--
-- The alternative: jobs.job holds live rows only; ack moves a job to jobs.job_history
-- in the same statement (delete ... returning, then insert). Only the paths the
-- sustained run exercises are rewritten: ack_many here, and enqueue_many's insert
-- (which must also dedupe against finished keys: sustained.py patches the installed
-- function with one probe of job_history's key index per spec). nack_many's
-- failed/dead, cancel, requeue, remove and retention would all need the same move.
-- The insert below names the columns of the original install; columns added to
-- jobs.job since then take their defaults in the history (fine for a measurement).

create table jobs.job_history (like jobs.job including defaults including constraints);
alter table jobs.job_history add primary key (id);
create unique index job_history_key_idx
  on jobs.job_history (name, (coalesce(tenant, '')), key);
create index job_history_finished_idx on jobs.job_history (finished_at);

-- The hot table holds no finished rows any more.
drop index jobs.job_finished_idx;

create or replace function jobs.ack_many(
  p_ids     bigint[],
  p_claims  bigint[],
  p_results jsonb[] default null
)
returns table (id bigint, ok boolean)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now timestamptz := jobs.now();
begin
  perform jobs.check_batch(p_ids, p_claims, p_results);
  return query
    with input as (
      select u.id, u.claim, u.result, u.ord
        from unnest(p_ids, p_claims,
                    coalesce(p_results, pg_catalog.array_fill(null::jsonb,
                                                              array[pg_catalog.cardinality(p_ids)])))
             with ordinality as u(id, claim, result, ord)
    ),
    moved as (
      delete from jobs.job as j
       using (select input.id, input.claim, input.result from input order by input.id) as i
       where j.id = i.id and j.claim = i.claim and j.state = 'running'
      returning j.*, i.result as new_result
    ),
    archived as (
      insert into jobs.job_history
        (id, name, queue, tenant, key, payload, priority, run_at, state, attempt,
         max_attempts, retry_base_s, retry_cap_s, retry_jitter, dead_letter, timeout_s,
         claim, lease_expires_at, worker, progress, last_error, result, traceparent,
         created_at, started_at, finished_at)
      select m.id, m.name, m.queue, m.tenant, m.key, m.payload, m.priority, m.run_at,
             'succeeded', m.attempt, m.max_attempts, m.retry_base_s, m.retry_cap_s,
             m.retry_jitter, m.dead_letter, m.timeout_s, m.claim, null, m.worker,
             m.progress, m.last_error, m.new_result, m.traceparent, m.created_at,
             m.started_at, v_now
        from moved m
      returning jobs.job_history.id
    )
    select input.id, archived.id is not null
      from input left join archived on archived.id = input.id
     order by input.ord;
end
$$;
