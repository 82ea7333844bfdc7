-- sqljobs: operator verbs and the read side.
--
-- One-job verbs refuse with a distinct code and change nothing; the bulk `*_where`
-- forms move at most p_max matching rows (skip locked), and answer `remaining`: how
-- many rows a second call would still move.
--
--   verb      from states                          to
--   cancel    ready, running, parked, interrupted  cancelled (a running worker's next
--                                                  heartbeat answers false)
--   requeue   failed, dead, cancelled              ready, attempt 0, run now
--   promote   ready, interrupted, parked           ready (interrupted stays interrupted),
--                                                  runnable now: run_at = least(run_at, now)
--   remove    every state but running              deleted
--
-- Filters (jsonb): {"queue", "name", "state", "tenant"}, each a string or an array of
-- strings; an absent field matches everything. Unknown fields are refused.

-- ---------------------------------------------------------------------------
-- Filter plumbing.
-- ---------------------------------------------------------------------------
create or replace function jobs.filter_values(p_filter jsonb, p_field text)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
begin
  -- An absent field matches everything. (Not `case ... when null`: null never equals.)
  if p_filter->p_field is null then
    return null;
  end if;
  case pg_catalog.jsonb_typeof(p_filter->p_field)
    when 'string' then return array[p_filter->>p_field];
    when 'array' then
      if exists (select 1 from pg_catalog.jsonb_array_elements(p_filter->p_field) e
                  where pg_catalog.jsonb_typeof(e) <> 'string') then
        perform jobs.raise_error('invalid_argument',
          pg_catalog.format('filter.%s must hold strings', p_field));
      end if;
      return array(select pg_catalog.jsonb_array_elements_text(p_filter->p_field));
    else
      perform jobs.raise_error('invalid_argument',
        pg_catalog.format('filter.%s must be a string or an array of strings', p_field));
  end case;
  return null;
end
$$;

-- The ids of at most p_max jobs matching p_filter in p_states (only those still
-- waiting when p_waiting), locked with skip locked, oldest first (distributed: oldest
-- first of each shard in turn). Validates the filter.
-- It and jobs.count_where are planned for the states and filter of each call (custom
-- plans), and say again what every row of those states has, in the words of the
-- partial indexes' predicates (sql/00_schema.sql): final rows a finish time
-- (job_retention_idx); live rows a place in the claimable, blocked, lease or parked
-- index. A plan made for any states can only read the whole table.
create or replace function jobs.ids_where(
  p_filter  jsonb,
  p_states  jobs.job_state[],
  p_max     integer,
  p_waiting boolean default false
)
returns bigint[]
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_custom_plan
as $$
declare
  v_states jobs.job_state[];
  v_final  boolean := p_states <@ '{succeeded,failed,dead,cancelled}'::jobs.job_state[];
  v_live   boolean := p_states <@ '{ready,running,parked,interrupted}'::jobs.job_state[];
  v_ids    bigint[] := '{}';
  v_now    timestamptz := case when p_waiting then jobs.now() end;  -- (read only if used)
  v_buckets smallint[];  -- distributed: this round's shard (null: one round for all)
begin
  p_filter := jobs.tenant_filter(p_filter);  -- a bound session: its tenant only
  if p_filter is null or pg_catalog.jsonb_typeof(p_filter) <> 'object'
     or exists (select 1 from pg_catalog.jsonb_object_keys(p_filter) k
                 where k not in ('queue', 'name', 'state', 'tenant')) then
    perform jobs.raise_error('invalid_argument',
      'filter must be a JSON object with only queue, name, state, tenant');
  end if;
  if p_max is null or p_max not between 1 and 10000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('max must be between 1 and 10000, got %s', p_max));
  end if;
  begin
    v_states := jobs.filter_values(p_filter, 'state')::jobs.job_state[];
  exception when invalid_text_representation then
    perform jobs.raise_error('invalid_argument', 'filter.state names an unknown state',
      null, 'states: ready, running, parked, succeeded, failed, dead, cancelled, interrupted');
  end;
  -- One round, or, distributed, one per shard (Citus locks rows only in a statement it
  -- routes to one shard), each taking what is left of p_max: the lowest ids of each
  -- shard in turn, not the lowest overall.
  for v_buckets in select null::smallint[] where not jobs.distributed()
                   union all
                   select distinct jobs.shard_buckets(b::smallint)
                     from pg_catalog.generate_series(0, 255) b
                    where jobs.distributed() loop
    v_ids := v_ids || array(
      select j.id
        from jobs.job j
       where j.state = any (p_states)
         and (v_buckets is null or j.bucket = any (v_buckets))
         and (not v_final or j.finished_at is not null)
         and (not v_live
              or (j.state in ('ready', 'interrupted') and j.blocked_on is null)
              or (j.blocked_on is not null and j.state in ('ready', 'interrupted'))
              or (j.state = 'running' and j.lease_expires_at is not null)
              or j.state = 'parked')
         and (v_states is null or j.state = any (v_states))
         and (p_filter->'queue' is null or j.queue = any (jobs.filter_values(p_filter, 'queue')))
         and (p_filter->'name' is null or j.name = any (jobs.filter_values(p_filter, 'name')))
         and (p_filter->'tenant' is null or j.tenant = any (jobs.filter_values(p_filter, 'tenant')))
         and (not p_waiting or j.state = 'parked' or j.run_at > v_now)
       order by j.id
       limit p_max - pg_catalog.cardinality(v_ids)
         for update skip locked);
    exit when pg_catalog.cardinality(v_ids) >= p_max;
  end loop;
  return v_ids;
end
$$;

create or replace function jobs.count_where(
  p_filter  jsonb,
  p_states  jobs.job_state[],
  p_waiting boolean default false
)
returns bigint
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_custom_plan
as $$
declare
  v_filter jsonb := jobs.tenant_filter(p_filter);  -- a bound session: its tenant
  v_final  boolean := p_states <@ '{succeeded,failed,dead,cancelled}'::jobs.job_state[];
  v_live   boolean := p_states <@ '{ready,running,parked,interrupted}'::jobs.job_state[];
begin
  return (  -- (read as jobs.ids_where reads them)
    select pg_catalog.count(*)
      from jobs.job j
     where j.state = any (p_states)
       and (not v_final or j.finished_at is not null)
       and (not v_live
            or (j.state in ('ready', 'interrupted') and j.blocked_on is null)
            or (j.blocked_on is not null and j.state in ('ready', 'interrupted'))
            or (j.state = 'running' and j.lease_expires_at is not null)
            or j.state = 'parked')
       and (v_filter->'state' is null
            or j.state = any (jobs.filter_values(v_filter, 'state')::jobs.job_state[]))
       and (v_filter->'queue' is null or j.queue = any (jobs.filter_values(v_filter, 'queue')))
       and (v_filter->'name' is null or j.name = any (jobs.filter_values(v_filter, 'name')))
       and (v_filter->'tenant' is null or j.tenant = any (jobs.filter_values(v_filter, 'tenant')))
       and (not p_waiting or j.state = 'parked' or j.run_at > jobs.now()));
end
$$;

-- jobs.lock_jobs(ids): lock these jobs' rows for update, in id order; distributed
-- (jobs.distributed()), a shard at a time (jobs.ids_by_shard), in id order in each: Citus
-- locks rows only in a statement it routes to one shard. Private.
create or replace function jobs.lock_jobs(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_buckets smallint[];
  v_ids    bigint[];
begin
  if not jobs.distributed() then
    perform 1 from jobs.job j where j.id = any (p_ids) order by j.id for update;
    return;
  end if;
  for v_buckets, v_ids in select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b loop
    perform 1 from jobs.job j where j.bucket = any (v_buckets) and j.id = any (v_ids)
     order by j.id for update;
  end loop;
end
$$;

comment on function jobs.lock_jobs(bigint[]) is
  'Private: lock these jobs'' rows for update, in id order (distributed: a shard at a time).';

-- Refuse a one-job verb on a missing job or one in a refused state. Locks the row
-- (distributed, naming its bucket, so that Citus routes the lock to one shard).
create or replace function jobs.lock_for_verb(
  p_id      bigint,
  p_verb    text,
  p_allowed jobs.job_state[]
)
returns jobs.job_state
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_state jobs.job_state;
begin
  select j.state into v_state from jobs.job j
   where j.id = p_id and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
     for update;
  if v_state is null then
    perform jobs.raise_error('job_not_found', pg_catalog.format('no job has id %s', p_id));
  end if;
  perform jobs.check_tenant(array[p_id]);
  if v_state = any (p_allowed) then
    return v_state;
  end if;
  if v_state = 'running' then
    perform jobs.raise_error('job_running',
      pg_catalog.format('cannot %s job %s: a worker is running it', p_verb, p_id),
      null, 'cancel it first, or wait for it to finish');
  end if;
  perform jobs.raise_error('job_finished',
    pg_catalog.format('cannot %s job %s: it is already %s', p_verb, p_id, v_state));
  return v_state;
end
$$;

-- ---------------------------------------------------------------------------
-- The state changes, each written once and shared by the one-job and bulk forms.
-- ---------------------------------------------------------------------------
create or replace function jobs.apply_cancel(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_unwinds bigint[];   -- compensable jobs: their cancel starts their unwind
  v_seqs    integer[];
  v_queues  text[];
  v_held    bigint[];   -- jobs that may hold limit slots (only running ones do)
  v_follows bigint[];   -- cancelled jobs with hooks or a parent
  v_watched bigint[];
  v_buckets smallint[];  -- distributed: this round's shard (null: one round for all)
  v_ids     bigint[];
  v_unwind_ids      bigint[];  -- this round's compensable jobs and their new histories,
  v_unwind_attempts jsonb[];
  v_cancel_ids      bigint[];  -- and the others
  v_cancel_attempts jsonb[];
begin
  -- the workers running any of them hear it now (jobs.worker_token), not at their next
  -- heartbeat; delivered at commit, as every notification (read first: the notices go
  -- from this node, where the workers listen)
  perform pg_catalog.pg_notify('jobs_wake', jobs.worker_token(w.worker))
     from pg_catalog.unnest(array(
            select distinct j.worker from jobs.job j
             where j.id = any (p_ids) and j.state = 'running' and j.worker is not null)) w(worker);
  -- One round, or, distributed, one per shard of the jobs (jobs.ids_by_shard). Each new
  -- attempt history is made in a read first, not in the updates: Citus sends no update
  -- whose SET calls a stable function on the row's columns (the rows are locked: the
  -- callers lock them first).
  for v_buckets, v_ids in select null::smallint[], null::bigint[] where not jobs.distributed()
                          union all
                          select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b
                           where jobs.distributed() loop
    select pg_catalog.array_agg(t.id) filter (where t.compensable),
           pg_catalog.array_agg(t.attempts) filter (where t.compensable),
           pg_catalog.array_agg(t.id) filter (where not t.compensable),
           pg_catalog.array_agg(t.attempts) filter (where not t.compensable)
      into v_unwind_ids, v_unwind_attempts, v_cancel_ids, v_cancel_attempts
      from (select j.id, j.compensable,
                   jobs.cancelled_attempt(j.state, j.attempts, j.attempt, j.claim, j.worker,
                                          j.started_at, v_now) as attempts
              from jobs.job j
             where j.id = any (coalesce(v_ids, p_ids))
               and (not jobs.distributed() or j.bucket = any (v_buckets))
               and j.state in ('ready', 'running', 'parked', 'interrupted')
               and not (j.compensable and j.compensating)) t;
    -- A compensable job unwinds instead (sagas, sql/50_steps.sql): back to ready and
    -- compensating, its unwind recorded to end cancelled, its queue woken so a worker
    -- claims it to run the compensations. One already unwinding is left to finish.
    with unwinding as (
      update jobs.job as j
         set state = 'ready', run_at = v_now, finished_at = null, lease_expires_at = null,
             compensating = true, step_seq = j.step_seq + 1, attempts = t.attempts
        from unnest(v_unwind_ids, v_unwind_attempts) as t(id, attempts)
       where j.id = t.id and (not jobs.distributed() or j.bucket = any (v_buckets))
      returning j.id, j.step_seq, j.queue, j.slots is not null as held
    )
    select pg_catalog.array_agg(u.id), pg_catalog.array_agg(u.step_seq),
           pg_catalog.array_agg(distinct u.queue), pg_catalog.array_agg(u.id) filter (where u.held)
      into v_unwinds, v_seqs, v_queues, v_held
      from unwinding u;
    if v_unwinds is not null then
      perform jobs.record_unwinds(v_unwinds, v_seqs,
        pg_catalog.array_fill('cancelled'::jobs.job_state, array[pg_catalog.cardinality(v_unwinds)]),
        pg_catalog.array_fill(pg_catalog.jsonb_build_object('kind', 'cancelled',
                                                            'message', 'the job was cancelled'),
                              array[pg_catalog.cardinality(v_unwinds)]));
      perform jobs.wake(v_queues);
    end if;
    perform jobs.release_slots(v_held);
    with moved as (
      update jobs.job as j
         set state = 'cancelled', finished_at = v_now, lease_expires_at = null,
             attempts = t.attempts
        from unnest(v_cancel_ids, v_cancel_attempts) as t(id, attempts)
       where j.id = t.id and (not jobs.distributed() or j.bucket = any (v_buckets))
      returning j.id, j.settle_watched, j.slots is not null as held,
                j.hooks is not null or j.parent_id is not null as follows
    )
    -- (each round's answers after the rounds before: null || a = a)
    select pg_catalog.array_agg(moved.id) filter (where moved.held),
           v_follows || pg_catalog.array_agg(moved.id) filter (where moved.follows),
           v_watched || pg_catalog.array_agg(moved.id) filter (where moved.settle_watched)
      into v_held, v_follows, v_watched
      from moved;
    perform jobs.release_slots(v_held);
  end loop;
  perform jobs.job_final(v_follows);
  -- result waiters of watched jobs hear of it (a saga's cancel first unwinds: not yet)
  perform jobs.notify_settled(v_watched);
end
$$;

-- jobs.cancelled_attempt(state, attempts, attempt, claim, worker, started_at, now) -> a
-- cancelled job's attempt history: a running attempt ends now and joins it
-- (sql/40_settle.sql). Private.
create or replace function jobs.cancelled_attempt(p_state jobs.job_state, p_attempts jsonb,
                                                  p_attempt integer, p_claim bigint,
                                                  p_worker text, p_started_at timestamptz,
                                                  p_now timestamptz)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_state <> 'running' then
    return p_attempts;
  end if;
  return jobs.attempts_push(p_attempts, pg_catalog.jsonb_build_object(
    'attempt', p_attempt, 'claim', p_claim >> 32, 'worker', p_worker,
    'started_at', p_started_at, 'ended_at', p_now, 'outcome', 'cancelled',
    'error', null));
end
$$;

-- jobs.requeue_blocked(ids) -> the ids a requeue must leave as they are: a singleton
-- job whose group has a live job, a debounced one whose group has a job waiting to start
-- (either would be a second one of its group), and, among the ids themselves, all but
-- the first of each such group. Private.
create or replace function jobs.requeue_blocked(p_ids bigint[])
returns bigint[]
language plpgsql
stable
set search_path = ''
as $$
begin
  -- (the candidates read first, then the jobs that take their groups, in a join: Citus
  -- plans no subquery per job over the jobs)
  return (
    with candidates as materialized (
      select j.id, j.name, coalesce(j.tenant, '') as tenant, coalesce(j.group_key, '') as grp,
             j.singleton, j.debounce_s is not null as debounced
        from jobs.job j
       where j.id = any (p_ids) and (j.singleton or j.debounce_s is not null)
    ), taken as materialized (
      select distinct c.id
        from candidates c
        join jobs.job k on k.name = c.name and coalesce(k.tenant, '') = c.tenant
                       and coalesce(k.group_key, '') = c.grp and k.id <> c.id
       where (c.singleton and k.singleton
              and k.state in ('ready', 'running', 'parked', 'interrupted'))
          or (c.debounced and k.debounce_s is not null
              and k.state = 'ready' and k.attempt = 0)
    )
    select coalesce(pg_catalog.array_agg(r.id order by r.id), '{}')
      from (select c.id,
                   pg_catalog.row_number() over (
                     partition by c.name, c.tenant, c.grp, c.singleton, c.debounced
                     order by c.id) as nth,
                   c.id in (select t.id from taken t) as taken
              from candidates c) r
     where r.taken or r.nth > 1);
end
$$;

comment on function jobs.requeue_blocked(bigint[]) is
  'Private: the jobs a requeue leaves, their singleton or debounce group being taken.';

-- Requeue and promote make jobs runnable now, so they wake their queues' workers.
create or replace function jobs.apply_requeue(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queues text[];
begin
  with moved as (
    update jobs.job as j
       set state = 'ready', attempt = 0, run_at = jobs.now(), finished_at = null,
           lease_expires_at = null, result = null, blocked_on = null,
           -- the waiter that watched it heard it settle; a new one watches it again
           settle_watched = false
     where j.id = any (p_ids) and j.state in ('failed', 'dead', 'cancelled')
    returning j.queue
  )
  select array(select distinct moved.queue from moved) into v_queues;
  perform jobs.wake(v_queues);
end
$$;

create or replace function jobs.apply_promote(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queues text[];
begin
  with moved as (
    update jobs.job as j
       set state = case when j.state = 'parked' then 'ready' else j.state end,
           -- a job already due keeps its run_at: promoting never sends it behind
           -- older jobs of its priority
           run_at = least(j.run_at, jobs.now())
     where j.id = any (p_ids) and j.state in ('ready', 'interrupted', 'parked')
    returning j.queue
  )
  select array(select distinct moved.queue from moved) into v_queues;
  perform jobs.wake(v_queues);
end
$$;

create or replace function jobs.apply_remove(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_parents bigint[];
begin
  with gone as (
    delete from jobs.job as j where j.id = any (p_ids) and j.state <> 'running'
    returning j.parent_id
  )
  select pg_catalog.array_agg(gone.parent_id) filter (where gone.parent_id is not null)
    into v_parents
    from gone;
  -- a parked parent whose child was removed goes on without it (sql/50_steps.sql)
  perform jobs.wake_parents(v_parents);
end
$$;

-- ---------------------------------------------------------------------------
-- One-job verbs.
-- ---------------------------------------------------------------------------

-- jobs.cancel(id): a live job -> cancelled. Errors: job_not_found, job_finished.
create or replace function jobs.cancel(p_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.lock_for_verb(p_id, 'cancel', '{ready,running,parked,interrupted}');
  perform jobs.apply_cancel(array[p_id]);
end
$$;

comment on function jobs.cancel(bigint) is
  'Cancel a live job (ready, running, parked, interrupted); SJ006 missing, SJ010 finished.';

-- jobs.requeue(ids): failed/dead/cancelled jobs -> ready, attempt 0, now.
-- Refuses the whole call, changing nothing, when any id is missing (job_not_found),
-- succeeded (job_not_requeueable) or still live (job_live); then one statement.
create or replace function jobs.requeue(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_id    bigint;
  v_state jobs.job_state;
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0 then
    perform jobs.raise_error('invalid_argument', 'requeue needs at least one job id');
  end if;
  if pg_catalog.array_position(p_ids, null) is not null then
    perform jobs.raise_error('job_not_found', 'no job has id null');
  end if;
  -- LOCK in id order, then GUARD.
  perform jobs.lock_jobs(p_ids);
  -- (counted first, and the missing one found only then, in the jobs found read as an
  -- array: distributed, Citus plans no subquery per id over the jobs)
  if (select pg_catalog.count(*) from jobs.job j where j.id = any (p_ids))
     < (select pg_catalog.count(distinct i) from pg_catalog.unnest(p_ids) i) then
    select i.id into v_id from pg_catalog.unnest(p_ids) i(id)
     where i.id <> all (array(select j.id from jobs.job j where j.id = any (p_ids))) limit 1;
  end if;
  if v_id is not null then
    perform jobs.raise_error('job_not_found', pg_catalog.format('no job has id %s', v_id));
  end if;
  perform jobs.check_tenant(p_ids);
  select j.id, j.state into v_id, v_state from jobs.job j
   where j.id = any (p_ids) and j.state = 'succeeded' order by j.id limit 1;
  if v_id is not null then
    perform jobs.raise_error('job_not_requeueable',
      pg_catalog.format('job %s succeeded; a success is not run again', v_id),
      null, 'enqueue a new job with a new key to run it again');
  end if;
  select j.id, j.state into v_id, v_state from jobs.job j
   where j.id = any (p_ids) and j.state in ('ready', 'running', 'parked', 'interrupted')
   order by j.id limit 1;
  if v_id is not null then
    perform jobs.raise_error('job_live',
      pg_catalog.format('job %s is %s: it will run without a requeue', v_id, v_state));
  end if;
  v_id := (jobs.requeue_blocked(p_ids))[1];
  if v_id is not null then
    perform jobs.raise_error('job_live',
      pg_catalog.format('job %s: its singleton or debounce group already has a live job '
                        '(or this call names two of the group)', v_id),
      null, 'requeue it once that job is done');
  end if;
  -- WRITE
  perform jobs.apply_requeue(p_ids);
end
$$;

comment on function jobs.requeue(bigint[]) is
  'Run failed, dead or cancelled jobs again (attempt 0, now); SJ006, SJ007, SJ008 refuse the whole call.';

-- jobs.promote(id): run a waiting job now. Errors: job_not_found, job_running, job_finished.
create or replace function jobs.promote(p_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.lock_for_verb(p_id, 'promote', '{ready,interrupted,parked}');
  perform jobs.apply_promote(array[p_id]);
end
$$;

comment on function jobs.promote(bigint) is 'Make a waiting job runnable now.';

-- jobs.remove(id): delete a job that is not running. Errors: job_not_found, job_running.
create or replace function jobs.remove(p_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.lock_for_verb(p_id, 'remove',
    '{ready,parked,succeeded,failed,dead,cancelled,interrupted}');
  perform jobs.apply_remove(array[p_id]);
end
$$;

comment on function jobs.remove(bigint) is 'Delete a job that no worker is running.';

-- ---------------------------------------------------------------------------
-- Bulk verbs: at most p_max rows per call; `remaining` = what a second call would move.
-- ---------------------------------------------------------------------------
create or replace function jobs.cancel_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_live jobs.job_state[] := '{ready,running,parked,interrupted}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_live, p_max);
begin
  perform jobs.apply_cancel(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_live);
end
$$;

create or replace function jobs.requeue_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_from jobs.job_state[] := '{failed,dead,cancelled}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_from, p_max);
begin
  -- a job whose singleton or debounce group is taken stays (and still matches)
  v_ids := array(select i from pg_catalog.unnest(v_ids) i
                  where i <> all (jobs.requeue_blocked(v_ids)));
  perform jobs.apply_requeue(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_from);
end
$$;

-- A promoted row stays claimable, so promote moves (and counts) only rows still
-- waiting: parked, or with run_at in the future.
create or replace function jobs.promote_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_from jobs.job_state[] := '{ready,interrupted,parked}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_from, p_max, true);
begin
  perform jobs.apply_promote(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_from, true);
end
$$;

create or replace function jobs.remove_where(p_filter jsonb, p_max integer default 1000)
returns table (moved integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_from jobs.job_state[] := '{ready,parked,succeeded,failed,dead,cancelled,interrupted}';
  v_ids  bigint[] := jobs.ids_where(p_filter, v_from, p_max);
begin
  perform jobs.apply_remove(v_ids);
  return query select pg_catalog.cardinality(v_ids), jobs.count_where(p_filter, v_from);
end
$$;

comment on function jobs.cancel_where(jsonb, integer) is 'Cancel at most p_max live jobs matching a filter.';
comment on function jobs.requeue_where(jsonb, integer) is 'Requeue at most p_max failed/dead/cancelled jobs matching a filter.';
comment on function jobs.promote_where(jsonb, integer) is 'Run now at most p_max waiting jobs matching a filter.';
comment on function jobs.remove_where(jsonb, integer) is 'Delete at most p_max non-running jobs matching a filter.';

-- ---------------------------------------------------------------------------
-- Queues: pause / resume. A paused queue keeps accepting jobs; claims skip it.
-- ---------------------------------------------------------------------------
create or replace function jobs.pause_queue(p_queue text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.pause_queue');  -- (sql/15_tenancy.sql)
  if p_queue is null or p_queue = '' then
    perform jobs.raise_error('invalid_argument', 'queue is required');
  end if;
  insert into jobs.queue as q (name, paused, updated_at) values (p_queue, true, jobs.now())
  on conflict (name) do update set paused = true, updated_at = excluded.updated_at;
end
$$;

create or replace function jobs.resume_queue(p_queue text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.resume_queue');  -- (sql/15_tenancy.sql)
  if p_queue is null or p_queue = '' then
    perform jobs.raise_error('invalid_argument', 'queue is required');
  end if;
  update jobs.queue as q set paused = false, updated_at = jobs.now() where q.name = p_queue;
  perform jobs.wake(array[p_queue]);
end
$$;

comment on function jobs.pause_queue(text) is 'Stop claims from a queue (enqueue still works).';
comment on function jobs.resume_queue(text) is 'Let claims take from a paused queue again.';

-- ---------------------------------------------------------------------------
-- Read side.
-- ---------------------------------------------------------------------------
-- jobs.job_view, redacted, is in sql/92_introspection.sql (it reads jobs.job_type).

create or replace function jobs.job_payload(p_id bigint)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return (select j.payload from jobs.job j where j.id = p_id);
end
$$;

comment on function jobs.job_payload(bigint) is
  'The payload of one job, NOT redacted (null when it does not exist): grant it only to whom may read secrets.';

-- ---------------------------------------------------------------------------
-- jobs.declared_queues() -> every queue the database knows of without reading a job:
-- a pause switch (jobs.queue), a job type's queue (jobs.job_type: every worker writes
-- its declared jobs' queues as it starts), a registered worker's queues (jobs.worker),
-- a queue limit (jobs.limit, scope queue), a schedule's queue (jobs.schedule, option
-- "queue") and a queue's own retention rule (jobs.retention). jobs.queue_gauges lists
-- these and every queue holding a live or dead job, so the dashboard and the metrics
-- list one set of queues, and a declared queue whose jobs all finished stays listed
-- (with zeros) instead of vanishing. Read-only; reads those small tables, never jobs.job.
-- ---------------------------------------------------------------------------
create or replace function jobs.declared_queues()
returns table (queue text)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.declared_queues');  -- (sql/15_tenancy.sql)
  return query
  select d.name
    from (select q.name from jobs.queue q
          union
          select t.queue from jobs.job_type t where t.queue is not null
          union
          select u.name from jobs.worker w cross join pg_catalog.unnest(w.queues) as u(name)
          union
          select l.target from jobs.limit l where l.scope = 'queue' and l.target is not null
          union
          select s.options->>'queue' from jobs.schedule s
           where pg_catalog.jsonb_typeof(s.options->'queue') = 'string'
          union
          select r.queue from jobs.retention r where r.queue <> '*') as d(name)
   order by d.name;
end
$$;

comment on function jobs.declared_queues() is
  'Every queue named by a pause switch, job type, worker, queue limit, schedule or retention rule (no job read).';

-- ---------------------------------------------------------------------------
-- jobs.queue_stats_v2(): one row per queue that has jobs, or that
-- jobs.declared_queues() names (zeros when it holds none): the set the dashboard and
-- the metrics list too. It reads only partial indexes: of the live rows (ready,
-- interrupted, running, parked), of the dead ones, and job_retention_idx for the
-- succeeded, failed and cancelled rows that finished within the last
-- jobs.queue_stats_window (a setting; default 24 hours). Its cost follows the backlog
-- and the recent throughput, not the table's history.
-- (v2: jobs.queue_stats() of version 1 has no `limited` column, and a released
-- function's result never changes: it stays, as these columns but the last.)
-- ---------------------------------------------------------------------------
create or replace function jobs.queue_stats_v2()
returns table (
  queue           text,
  paused          boolean,
  ready           bigint,
  running         bigint,
  parked          bigint,
  interrupted     bigint,
  succeeded       bigint,
  failed          bigint,
  dead            bigint,
  cancelled       bigint,
  oldest_ready_s  double precision,
  unserved        bigint,
  limited         bigint
)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.queue_stats_v2');  -- (sql/15_tenancy.sql)
  with listed as (  -- each branch reads one partial index (sql/00_schema.sql)
    select c.queue, c.name, c.state, c.run_at, c.blocked_on, c.deferred_by from jobs.job c
     where c.state in ('ready', 'interrupted') and c.blocked_on is null
    union all
    select b.queue, b.name, b.state, b.run_at, b.blocked_on, b.deferred_by from jobs.job b
     where b.blocked_on is not null and b.state in ('ready', 'interrupted')
    union all
    select r.queue, r.name, r.state, r.run_at, r.blocked_on, r.deferred_by from jobs.job r
     where r.state = 'running' and r.lease_expires_at is not null  -- job_lease_idx
    union all
    select p.queue, p.name, p.state, p.run_at, p.blocked_on, p.deferred_by from jobs.job p
     where p.state = 'parked'
    union all
    select d.queue, d.name, d.state, d.run_at, d.blocked_on, d.deferred_by from jobs.job d
     where d.state = 'dead'
    union all
    select f.queue, f.name, f.state, f.run_at, f.blocked_on, f.deferred_by from jobs.job f
     where f.finished_at is not null
       -- the window's start written out, not read from a subquery: the planner then
       -- estimates the rows from its value and reads job_retention_idx, where a
       -- subquery's unknown value was priced at a third of the table and read it whole
       and f.finished_at >= jobs.now()
             - coalesce(nullif(pg_catalog.current_setting('jobs.queue_stats_window', true), ''),
                        '24 hours')::interval
       and f.state in ('succeeded', 'failed', 'cancelled')
  ),
  unserved as (  -- as jobs.unserved_jobs(), over the rows read above
    select j.queue, pg_catalog.count(*) as waiting
      from listed j
     where j.state in ('ready', 'interrupted')
       and not exists (select 1 from jobs.worker w
                        where w.expires_at > jobs.now()
                          and j.queue = any (w.queues)
                          and j.name = any (w.names))
     group by j.queue
  ),
  gate_limits as (  -- global and queue limits with a concurrency (sql/35_limits.sql)
    select l.scope, l.target, l.name || '|' as grp, l.concurrency
      from jobs.limit l
     where l.scope in ('global', 'queue') and l.concurrency is not null
  ),
  used as (  -- their slots, counted per group first (no subquery per limit: Citus plans
             -- none over a distributed table from a reference table's rows)
    select s.grp, pg_catalog.count(*) as n
      from jobs.slot s
     where s.grp = any (array(select g.grp from gate_limits g))
     group by s.grp
  ),
  full_limits as (  -- those with no free slot
    select g.scope, g.target
      from gate_limits g
      left join used u on u.grp = g.grp
     where g.concurrency <= coalesce(u.n, 0)
  ),
  held as (
    select exists (select from full_limits f where f.scope = 'global') as everywhere,
           array(select f.target from full_limits f where f.scope = 'queue') as queues
  ),
  counts as (
    select j.queue,
           pg_catalog.count(*) filter (where j.state = 'ready') as ready,
           pg_catalog.count(*) filter (where j.state = 'running') as running,
           pg_catalog.count(*) filter (where j.state = 'parked') as parked,
           pg_catalog.count(*) filter (where j.state = 'interrupted') as interrupted,
           pg_catalog.count(*) filter (where j.state = 'succeeded') as succeeded,
           pg_catalog.count(*) filter (where j.state = 'failed') as failed,
           pg_catalog.count(*) filter (where j.state = 'dead') as dead,
           pg_catalog.count(*) filter (where j.state = 'cancelled') as cancelled,
           pg_catalog.min(j.run_at) filter (where j.state in ('ready', 'interrupted')
                                              and j.run_at <= jobs.now()
                                              and j.blocked_on is null) as oldest_ready_at,
           pg_catalog.count(*) filter (where j.state in ('ready', 'interrupted')
                                         and (j.blocked_on is not null
                                              or (j.deferred_by is not null
                                                  and j.run_at > jobs.now())
                                              or (j.run_at <= jobs.now()
                                                  and (h.everywhere or j.queue = any (h.queues)))
                                             )) as limited
      from listed j
     cross join held h
     group by j.queue
  ),
  names as (
    select c.queue from counts c union select d.queue from jobs.declared_queues() d
  )
  select n.queue, coalesce(q.paused, false),
         coalesce(c.ready, 0), coalesce(c.running, 0), coalesce(c.parked, 0),
         coalesce(c.interrupted, 0), coalesce(c.succeeded, 0), coalesce(c.failed, 0),
         coalesce(c.dead, 0), coalesce(c.cancelled, 0),
         coalesce(extract(epoch from jobs.now() - c.oldest_ready_at)::double precision, 0),
         coalesce(u.waiting, 0), coalesce(c.limited, 0)
    from names n
    left join counts c on c.queue = n.queue
    left join jobs.queue q on q.name = n.queue
    left join unserved u on u.queue = n.queue
   order by n.queue
$$;

comment on function jobs.queue_stats_v2() is
  'Per queue: paused, counts by state (succeeded, failed, cancelled: those finished within jobs.queue_stats_window, default 24 hours), age in seconds of the oldest runnable job, how many waiting jobs no live worker declares (unserved), and how many wait on a limit (limited).';

-- jobs.queue_stats(): version 1's shape of jobs.queue_stats_v2() (without `limited`),
-- kept for the clients of version 1.
create or replace function jobs.queue_stats()
returns table (
  queue           text,
  paused          boolean,
  ready           bigint,
  running         bigint,
  parked          bigint,
  interrupted     bigint,
  succeeded       bigint,
  failed          bigint,
  dead            bigint,
  cancelled       bigint,
  oldest_ready_s  double precision,
  unserved        bigint
)
language sql
stable
set search_path = ''
as $$
  select s.queue, s.paused, s.ready, s.running, s.parked, s.interrupted, s.succeeded,
         s.failed, s.dead, s.cancelled, s.oldest_ready_s, s.unserved
    from jobs.queue_stats_v2() s
$$;

comment on function jobs.queue_stats() is
  'Version 1''s jobs.queue_stats_v2(): the same rows without the limited column.';
