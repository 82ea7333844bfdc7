-- sqljobs: fork a job from one of its durable steps (docs/howto-deploying.md).

-- ---------------------------------------------------------------------------
-- jobs.fork(id, from_step) -> the new job's id.
--
-- A new job with the original's name, payload, queue, priority, tenant, actor, retry policy
-- and flow-control fields, whose stored history is the original's steps written before
-- `from_step` (with their order, patch markers included; a saga's unwind and undo
-- records are not copied): its first run replays those and runs `from_step` and every
-- step after it again. Its key is '<original key>:fork:<n>' (n unique); it starts ready now,
-- at attempt 0. The original is left as it was; jobs.job_fork records where the fork
-- came from. A bound session forks its own tenant's jobs only.
-- Errors: job_not_found (SJ006); job_running (SJ009) while a worker runs the original;
-- step_not_found (SJ021) for a step its history does not have (or a runtime record);
-- job_live (SJ008) when the original is a singleton whose group has a live job.
-- Locks: the original's row (for share), then the new row's insert.
-- ---------------------------------------------------------------------------
create or replace function jobs.fork(p_id bigint, p_from_step text)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_job      record;
  v_ordinal  integer;
  v_spec     jsonb;
  v_new      bigint;
  v_outcome  text;
  v_copied   integer;
begin
  if p_from_step is null or p_from_step = '' then
    perform jobs.raise_error('invalid_argument', 'fork needs the name of the step to fork from');
  end if;
  select j.id, j.state, j.name, j.key, j.payload, j.queue, j.tenant, j.priority,
         j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.dead_letter,
         j.timeout_s, j.group_key, j.singleton, j.throttle_n, j.throttle_per_s, j.compensable,
         j.actor
    into v_job from jobs.job j
   where j.id = p_id and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
     for share;
  if not found then
    perform jobs.raise_error('job_not_found', pg_catalog.format('no job has id %s', p_id));
  end if;
  perform jobs.check_tenant(array[p_id]);
  if v_job.state = 'running' then
    perform jobs.raise_error('job_running',
      pg_catalog.format('cannot fork job %s: a worker is running it', p_id),
      null, 'wait for the run to end (or cancel it), then fork');
  end if;
  select s.ordinal into v_ordinal from jobs.step s
   where s.job_id = p_id and s.name = p_from_step and not pg_catalog.starts_with(s.name, 'sqljobs.');
  if v_ordinal is null then
    perform jobs.raise_error('step_not_found',
      pg_catalog.format('job %s has no stored step %L', p_id, p_from_step),
      (select 'its steps: ' || coalesce(pg_catalog.string_agg(pg_catalog.quote_literal(s.name), ', '
                                                               order by s.ordinal), 'none')
         from jobs.step s where s.job_id = p_id and not pg_catalog.starts_with(s.name, 'sqljobs.')),
      'name a step the job stored (sqljobs jobs show shows them)');
  end if;

  v_new := pg_catalog.nextval('jobs.job_id_seq'::regclass);  -- the key's unique suffix
  v_spec := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
    'name', v_job.name, 'key', pg_catalog.left(v_job.key, 900) || ':fork:' || v_new,
    'payload', v_job.payload, 'queue', v_job.queue, 'tenant', v_job.tenant,
    'priority', v_job.priority, 'max_attempts', v_job.max_attempts,
    'retry_base_s', v_job.retry_base_s, 'retry_cap_s', v_job.retry_cap_s,
    'retry_jitter', v_job.retry_jitter, 'dead_letter', v_job.dead_letter,
    'timeout_s', v_job.timeout_s, 'group_key', v_job.group_key,
    'singleton', v_job.singleton, 'throttle_n', v_job.throttle_n,
    'throttle_per_s', v_job.throttle_per_s, 'actor', v_job.actor));
  select e.id, e.outcome into v_new, v_outcome from jobs.enqueue_many(pg_catalog.jsonb_build_array(v_spec)) e;
  if v_outcome <> 'created' then
    perform jobs.raise_error('job_live',
      pg_catalog.format('cannot fork job %s: its singleton group has a live job (%s)', p_id, v_new),
      null, 'wait for that job to finish, then fork');
  end if;

  insert into jobs.step (job_id, name, ordinal, kind, value, event_id, created_at, bucket)
  select v_new, s.name, s.ordinal, s.kind, s.value, s.event_id, s.created_at, v_new & 255
    from jobs.step s
   where s.job_id = p_id and s.ordinal < v_ordinal
     and not pg_catalog.starts_with(s.name, 'sqljobs.undo:') and s.name <> 'sqljobs.unwind';
  get diagnostics v_copied = row_count;
  update jobs.job as j
     set step_seq = v_ordinal - 1,
         compensable = v_job.compensable and v_copied > 0
   where j.id = v_new;
  insert into jobs.job_fork (job_id, forked_from, from_step, forked_at, forked_by)
  values (v_new, p_id, p_from_step, jobs.now(), session_user);
  return v_new;
end
$$;

comment on function jobs.fork(bigint, text) is
  'A new job replaying the original''s steps before from_step and running the rest; answers its id.';

-- jobs.job_forked_from(id) -> where a forked job came from (no row: not a fork).
create or replace function jobs.job_forked_from(p_id bigint)
returns table (forked_from bigint, from_step text, forked_at timestamptz, forked_by text)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return query select f.forked_from, f.from_step, f.forked_at, f.forked_by
                 from jobs.job_fork f where f.job_id = p_id;
end
$$;

comment on function jobs.job_forked_from(bigint) is
  'The original job and step a forked job was made from; no row when it is not a fork.';
