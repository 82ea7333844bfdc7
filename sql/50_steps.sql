-- sqljobs: durable steps — put, sleep.
--
-- A job's handler records the outcome of each named step of its run in jobs.step. When
-- the job runs again (a retry, a wake-up after a sleep or an event wait, a crash
-- recovered by its lease), jobs.claim hands back every stored step of the job in its
-- `steps` column, so the handler replays them without a round trip and runs only what
-- was never stored.
--
-- FENCE: every function here writes only while the job is `running` under the caller's
-- claim token (the same fence as ack/nack); otherwise it raises lease_lost (SJ004) and
-- writes nothing. A run that lost its lease or was cancelled can store no more steps.
--
-- Costs: jobs.step_put is ONE statement from the client: it checks the fence, extends
-- the lease, stores the step and answers the stored value. A put of a step that is
-- already stored answers what is stored (idempotent; the first write wins).
-- Locks: the job row (by the fenced update), then the step row (by its insert).
-- Retention: steps go with their job (foreign key, on delete cascade), so the remove
-- verbs and retention purge them with it.

-- Columns of jobs.job this concern reads and moves (declared in sql/00_schema.sql):
--   step_seq          a counter moved by every step write: the next step's ordinal; the
--                     claim reads the steps table only for jobs where it is > 0
--   first_started_at  the first claim of the job (set once by jobs.claim): the cursor
--                     from which an event wait looks back (sql/60_events.sql)
--   compensable       a step with a compensation was stored: a final failure or a cancel
--                     unwinds the job instead of settling it at once (sagas, below)
--   compensating      the job is unwinding: claimable (ready) until its compensations
--                     ran; lease recovery sends it back to ready, never buries it

-- ---------------------------------------------------------------------------
-- jobs.hold_step(id, claim, lease_s) -> the job's new step_seq. Private.
-- The fence: locks the job row while it is running under p_claim, moves step_seq and
-- (when p_lease_s is not null) extends the lease to now + lease_s. Raises lease_lost.
-- ---------------------------------------------------------------------------
create or replace function jobs.hold_step(p_id bigint, p_claim bigint, p_lease_s double precision)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_seq    integer;
  v_tenant text := jobs.bound_tenant();
  v_lease  timestamptz;  -- the renewed lease (null: kept)
begin
  if p_lease_s is not null and not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive and at most 1e9 seconds, got %s', p_lease_s));
  end if;
  -- (The lease is reckoned here, not in the update: Citus sends no update to a shard
  -- that calls a non-immutable function in a CASE or COALESCE. Distributed, the update
  -- names the job's bucket, its id & 255, so that Citus routes it to one shard.)
  if p_lease_s is not null then
    v_lease := jobs.now() + pg_catalog.make_interval(secs => p_lease_s);
  end if;
  update jobs.job as j
     set step_seq = j.step_seq + 1,
         lease_expires_at = coalesce(v_lease, j.lease_expires_at)
   where j.id = p_id and j.claim = p_claim and j.state = 'running'
     and (v_tenant is null or j.tenant = v_tenant)
     and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
  returning j.step_seq into v_seq;
  if v_seq is null then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
  return v_seq;
end
$$;

-- Shared guard: a step name is a non-empty string of at most 200 bytes, and not
-- one of the runtime's own ('sqljobs.' ...: a saga's unwind and undo records), which
-- only these functions write (reserved_step_name SJ011).
create or replace function jobs.check_step_name(p_name text)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  perform jobs.check_name(p_name, 'a step name');
  if pg_catalog.starts_with(p_name, 'sqljobs.') then
    perform jobs.raise_error('reserved_step_name',
      pg_catalog.format('step name %L starts with sqljobs., which the runtime keeps for itself',
                        p_name), null, 'give the step another name');
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.step_put(id, claim, name, value, lease_s, options) -> the stored value of the step.
--
-- Stores `value` as step `name` of job `id`, if that step is not stored yet, and
-- answers the stored value (the new one, or the one stored before: the first write
-- wins). Fenced: raises lease_lost (SJ004), writing nothing, unless the job is running
-- under p_claim. Extends the lease to now + p_lease_s (left as is when null).
-- options: {"compensable": true} the step has a compensation (marks the job
--          compensable); {"undo": true} the value records that the compensation of step
--          `name` ran: it is stored as step 'sqljobs.undo:<name>' (kind undo);
--          {"patch": true} the value is a patch marker's answer (ctx.patched): stored
--          as step 'sqljobs.patch:<name>' (kind run).
-- Errors: invalid_argument (SJ001) for a bad name, lease_s or option; payload_too_large (SJ002)
-- for a value larger than jobs.max_payload_bytes(); lease_lost (SJ004); reserved_step_name
-- (SJ011) for a name starting with 'sqljobs.'.
-- ---------------------------------------------------------------------------
create or replace function jobs.step_put(
  p_id      bigint,
  p_claim   bigint,
  p_name    text,
  p_value   jsonb,
  p_lease_s double precision default null,
  p_options jsonb default '{}'
)
returns jsonb
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  v_seq   integer;
  v_value jsonb;
  v_name  text;
begin
  -- GUARD
  perform jobs.check_step_name(p_name);
  perform jobs.check_value(p_value, 'a step value');
  if pg_catalog.octet_length(coalesce(p_value, 'null'::jsonb)::text) > jobs.max_payload_bytes() then
    perform jobs.raise_error('payload_too_large',
      pg_catalog.format('step %s: value is larger than %s bytes', p_name, jobs.max_payload_bytes()));
  end if;
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object'
     or exists (select 1 from pg_catalog.jsonb_each(p_options) o
                 where o.key not in ('compensable', 'undo', 'patch')
                    or pg_catalog.jsonb_typeof(o.value) <> 'boolean') then
    perform jobs.raise_error('invalid_argument',
      'options takes only {"compensable": boolean, "undo": boolean, "patch": boolean}');
  end if;
  v_name := case when (p_options->>'undo')::boolean then 'sqljobs.undo:' || p_name
                 when (p_options->>'patch')::boolean then 'sqljobs.patch:' || p_name
                 else p_name end;
  -- FENCE (locks the job row)
  v_seq := jobs.hold_step(p_id, p_claim, p_lease_s);
  -- WRITE, first write wins
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
  values (p_id, v_name, v_seq,
          case when (p_options->>'undo')::boolean then 'undo' else 'run' end,
          p_value, jobs.now(), p_id & 255)
  on conflict do nothing
  returning s.value into v_value;
  if found then
    if (p_options->>'compensable')::boolean then
      update jobs.job as j set compensable = true where j.id = p_id and not j.compensable;
    end if;
    return v_value;
  end if;
  select s.value into v_value from jobs.step s where s.job_id = p_id and s.name = v_name;
  return v_value;
end
$$;

comment on function jobs.step_put(bigint, bigint, text, jsonb, double precision, jsonb) is
  'Store a durable step of a running job under its claim (first write wins); answers the stored value.';

-- ---------------------------------------------------------------------------
-- jobs.step_sleep(id, claim, name, until, delay_s) -> (wake_at, parked).
--
-- A durable sleep. The first call stores step `name` with its wake-up time: p_until,
-- or now + p_delay_s (the database clock); later calls read the stored time. While
-- that time is in the future the job is parked until then in the same call (as
-- jobs.nack mode park: not an attempt, the lease is released; jobs.claim wakes it when
-- the time comes) and `parked` is true: the caller's run must end without settling.
-- When the time has passed, nothing changes and `parked` is false: carry on.
-- Errors: invalid_argument (SJ001) unless exactly one of p_until / p_delay_s is given
-- (finite; delay >= 0); lease_lost (SJ004).
-- ---------------------------------------------------------------------------
create or replace function jobs.step_sleep(
  p_id      bigint,
  p_claim   bigint,
  p_name    text,
  p_until   timestamptz default null,
  p_delay_s double precision default null
)
returns table (wake_at timestamptz, parked boolean)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now  timestamptz := jobs.now();
  v_seq  integer;
  v_wake timestamptz;
begin
  -- GUARD
  perform jobs.check_step_name(p_name);
  if (p_until is null) = (p_delay_s is null)
     or p_until in ('infinity', '-infinity')
     or p_delay_s < 0 or p_delay_s > 1e9 then
    perform jobs.raise_error('invalid_argument',
      'a sleep needs exactly one of until (a finite time) or delay_s (0 to 1e9 seconds)');
  end if;
  -- FENCE
  v_seq := jobs.hold_step(p_id, p_claim, null);
  -- WRITE the wake-up time once; later calls read it.
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
  values (p_id, p_name, v_seq, 'sleep',
          pg_catalog.jsonb_build_object('until',
            coalesce(p_until, v_now + pg_catalog.make_interval(secs => p_delay_s))),
          v_now, p_id & 255)
  on conflict do nothing;
  select (s.value->>'until')::timestamptz into v_wake
    from jobs.step s where s.job_id = p_id and s.name = p_name and s.kind = 'sleep';
  if v_wake is null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('step %s of job %s is stored, but not as a sleep', p_name, p_id));
  end if;
  -- PARK while the time is ahead.
  if v_wake > v_now then
    perform jobs.nack_batch(array[p_id], array[p_claim], null, array['park'],
                            array[extract(epoch from v_wake - v_now)::double precision], true);
    return query select v_wake, true;
  else
    return query select v_wake, false;
  end if;
end
$$;

comment on function jobs.step_sleep(bigint, bigint, text, timestamptz, double precision) is
  'Durable sleep: store the wake-up time once, park the job until then; parked = false once it passed.';

-- ---------------------------------------------------------------------------
-- jobs.job_steps(id) -> the stored steps of a job, in ordinal order (the read side).
-- ---------------------------------------------------------------------------
create or replace function jobs.job_steps(p_id bigint)
returns table (name text, ordinal integer, kind text, value jsonb, created_at timestamptz)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return query
    select s.name, s.ordinal, s.kind, s.value, s.created_at
      from jobs.step s where s.job_id = p_id order by s.ordinal;
end
$$;

comment on function jobs.job_steps(bigint) is 'The stored steps of one job, in the order they were first written.';

-- ===========================================================================
-- Child jobs: a step that enqueues other jobs and parks its job until they settle.
-- ===========================================================================
--   parent_id, parent_step  set on a child by jobs.step_invoke: the parent job and the
--                           step awaiting it. A child's FINAL settlement (succeeded,
--                           failed, dead, cancelled — by ack, nack, lease recovery or
--                           an operator) or its removal makes a parked parent ready
--                           (jobs.wake_parents). A settle looks at its jobs'
--                           parent_id in the row it writes: the hot ack path pays one
--                           null test.

-- jobs.wake_parents(ids): parked parents whose child reached a final state or was
-- removed become ready, and their queues are notified (jobs.wake) so a worker claims
-- them at once. Called by jobs.job_final (sql/42_hooks.sql) and by jobs.apply_remove:
-- only child jobs pay that notifying commit. Private.
create or replace function jobs.wake_parents(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queues text[];
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0 then
    return;
  end if;
  with woken as (
    update jobs.job as p
       set state = 'ready', run_at = jobs.now()
     where p.id = any (p_ids) and p.state = 'parked'
    returning p.queue
  )
  select pg_catalog.array_agg(distinct woken.queue) into v_queues from woken;
  if v_queues is not null then
    perform jobs.wake(v_queues);
  end if;
end
$$;

comment on function jobs.wake_parents(bigint[]) is
  'Private: make the parked parents of settled or removed children ready.';

-- ---------------------------------------------------------------------------
-- jobs.step_invoke(id, claim, names, specs, lease_s) -> (name, value, child_id, parked)
-- per name, in input order.
--
-- Step names[i] of job `id` awaits a child job enqueued from specs[i] (a
-- jobs.enqueue_many spec; its key defaults to '<id>:<step name>', so a replay or a
-- crash never enqueues a second child). Fenced (lease_lost SJ004 otherwise).
--   * a stored step answers its stored value;
--   * else the child is enqueued (or found, by its key) and marked as this step's
--     child; once it is final, the step stores {"job_id", "state", "result", "error"}
--     (kind child) and answers it;
--   * when any child is still live, the job is parked (no wake-up time; not an
--     attempt; the lease is released) and every row says parked = true: the run must
--     end without settling. The last child's settlement wakes it; it then calls again.
-- A child is of its parent's tenant, and of its parent's actor unless its spec names
-- one (an explicit actor wins: it is the caller's word, not authentication).
-- Errors: invalid_argument (SJ001) for names and specs of different lengths, a bad
-- name or spec; those of jobs.enqueue_many; lease_lost (SJ004).
-- ---------------------------------------------------------------------------
create or replace function jobs.step_invoke(
  p_id      bigint,
  p_claim   bigint,
  p_names   text[],
  p_specs   jsonb,
  p_lease_s double precision default null
)
returns table (name text, value jsonb, child_id bigint, parked boolean)
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  v_now     timestamptz := jobs.now();
  v_seq     integer;
  v_name    text;
  v_live    boolean := false;
  v_pending text[];
  v_specs   jsonb;
  v_ids     bigint[];
  v_tenant  text;
  v_actor   jsonb;   -- the parent's actor: its children's unless a spec names one
  v_ord     bigint;
  v_stored  jsonb;   -- the steps stored, {name: value}
begin
  -- GUARD
  if p_names is null or pg_catalog.cardinality(p_names) = 0
     or p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array'
     or pg_catalog.jsonb_array_length(p_specs) <> pg_catalog.cardinality(p_names)
     or exists (select 1 from pg_catalog.jsonb_array_elements(p_specs) x
                 where pg_catalog.jsonb_typeof(x) <> 'object') then
    perform jobs.raise_error('invalid_argument',
      'names and specs (job spec objects) must be non-empty and of one length');
  end if;
  foreach v_name in array p_names loop
    perform jobs.check_step_name(v_name);
  end loop;
  if (select pg_catalog.count(distinct n) from pg_catalog.unnest(p_names) n)
     <> pg_catalog.cardinality(p_names) then
    perform jobs.raise_error('invalid_argument', 'step names must be distinct');
  end if;
  -- FENCE (locks the job row)
  v_seq := jobs.hold_step(p_id, p_claim, p_lease_s);
  -- A child is of its parent's tenant: one naming another tenant is refused.
  select j.tenant, j.actor into v_tenant, v_actor from jobs.job j where j.id = p_id;
  if v_tenant is not null then
    v_ord := jobs.foreign_tenant_spec(p_specs, v_tenant);
    if v_ord is not null then
      perform jobs.raise_error('tenant_refused',
        pg_catalog.format('spec %s: a child of job %s is of its tenant %s, not %s', v_ord, p_id,
                          v_tenant, p_specs -> (v_ord - 1)::integer -> 'tenant'));
    end if;
  end if;

  -- ENQUEUE the child of every step not stored yet (created, or found by its key).
  select pg_catalog.array_agg(u.n order by u.ord),
         pg_catalog.jsonb_agg(case when p_specs->(u.ord::integer - 1) ? 'key'
                                   then p_specs->(u.ord::integer - 1)
                                   else p_specs->(u.ord::integer - 1)
                                        || pg_catalog.jsonb_build_object('key', p_id || ':' || u.n)
                              end
                              || case when v_tenant is null then '{}'::jsonb
                                      else pg_catalog.jsonb_build_object('tenant', v_tenant) end
                              || case when v_actor is null
                                        or pg_catalog.jsonb_typeof(
                                             p_specs->(u.ord::integer - 1)->'actor') <> 'null'
                                      then '{}'::jsonb
                                      else pg_catalog.jsonb_build_object('actor', v_actor) end
                              order by u.ord)
    into v_pending, v_specs
    from pg_catalog.unnest(p_names) with ordinality as u(n, ord)
   -- (the steps stored read first, as an array: distributed, Citus plans no subquery
   -- per name over the steps)
   where u.n <> all (array(select s.name from jobs.step s
                            where s.job_id = p_id and s.name = any (p_names)));
  if v_pending is not null then
    v_ids := array(select x.id from jobs.enqueue_many(v_specs) x order by x.ord);
    update jobs.job as c
       set parent_id = p_id, parent_step = m.n
      from unnest(v_pending, v_ids) as m(n, cid)
     where c.id = m.cid and c.parent_id is null;
    -- STORE the outcome of every child already final.
    insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
    select p_id, m.n, v_seq, 'child',
           pg_catalog.jsonb_build_object('job_id', c.id, 'state', c.state, 'result', c.result,
                                         'error', c.last_error),
           v_now, p_id & 255
      from unnest(v_pending, v_ids) as m(n, cid)
      join jobs.job c on c.id = m.cid
     where c.state in ('succeeded', 'failed', 'dead', 'cancelled')
    on conflict do nothing;
    v_live := exists (select 1 from pg_catalog.unnest(v_ids) as m(cid)
                        join jobs.job c on c.id = m.cid
                       where c.state not in ('succeeded', 'failed', 'dead', 'cancelled'));
  end if;

  -- PARK while any child is live.
  if v_live then
    perform jobs.nack_batch(array[p_id], array[p_claim], null, array['park'], null, true);
  end if;
  -- (the steps read first, as a map: distributed, they are on a shard)
  v_stored := (select pg_catalog.jsonb_object_agg(s.name, s.value) from jobs.step s
                where s.job_id = p_id and s.name = any (p_names));
  return query
    select u.n, v_stored->u.n, coalesce((v_stored->u.n->>'job_id')::bigint, m.cid), v_live
      from pg_catalog.unnest(p_names) with ordinality as u(n, ord)
      left join unnest(v_pending, v_ids) as m(n, cid) on m.n = u.n
     order by u.ord;
end
$$;

comment on function jobs.step_invoke(bigint, bigint, text[], jsonb, double precision) is
  'Durable child jobs: enqueue once per step, park until every child settled; answers each outcome.';

-- ===========================================================================
-- Sagas: unwinding a job's completed compensable steps (docs/design/sagas.md).
-- ===========================================================================
-- A job that stored a compensable step (step_put option "compensable") does not settle
-- at once when it fails for good or is cancelled. Instead it enters the COMPENSATING
-- phase (job.compensating = true, an 'sqljobs.unwind' step records the final state
-- and error it will settle in), and a run — the failing run itself, or any later run
-- after a crash, a drain or a cancel — replays the stored steps to learn their
-- compensations and runs them in reverse order, each stored as its own step
-- ('sqljobs.undo:<step>', option "undo") so a crash mid-unwind never repeats a finished
-- one. jobs.step_unwound then settles the job in the recorded final state.
--   * nack (any settle)  of a compensable running job that would end failed or dead ->
--                        compensating, still running under its claim (sql/40_settle.sql)
--   * cancel (any verb)  of a compensable, live job -> ready + compensating
--                        (jobs.apply_cancel), so a worker claims it to unwind; the
--                        old run's fence no longer holds. Cancelling a job that is
--                        already compensating changes nothing: its unwind finishes.
--   * lease recovery     of a compensable job on its final attempt -> ready + compensating;
--                        of a compensating job -> ready, never buried (sql/30_claim.sql)
--   * jobs.step_unwound  compensating, running job -> its recorded final state

-- ---------------------------------------------------------------------------
-- jobs.step_unwound(id, claim) -> the job's final state.
-- Ends the unwind of a compensating, running job: it settles in the state the unwind
-- recorded (failed, dead or cancelled), with the recorded error as last_error.
-- Fenced (lease_lost SJ004); invalid_argument (SJ001) when no unwind was recorded.
-- ---------------------------------------------------------------------------
create or replace function jobs.step_unwound(p_id bigint, p_claim bigint)
returns jobs.job_state
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_unwind  jsonb;
  v_state   jobs.job_state;
  v_watched boolean;
  v_held    boolean;  -- it held limit slots
  v_follows boolean;  -- it has hooks or a parent
  v_now     timestamptz := jobs.now();
  v_error   jsonb;    -- the unwind's error, marked compensated
begin
  perform jobs.hold_step(p_id, p_claim, null);
  select s.value into v_unwind from jobs.step s where s.job_id = p_id and s.name = 'sqljobs.unwind';
  if v_unwind is null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('job %s is not unwinding', p_id));
  end if;
  -- (made first: Citus plans no CASE or COALESCE that calls a function in an update)
  if pg_catalog.jsonb_typeof(v_unwind->'error') = 'object' then
    v_error := (v_unwind->'error') || pg_catalog.jsonb_build_object('compensated', true,
                                                                    'at', v_now);
  end if;
  update jobs.job as j
     set state = (v_unwind->>'state')::jobs.job_state,
         compensating = false,
         finished_at = v_now,
         lease_expires_at = null,
         last_error = coalesce(v_error, j.last_error)
   where j.id = p_id and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)
  returning j.state, j.settle_watched, j.slots is not null,
            j.hooks is not null or j.parent_id is not null
    into v_state, v_watched, v_held, v_follows;
  -- it left running, for good: its slots go, its hooks and its parent follow
  if v_held then
    perform jobs.release_slots(array[p_id]);
  end if;
  if v_follows then
    perform jobs.job_final(array[p_id]);
  end if;
  -- a result waiter hears of the end of the unwind; nobody else is notified (40_settle)
  if v_watched then
    perform jobs.notify_settled(array[p_id]);
  end if;
  return v_state;
end
$$;

comment on function jobs.step_unwound(bigint, bigint) is
  'Saga: settle a job whose compensations all ran in the final state its unwind recorded.';

