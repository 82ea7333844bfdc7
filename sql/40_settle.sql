-- sqljobs: settle a claimed job — ack, nack, heartbeat, progress, and their batches.
--
-- FENCE: every function here changes a job only while state = 'running' AND its claim
-- token equals the caller's. A stale caller (its lease lapsed and the job was
-- recovered or re-claimed, or an operator cancelled it) changes nothing:
--   * ack / nack raise lease_lost (SJ004);
--   * ack_many / nack_many / heartbeat_many answer ok = false for that job;
--   * heartbeat / progress answer false.
-- Locks: one row lock per settled job, taken by the update; batches lock in id order.

-- ---------------------------------------------------------------------------
-- jobs.backoff_s(attempt, base_s, cap_s, jitter) -> seconds before the next attempt.
-- delay = least(cap, base * 2^(attempt - 1));  none: delay;  full: uniform [0, delay];
-- equal: delay/2 + uniform [0, delay/2]. Computed here so every client agrees.
-- ---------------------------------------------------------------------------
create or replace function jobs.backoff_s(
  p_attempt integer,
  p_base_s  double precision,
  p_cap_s   double precision,
  p_jitter  text
)
returns double precision
language sql
volatile
set search_path = ''
as $$
  select case p_jitter
           when 'none'  then d.delay
           when 'full'  then pg_catalog.random() * d.delay
           when 'equal' then d.delay / 2 + pg_catalog.random() * d.delay / 2
         end
    from (select case
                   -- At the cap already? Asked in logs, because 2^(attempt - 1) overflows a
                   -- double from attempt 1025 on (a job may have max_attempts > 1024).
                   when p_base_s > 0 and p_cap_s > 0
                        and (greatest(p_attempt, 1) - 1) * pg_catalog.ln(2::double precision)
                            >= pg_catalog.ln(p_cap_s) - pg_catalog.ln(p_base_s)
                     then p_cap_s
                   else least(p_cap_s,
                              p_base_s * pg_catalog.power(2::double precision,
                                                          greatest(p_attempt, 1) - 1))
                 end as delay) d
$$;

comment on function jobs.backoff_s(integer, double precision, double precision, text) is
  'Backoff in seconds after attempt p_attempt: exponential, capped, with jitter none|full|equal.';

-- Shared argument check for the batched settlers: arrays present and of one length.
create or replace function jobs.check_batch(p_ids bigint[], p_claims bigint[], p_other anyarray)
returns void
language plpgsql
immutable
set search_path = ''
as $$
begin
  if p_ids is null or p_claims is null then
    perform jobs.raise_error('invalid_argument', 'ids and claims are required');
  end if;
  if pg_catalog.cardinality(p_ids) <> pg_catalog.cardinality(p_claims)
     or (p_other is not null and pg_catalog.cardinality(p_other) <> pg_catalog.cardinality(p_ids)) then
    perform jobs.raise_error('invalid_argument', 'ids, claims and values must have the same length');
  end if;
  if pg_catalog.array_position(p_ids, null) is not null
     or pg_catalog.array_position(p_claims, null) is not null then
    perform jobs.raise_error('invalid_argument', 'ids and claims must not contain null');
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- Result waiters. A caller awaiting a job's result (app.result) marks the job watched
-- (jobs.watch_outcome); settling a watched job notifies 'jobs_settled' once per call
-- with the watched jobs' tokens (jobs.watch_token: no id, which any listener would
-- read), comma-separated ('*' past NOTIFY's 8000-byte limit: re-check everything).
-- Settling jobs nobody watches notifies nothing: a notifying commit takes a
-- database-wide lock, which a busy worker must not pay per batch for no listener.
-- Skipped when the session sets jobs.notify = off.
-- ---------------------------------------------------------------------------

-- jobs.watch_token(id) -> the token jobs_settled carries when the job settles.
create or replace function jobs.watch_token(p_id bigint)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  return jobs.channel_token('job:' || p_id);
end
$$;

comment on function jobs.watch_token(bigint) is
  'The token jobs_settled carries when this job settles (a result waiter listens for it).';

create or replace function jobs.notify_settled(p_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_payload text;
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0
     or coalesce(pg_catalog.current_setting('jobs.notify', true), '') = 'off' then
    return;
  end if;
  v_payload := (select pg_catalog.string_agg(jobs.channel_token('job:' || i), ',')
                  from pg_catalog.unnest(p_ids) as i);
  if pg_catalog.octet_length(v_payload) > 7900 then
    v_payload := '*';
  end if;
  perform pg_catalog.pg_notify('jobs_settled', v_payload);
end
$$;

comment on function jobs.notify_settled(bigint[]) is
  'Notify jobs_settled once with the tokens of these (watched) jobs, or * when too many; off with jobs.notify = off.';

-- jobs.watch_outcome(id) -> (id, state, result, last_error): the job as it is now, its
-- result and error redacted as every view shows them (a field its job type marks
-- sensitive reads "[redacted]"), and from now on its settlement notifies 'jobs_settled'
-- (a waiter LISTENs first, then calls this, so no settlement falls between). No row: no
-- such job. Any job the caller may see (check_tenant: its tenant's when bound, every
-- job when unbound) may be watched, as a waiter may await a job another process
-- enqueued: the id is the handle. The mark is the settle_watched flag alone, shown by
-- no view: at the job's settle a NOTIFY of its keyed token, and its finished row kept
-- at least the awaited age (docs/design/roles.md, "Watching a job's outcome").
create or replace function jobs.watch_outcome(p_id bigint)
returns table (id bigint, state jobs.job_state, result jsonb, last_error jsonb)
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.check_tenant(array[p_id]);
  update jobs.job as j set settle_watched = true
   where j.id = p_id and not j.settle_watched
     and j.state in ('ready', 'running', 'parked', 'interrupted');
  -- redacted as every view is (jobs.job_view, sql/92_introspection.sql)
  return query select v.id, v.state, v.result, v.last_error from jobs.job_view v
                where v.id = p_id;
end
$$;

comment on function jobs.watch_outcome(bigint) is
  'The job''s state, result and last error; marks it watched so its settlement notifies jobs_settled.';

-- ---------------------------------------------------------------------------
-- Busy rows. A row another transaction holds locked (an operator's open transaction, a
-- report that ran SELECT ... FOR UPDATE) must not stall a worker's whole batch: its
-- other jobs' leases would lapse behind it and run again elsewhere. So the batch
-- functions (ack_many, nack_many, heartbeat_many) lock what they can at once, wait at
-- most 50 ms for the rest (a claim's scan holds the rows it stepped over until it
-- commits, a millisecond or so), and answer ok = null for a row still locked after
-- that: nothing was written, the job is still this claim's as far as the caller can
-- tell, call again. The one-job functions (ack, nack) wait for the lock instead, as a
-- plain UPDATE would, and then answer or raise as always.
-- A busy answer also makes the job's settle key under the claim (a jobs.lock_key row,
-- committed with the answer). The caller holds it (jobs.settle_hold, in a transaction
-- of its own kept open) until the outcome is written, and lease recovery leaves a job
-- whose settle key under its claim another transaction holds (jobs.settle_waiting): a
-- lease that lapses while another transaction holds the row goes to the outcome sent
-- again once the lock is released, not to a recovery that would run the job again.
-- jobs.lock_batch takes the locks of the rows that run under a claim given (null: all
-- of them, so the writes need no filter; a row named without its own claim token is
-- never locked, so naming it pins nothing); jobs.unwritten_answer
-- answers for a job the batch did not write: busy (null) when, as the statement sees
-- it, it still runs under the caller's claim (a row the batch could not lock), else
-- false (the fence failed). It is called only for unwritten jobs:
-- a SQL function is planned again in each statement that calls it.
-- ---------------------------------------------------------------------------
create or replace function jobs.lock_batch(p_ids bigint[], p_claims bigint[], p_wait boolean)
returns bigint[]
language plpgsql
volatile
set search_path = ''
-- One generic plan per session, index probes whatever the batch's size (as jobs.claim)
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_held bigint[];
  v_rest bigint[];
  v_distributed boolean := jobs.distributed();
  v_rounds refcursor;  -- distributed: (buckets, ids) of the batch, a shard at a time
  v_buckets smallint[];   -- (null: one round for all)
  v_ids    bigint[];
begin
  if p_wait then
    return null;  -- every row: the update that follows waits for each row's lock
  end if;
  -- Only a row that runs under one of the claims given is locked: naming a job pins
  -- it only for a caller that knows its claim token, which is the job's holder. (Any
  -- claim of the batch, not the one paired with the id: a semi-join on the pairs was
  -- planned well but cost a third of the drain; the writes check the pairs.)
  -- Distributed, a shard at a time (jobs.ids_by_shard): Citus locks rows only in a
  -- statement it routes to one shard.
  if v_distributed then
    open v_rounds for select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b;
  end if;
  loop
    if v_distributed then
      fetch v_rounds into v_buckets, v_ids;
      exit when not found;
    end if;
    v_held := v_held || array(select j.id from jobs.job j
                               where j.id = any (coalesce(v_ids, p_ids))
                                 and (v_buckets is null or j.bucket = any (v_buckets))
                                 and j.claim = any (p_claims) and j.state = 'running'
                               order by j.id
                                 for no key update of j skip locked);
    exit when not v_distributed;
  end loop;
  if v_distributed then
    close v_rounds;
  end if;
  if pg_catalog.cardinality(v_held) = pg_catalog.cardinality(p_ids) then
    return null;  -- every row held (the common case): the writes need no filter
  end if;
  -- the rest that run under the claim given, as read without a lock: busy rows
  v_rest := array(select j.id from jobs.job j
                   where j.id = any (p_ids) and j.id <> all (v_held)
                     and j.claim = any (p_claims) and j.state = 'running');
  if v_rest = '{}' then  -- (ids named twice, or not under the claim given)
    return null;  -- every row the writes may change is held: they need no filter
  end if;
  v_held := v_held || jobs.lock_briefly(v_rest, v_distributed);
  -- Rows still busy: their settle keys, one per job and claim, committed with this
  -- answer, for the caller to hold (jobs.settle_hold) while it sends the outcome again.
  insert into jobs.lock_key (key, created_at)
  select jobs.settle_key(j.id, j.claim), pg_catalog.now()
    from jobs.job j
   where j.id = any (v_rest) and j.id <> all (v_held)
  on conflict (key) do nothing;
  return v_held;
end
$$;

comment on function jobs.lock_batch(bigint[], bigint[], boolean) is
  'Private: lock the rows of a settle batch that run under a claim given (a busy row waited for at most 50 ms and its settle key made, unless p_wait: all waited for); answers the ids held, null for all.';

-- jobs.settle_key(id, claim): the name of a job's settle key under one claim: a key
-- held under a claim the job no longer runs under keeps nothing from recovery.
create or replace function jobs.settle_key(p_id bigint, p_claim bigint)
returns text
language sql
immutable
set search_path = ''
as $$
  select 'settle|' || p_id || '|' || p_claim
$$;

comment on function jobs.settle_key(bigint, bigint) is
  'Private: the jobs.lock_key name of a job''s settle key under a claim.';

-- jobs.settle_waiting(id, claim): whether the job's outcome under this claim waits for
-- its busy row (its settle key, made by jobs.lock_batch, is held by another
-- transaction: jobs.settle_hold). Lease recovery leaves such a job.
create or replace function jobs.settle_waiting(p_id bigint, p_claim bigint)
returns boolean
language sql
volatile
set search_path = ''
as $$
  select exists (select from jobs.lock_key k where k.key = jobs.settle_key(p_id, p_claim))
     and not exists (select from jobs.lock_key k where k.key = jobs.settle_key(p_id, p_claim)
                        for key share skip locked)
$$;

comment on function jobs.settle_waiting(bigint, bigint) is
  'Private: whether another transaction holds this job''s settle key under this claim (lease recovery leaves it).';

-- ---------------------------------------------------------------------------
-- jobs.settle_hold(ids, claims) -> the ids whose settle keys this transaction now holds.
-- For jobs a batch settle (ack_many, nack_many, heartbeat_many) answered busy: their
-- outcomes wait for a row another transaction holds locked. Call it in a READ
-- COMMITTED transaction of its own, kept open until those outcomes are written (sent
-- again by the batch functions, on other connections), and again at least every few
-- seconds meanwhile: it sets idle_in_transaction_session_timeout to 10 s for the
-- transaction (unless lower), so that the keys of a holder that vanished go with it.
-- While it holds a job's settle key, lease recovery leaves the job, so a lease that
-- lapses meanwhile is not recovered the moment the row's lock is released. Fenced:
-- only a job still running under the claim given, whose key a busy answer under that
-- claim made, is held. Like the transaction that holds the row, it holds back vacuum.
-- Errors: invalid_argument (SJ001) as jobs.ack_many, and outside READ COMMITTED;
-- tenant_refused (SJ018).
-- ---------------------------------------------------------------------------
create or replace function jobs.settle_hold(p_ids bigint[], p_claims bigint[])
returns bigint[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_idle double precision := pg_catalog.date_part('epoch',
             pg_catalog.current_setting('idle_in_transaction_session_timeout')::interval);
  v_keys text[];
begin
  perform jobs.check_batch(p_ids, p_claims, null::text[]);
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
    -- a later call would not see the keys made since the transaction's snapshot
    perform jobs.raise_error('invalid_argument',
      'settle_hold runs in a READ COMMITTED transaction',
      pg_catalog.format('this transaction is %s', pg_catalog.current_setting('transaction_isolation')));
  end if;
  if v_idle = 0 or v_idle > 10 then
    perform pg_catalog.set_config('idle_in_transaction_session_timeout', '10s', true);
  end if;
  -- The keys first (a key names its claim, so one of a job no longer running under it
  -- keeps nothing from recovery), then the jobs, read once the keys are held: a
  -- recovery that held a key (key share) until it committed may have moved its job.
  v_keys := array(select k.key
                    from jobs.lock_key k
                   where k.key = any (array(select jobs.settle_key(u.id, u.claim)
                                              from unnest(p_ids, p_claims) as u(id, claim)))
                   order by k.key
                     for update of k);
  -- (the job rows are read, not locked: another transaction holds them)
  return array(select distinct j.id
                 from unnest(p_ids, p_claims) as u(id, claim)
                 join jobs.job j on j.id = u.id and j.claim = u.claim
                where j.state = 'running' and jobs.settle_key(u.id, u.claim) = any (v_keys)
                order by j.id);
end
$$;

comment on function jobs.settle_hold(bigint[], bigint[]) is
  'Hold the settle keys of running jobs whose outcomes or renewals wait for busy rows, until this transaction ends (lease recovery leaves them); answers the ids held.';


-- The rows a first pass could not lock, waited for at most 50 ms each; none when one
-- wait runs out (its lock is still held elsewhere: the rest answer busy, call again).
-- Distributed (p_distributed), a shard at a time, as jobs.lock_batch.
create or replace function jobs.lock_briefly(p_ids bigint[], p_distributed boolean)
returns bigint[]
language plpgsql
volatile
set search_path = ''
set lock_timeout = '50ms'
as $$
declare
  v_held   bigint[] := '{}';
  v_buckets smallint[];
  v_ids    bigint[];
begin
  if not p_distributed then
    return array(select j.id from jobs.job j where j.id = any (p_ids) order by j.id
                    for no key update of j);
  end if;
  for v_buckets, v_ids in select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b loop
    v_held := v_held || array(select j.id from jobs.job j
                               where j.bucket = any (v_buckets) and j.id = any (v_ids)
                               order by j.id
                                 for no key update of j);
  end loop;
  return v_held;
exception when lock_not_available then
  return '{}';
end
$$;

comment on function jobs.lock_briefly(bigint[], boolean) is
  'Private: lock these job rows, waiting at most 50 ms for each; none when a wait runs out.';

create or replace function jobs.unwritten_answer(p_id bigint, p_claim bigint)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  -- a row this batch held and whose fence held was written: one still running under
  -- the claim was one it could not lock
  return case when exists (select 1 from jobs.job j
                            where j.id = p_id and j.claim = p_claim and j.state = 'running')
              then null  -- busy: locked by another transaction, still this claim's
              else false end;
end
$$;

comment on function jobs.unwritten_answer(bigint, bigint) is
  'Private: a batch settle''s ok for a job it did not write: false fence failed, null busy (call again).';

-- ---------------------------------------------------------------------------
-- jobs.ack_many(ids, claims, results) -> (id, ok) per input, in input order.
-- running -> succeeded, storing the result (jsonb; null allowed). results may be
-- null (no results at all). An earlier attempt's last_error is kept, marked
-- {"historical": true}. ok = false: the fence did not hold, nothing changed; ok = null:
-- the row was busy (locked by another transaction), nothing changed, call again.
-- ---------------------------------------------------------------------------
-- jobs.ack_rows(ids, claims, results, locked, now) -> (done, claims, watched): the write
-- of jobs.ack_batch: every job named that runs under its claim (and, when locked is not
-- null, is among the locked) succeeds with its result; answers those jobs, the claim
-- each ran under, and the watched among them. Distributed (jobs.distributed()), a
-- shard at a time.
create or replace function jobs.ack_rows(
  p_ids     bigint[],
  p_claims  bigint[],
  p_results jsonb[],
  p_locked  bigint[],
  p_now     timestamptz,
  out done    bigint[],
  out claims  bigint[],
  out watched bigint[]
)
language plpgsql
volatile
set search_path = ''
-- One generic plan per session (planning the update was most of a one-job ack), kept
-- to index probes whatever the batch's size: no sequential or bitmap scans, no JIT
-- (as jobs.claim, sql/30_claim.sql).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_held    bigint[];  -- the jobs that held limit slots
  v_follows bigint[];  -- the jobs with hooks or a parent
  v_buckets smallint[];  -- distributed: this round's shard (null: one round for all)
begin
  -- One round, or, distributed, one per shard of the batch (jobs.ids_by_shard): Citus
  -- then sends each update to one shard, not every update to every shard. (The round's
  -- buckets are named behind jobs.distributed(), which is immutable: on one
  -- PostgreSQL the planner drops the condition, which otherwise cost a one-job ack a
  -- quarter of its time there.)
  for v_buckets in select null::smallint[] where not jobs.distributed()
                   union all
                   select b.buckets from jobs.ids_by_shard(p_ids) b where jobs.distributed() loop
    with input as (
      select u.id, u.claim, u.result
        from unnest(p_ids, p_claims,
                    coalesce(p_results, pg_catalog.array_fill(null::jsonb, array[pg_catalog.cardinality(p_ids)])))
             as u(id, claim, result)
    ),
    settled as (
      update jobs.job as j
         set state = 'succeeded',
             result = i.result,
             finished_at = p_now,
             lease_expires_at = null,
             -- an earlier attempt's error stays for the record, marked as history
             last_error = case when j.last_error is not null
                               then j.last_error || '{"historical": true}' end
        from (select input.id, input.claim, input.result from input order by input.id) as i
       where j.id = i.id and j.claim = i.claim and j.state = 'running'
         and (p_locked is null or j.id = any (p_locked))
         and (not jobs.distributed() or j.bucket = any (v_buckets))
      returning j.id, j.claim, j.settle_watched, j.slots is not null as held,
                j.hooks is not null or j.parent_id is not null as follows
    )
    -- (each round's answers after the rounds before: null || a = a)
    select done || pg_catalog.array_agg(settled.id),
           claims || pg_catalog.array_agg(settled.claim),
           watched || pg_catalog.array_agg(settled.id) filter (where settled.settle_watched),
           v_held || pg_catalog.array_agg(settled.id) filter (where settled.held),
           v_follows || pg_catalog.array_agg(settled.id) filter (where settled.follows)
      into done, claims, watched, v_held, v_follows
      from settled;
  end loop;
  -- they left running, for good (sql/35_limits.sql, sql/42_hooks.sql)
  perform jobs.release_slots(v_held);
  perform jobs.job_final(v_follows);
end
$$;

comment on function jobs.ack_rows(bigint[], bigint[], jsonb[], bigint[], timestamp with time zone) is
  'Private: the write of jobs.ack_batch.';

create or replace function jobs.ack_batch(
  p_ids     bigint[],
  p_claims  bigint[],
  p_results jsonb[],
  p_wait    boolean
)
returns table (id bigint, ok boolean)
language plpgsql
volatile
set search_path = ''
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
  v_now     timestamptz := jobs.now();
  v_timeout text := pg_catalog.current_setting('lock_timeout');
  v_locked  bigint[];
  v_rows    record;  -- jobs.ack_rows' answer
  v_written boolean := false;
begin
  perform jobs.check_batch(p_ids, p_claims, p_results);
  perform jobs.check_values(p_results, 'result');
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  -- Busy rows (above) without a pass of their own: the write itself waits at most 50 ms
  -- for a lock (its triggers' too: a fan-in child's parent row), in a subtransaction
  -- (jobs.subtransaction_allowed); a lock still held then undoes it, and the batch
  -- takes jobs.lock_batch's way. Locking every row first cost a tenth of the drain's
  -- SQL time (docs/design/engine-hot-path.md, "Acks without a lock pass").
  if not p_wait and jobs.subtransaction_allowed() then
    begin
      perform pg_catalog.set_config('lock_timeout', '50ms', true);
      v_rows := jobs.ack_rows(p_ids, p_claims, p_results, null, v_now);
      perform pg_catalog.set_config('lock_timeout', v_timeout, true);
      v_written := true;
    exception when lock_not_available then
      null;  -- (the write and the setting are undone with the subtransaction)
    end;
  end if;
  if not v_written then
    v_locked := jobs.lock_batch(p_ids, p_claims, p_wait);
    v_rows := jobs.ack_rows(p_ids, p_claims, p_results, v_locked, v_now);
  end if;
  -- NOTIFY result waiters of watched jobs only (once per call).
  perform jobs.notify_settled(v_rows.watched);
  return query  -- per input: a job named twice is answered under each claim given
    select u.id, case when (u.id, u.claim) in (select d.id, d.claim  -- (a hashed subplan)
                                                  from unnest(v_rows.done, v_rows.claims) as d(id, claim))
                      then true else jobs.unwritten_answer(u.id, u.claim) end
      from unnest(p_ids, p_claims) with ordinality as u(id, claim, ord)
     order by u.ord;
end
$$;

comment on function jobs.ack_batch(bigint[], bigint[], jsonb[], boolean) is
  'Private: jobs.ack_many (busy rows skipped) and jobs.ack (busy rows waited for).';

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
begin
  return query select a.id, a.ok from jobs.ack_batch(p_ids, p_claims, p_results, false) a;
end
$$;

comment on function jobs.ack_many(bigint[], bigint[], jsonb[]) is
  'Settle running jobs as succeeded with their results; fenced per job, answers ok per job (null: busy, call again).';


-- jobs.ack(id, claim, result): one job; raises lease_lost (SJ004) when the fence fails.
create or replace function jobs.ack(p_id bigint, p_claim bigint, p_result jsonb default null)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if not (select a.ok from jobs.ack_batch(array[p_id], array[p_claim], array[p_result], true) a) then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
end
$$;

comment on function jobs.ack(bigint, bigint, jsonb) is
  'Settle one running job as succeeded; raises lease_lost (SJ004) when the fence fails.';

-- jobs.lease_lost(id, claim): raise SJ004 describing where the job is now (its state;
-- never its claim token, the proof of whoever holds it now).
create or replace function jobs.lease_lost(p_id bigint, p_claim bigint)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_state jobs.job_state;
begin
  perform jobs.check_tenant(array[p_id]);  -- (another tenant's job: not described)
  select j.state into v_state from jobs.job j where j.id = p_id;
  perform jobs.raise_error('lease_lost',
    pg_catalog.format('job %s is no longer held by this claim', p_id),
    case when v_state is null then 'the job no longer exists'
         when v_state = 'running' then 'the job runs under another claim'
         else pg_catalog.format('the job is %s', v_state) end,
    'another worker may have taken it over after the lease lapsed; this run must stop');
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.retry_state(attempt, max_attempts, dead_letter) -> where a failed attempt leads:
-- ready (attempts remain), else dead, or failed when the policy has no dead-letter.
-- The one place retry finality is decided: nack's retry mode and lease recovery in the
-- claim both ask it, and the worker reads the answer they give.
-- ---------------------------------------------------------------------------
create or replace function jobs.retry_state(p_attempt integer, p_max_attempts integer,
                                            p_dead_letter boolean)
returns jobs.job_state
language sql
immutable
set search_path = ''
as $$
  select case when p_attempt < p_max_attempts then 'ready'
              when p_dead_letter then 'dead'
              else 'failed' end::jobs.job_state
$$;

comment on function jobs.retry_state(integer, integer, boolean) is
  'Where a failed attempt leads: ready while attempts remain, else dead (or failed without dead-letter).';

-- ---------------------------------------------------------------------------
-- jobs.record_unwinds(ids, ordinals, states, errors): store the 'sqljobs.unwind' step of
-- each job that starts unwinding its saga (docs/design/sagas.md): the final state it
-- will settle in once its compensations ran, and why. The caller moves the job itself
-- (compensating = true, step_seq to the ordinal). A recorded unwind is kept as is.
-- ---------------------------------------------------------------------------
create or replace function jobs.record_unwinds(p_ids bigint[], p_ordinals integer[],
                                               p_states jobs.job_state[], p_errors jsonb[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  insert into jobs.step as s (job_id, name, ordinal, kind, value, created_at, bucket)
  select u.id, 'sqljobs.unwind', u.ordinal, 'unwind',
         pg_catalog.jsonb_build_object('state', u.state, 'error', u.error), jobs.now(),
         u.id & 255
    from unnest(p_ids, p_ordinals, p_states, p_errors) as u(id, ordinal, state, error)
  on conflict do nothing;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.attempts_push(attempts, entry) -> the attempt history (jobs.job.attempts) with
-- one more entry at its end, the oldest dropped beyond the last 20: bounded, whatever
-- a job's max_attempts. Called only on the failure paths (jobs.nack_many here, lease
-- recovery in jobs.claim), never by ack or a claim's normal path. An entry is
-- {attempt, claim, worker, started_at, ended_at, outcome, error}.
-- ---------------------------------------------------------------------------
create or replace function jobs.attempts_push(p_attempts jsonb, p_entry jsonb)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  v_attempts jsonb := coalesce(p_attempts, '[]'::jsonb) || pg_catalog.jsonb_build_array(p_entry);
begin
  while pg_catalog.jsonb_array_length(v_attempts) > 20 loop
    v_attempts := v_attempts - 0;
  end loop;
  return v_attempts;
end
$$;

comment on function jobs.attempts_push(jsonb, jsonb) is
  'An attempt history with one more entry, keeping the last 20 (jobs.job.attempts).';

-- ---------------------------------------------------------------------------
-- jobs.nack_many(ids, claims, errors, modes, delays_s) -> (id, ok, state) per input.
--
-- modes (null = 'retry'):
--   retry      attempt counted. Next run_at = now + delay_s, or the job's backoff
--              curve when delay_s is null. Attempts exhausted (jobs.retry_state) ->
--              dead, or failed when dead_letter is off.
--   fail       terminal now: failed.
--   park       parked, not an attempt; wakes at now + delay_s (never when null) or
--              when an event or child job wakes it.
--   shed       back to ready at now + delay_s (default now), not an attempt
--              (e.g. rate-limited).
--   interrupt  interrupted (a drain cut-off stopped the run), not an attempt;
--              claimed again like ready, in its old place in line (run_at kept;
--              now + delay_s when a delay is given).
-- errors: jsonb per job (null allowed), stored in last_error with attempt and time; an
--         error that is not an object is stored as {"message": error, ...}. A null error
--         leaves last_error as it was.
-- History: modes retry, fail and interrupt end an attempt without success: each appends
--   {attempt, claim, worker, started_at, ended_at: now, outcome: retry | failed | dead
--   | interrupted, error} to the job's attempts (jobs.attempts_push; error: the stored
--   one, null when none was given). park and shed write none (not a failure).
-- Sagas: a job with a stored compensable step (compensable) whose nack would make it
--   failed or dead starts unwinding instead (docs/design/sagas.md): it stays `running`
--   under the caller's claim and lease, compensating, with the final state recorded
--   (jobs.record_unwinds); its answer's state is `running`. The caller runs the
--   compensations and settles it with jobs.step_unwound (or leaves it to a later run).
-- ---------------------------------------------------------------------------
create or replace function jobs.nack_batch(
  p_ids      bigint[],
  p_claims   bigint[],
  p_errors   jsonb[],
  p_modes    text[],
  p_delays_s double precision[],
  p_wait     boolean
)
returns table (id bigint, ok boolean, state jobs.job_state)
language plpgsql
volatile
set search_path = ''
-- One generic plan per session, kept to index probes (as jobs.ack_batch)
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now     timestamptz := jobs.now();
  v_locked  bigint[];
  v_n       integer;
  v_bad     text;
  v_done    bigint[];
  v_claims  bigint[];  -- the claim each done job was settled under
  v_states  jobs.job_state[];
  v_watched bigint[];
  v_held    bigint[];  -- the jobs that held limit slots
  v_follows bigint[];  -- the jobs with hooks or a parent, settled for good
  v_unwinds bigint[];  -- the jobs that start unwinding (sagas), with for each
  v_seqs    integer[];          -- its step_seq,
  v_finals  jobs.job_state[];   -- the final state it will settle in,
  v_errors  jsonb[];            -- and the error
  v_distributed boolean := jobs.distributed();
  v_rounds  refcursor;  -- distributed: (buckets, ids) of the batch, a shard at a time
  v_buckets smallint[];   -- (null: one round for all)
  v_ids     bigint[];
  v_round   record;     -- a round's answers
begin
  perform jobs.check_batch(p_ids, p_claims, p_errors);
  perform jobs.check_values(p_errors, 'error');
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  v_n := pg_catalog.cardinality(p_ids);
  if (p_modes is not null and pg_catalog.cardinality(p_modes) <> v_n)
     or (p_delays_s is not null and pg_catalog.cardinality(p_delays_s) <> v_n) then
    perform jobs.raise_error('invalid_argument', 'modes and delays_s must match ids in length');
  end if;
  select m into v_bad from pg_catalog.unnest(p_modes) m
   where m not in ('retry', 'fail', 'park', 'shed', 'interrupt') limit 1;
  if v_bad is not null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('mode %s is not one of retry, fail, park, shed, interrupt',
                        pg_catalog.quote_literal(v_bad)));
  end if;
  -- (NaN sorts above every number, so `not (d <= 1e9)` refuses it too)
  if exists (select 1 from pg_catalog.unnest(p_delays_s) d where d < 0 or not (d <= 1e9)) then
    perform jobs.raise_error('invalid_argument', 'delays_s must be 0 to 1e9 seconds');
  end if;
  -- last_error is read by every client and the dashboard: {kind, message, detail, ...},
  -- kind and message text when given (a non-object error is wrapped as {message} below)
  select pg_catalog.format('error %s: %s must be a JSON string, got %s', e.ord, f.field,
                           pg_catalog.jsonb_typeof(e.error -> f.field))
    into v_bad
    from pg_catalog.unnest(p_errors) with ordinality as e(error, ord)
   cross join (values ('kind'), ('message')) as f(field)
   where pg_catalog.jsonb_typeof(e.error) = 'object'
     and e.error ? f.field
     and pg_catalog.jsonb_typeof(e.error -> f.field) <> 'string'
   order by e.ord, f.field
   limit 1;
  if v_bad is not null then
    perform jobs.raise_error('invalid_argument', v_bad
      || ' (send {"kind": "...", "message": "...", "detail": ...}, see docs/howto-other-languages.md)');
  end if;

  v_locked := jobs.lock_batch(p_ids, p_claims, p_wait);
  -- WRITE: one round, or, distributed, one per shard of the batch (jobs.ids_by_shard):
  -- Citus locks rows only in a statement it routes to one shard.
  if v_distributed then
    open v_rounds for select b.buckets, b.ids from jobs.ids_by_shard(p_ids) b;
  end if;
  loop
    if v_distributed then
      fetch v_rounds into v_buckets, v_ids;
      exit when not found;
    end if;
    with input as (
        select u.id, u.claim, u.error, coalesce(u.mode, 'retry') as mode, u.delay_s, u.ord
          from unnest(
                 p_ids, p_claims,
                 coalesce(p_errors, pg_catalog.array_fill(null::jsonb, array[v_n])),
                 coalesce(p_modes, pg_catalog.array_fill(null::text, array[v_n])),
                 coalesce(p_delays_s, pg_catalog.array_fill(null::double precision, array[v_n])))
               with ordinality as u(id, claim, error, mode, delay_s, ord)
         where v_ids is null or u.id = any (v_ids)
      ),
      target as (
        select j.id, i.error, i.mode, i.delay_s, j.attempt, n.next_state, e.stored_error,
               n.next_state in ('failed', 'dead') and j.compensable and not j.compensating
                 as unwinds,
               -- the history: an attempt that failed, ended for good or was interrupted
               -- (made here, not in the update: Citus sends no update to a shard whose
               -- SET calls a stable function on the row's columns)
               case when i.mode in ('retry', 'fail', 'interrupt') then
                 jobs.attempts_push(j.attempts, pg_catalog.jsonb_build_object(
                   'attempt', j.attempt, 'claim', j.claim >> 32, 'worker', j.worker,
                   'started_at', j.started_at, 'ended_at', v_now,
                   'outcome', case when i.mode = 'interrupt' then 'interrupted'
                                   when n.next_state = 'ready' then 'retry'
                                   else n.next_state::text end,
                   'error', e.stored_error))
                 else j.attempts end as attempts,
               case
                 when i.mode = 'retry' then
                   v_now + pg_catalog.make_interval(secs => coalesce(i.delay_s,
                     jobs.backoff_s(j.attempt, j.retry_base_s, j.retry_cap_s, j.retry_jitter)))
                 when i.mode = 'park' then
                   coalesce(v_now + pg_catalog.make_interval(secs => i.delay_s), 'infinity')
                 -- an interrupted run keeps its place in line (its run_at), like a
                 -- recovered one, unless the caller asks for a delay
                 when i.mode = 'interrupt' and i.delay_s is null then least(j.run_at, v_now)
                 else v_now + pg_catalog.make_interval(secs => coalesce(i.delay_s, 0))
               end as next_run_at
          from input i
          join jobs.job j on j.id = i.id and j.claim = i.claim and j.state = 'running'
                          and (v_locked is null or j.id = any (v_locked))
                          and (v_buckets is null or j.bucket = any (v_buckets))
         cross join lateral (select case
                                      when i.mode = 'fail' then 'failed'
                                      when i.mode = 'park' then 'parked'
                                      when i.mode = 'shed' then 'ready'
                                      when i.mode = 'interrupt' then 'interrupted'
                                      else jobs.retry_state(j.attempt, j.max_attempts, j.dead_letter)
                                    end::jobs.job_state as next_state) n
         -- what last_error (and the attempt history) store: the error as an object, plus
         -- the attempt that ended and when (null: no error given)
         cross join lateral (select case when i.error is not null then
                                      case when pg_catalog.jsonb_typeof(i.error) = 'object'
                                           then i.error
                                           else pg_catalog.jsonb_build_object('message', i.error) end
                                      || pg_catalog.jsonb_build_object('attempt', j.attempt,
                                                                       'at', v_now)
                                    end as stored_error) e
         order by j.id
           for update of j
      ),
      done as (
        update jobs.job as j
           set state = case when t.unwinds then j.state else t.next_state end,
               run_at = case when not t.unwinds and t.next_state in ('ready', 'parked', 'interrupted')
                             then t.next_run_at else j.run_at end,
               attempt = case when t.mode in ('park', 'shed', 'interrupt')
                              then j.attempt - 1 else j.attempt end,
               lease_expires_at = case when t.unwinds then j.lease_expires_at end,
               finished_at = case when not t.unwinds and t.next_state in ('failed', 'dead')
                                  then v_now end,
               compensating = j.compensating or t.unwinds,
               step_seq = j.step_seq + case when t.unwinds then 1 else 0 end,
               last_error = coalesce(t.stored_error, j.last_error),
               attempts = t.attempts
          from target t
         where j.id = t.id and (v_buckets is null or j.bucket = any (v_buckets))
        returning j.id, j.claim, j.state, j.settle_watched, t.unwinds, j.step_seq, t.next_state,
                  t.error, j.slots is not null and not t.unwinds as held,
                  (j.hooks is not null or j.parent_id is not null)
                    and j.state in ('failed', 'dead') as follows
      )
    select pg_catalog.array_agg(done.id) as done, pg_catalog.array_agg(done.claim) as claims,
           pg_catalog.array_agg(done.state) as states,
           pg_catalog.array_agg(done.id) filter (
             where done.settle_watched and done.state in ('failed', 'dead')) as watched,
           pg_catalog.array_agg(done.id) filter (where done.held) as held,
           pg_catalog.array_agg(done.id) filter (where done.follows) as follows,
           pg_catalog.array_agg(done.id) filter (where done.unwinds) as unwinds,
           pg_catalog.array_agg(done.step_seq) filter (where done.unwinds) as seqs,
           pg_catalog.array_agg(done.next_state) filter (where done.unwinds) as finals,
           pg_catalog.array_agg(done.error) filter (where done.unwinds) as errors
      into v_round
      from done;
    v_done := v_done || v_round.done;
    v_claims := v_claims || v_round.claims;
    v_states := v_states || v_round.states;
    v_watched := v_watched || v_round.watched;
    v_held := v_held || v_round.held;
    v_follows := v_follows || v_round.follows;
    v_unwinds := v_unwinds || v_round.unwinds;
    v_seqs := v_seqs || v_round.seqs;
    v_finals := v_finals || v_round.finals;
    v_errors := v_errors || v_round.errors;
    exit when not v_distributed;
  end loop;
  if v_distributed then
    close v_rounds;
  end if;
  -- record the final state of each job that starts unwinding (sagas, above)
  if v_unwinds is not null then
    perform jobs.record_unwinds(v_unwinds, v_seqs, v_finals, v_errors);
  end if;
  -- those that left running free their slots; those settled for good set off their
  -- hooks and parents (sql/35_limits.sql, sql/42_hooks.sql)
  perform jobs.release_slots(v_held);
  perform jobs.job_final(v_follows);
  -- NOTIFY result waiters of watched jobs that reached a final state (once per call).
  perform jobs.notify_settled(v_watched);
  return query
    select u.id, case when d.id is not null then true
                      else jobs.unwritten_answer(u.id, u.claim) end, d.state
      from unnest(p_ids, p_claims) with ordinality as u(id, claim, ord)
      left join unnest(v_done, v_claims, v_states) as d(id, claim, state)
             on d.id = u.id and d.claim = u.claim
     order by u.ord;
end
$$;

comment on function jobs.nack_batch(bigint[], bigint[], jsonb[], text[], double precision[], boolean) is
  'Private: jobs.nack_many (busy rows skipped) and jobs.nack (busy rows waited for).';

create or replace function jobs.nack_many(
  p_ids      bigint[],
  p_claims   bigint[],
  p_errors   jsonb[] default null,
  p_modes    text[] default null,
  p_delays_s double precision[] default null
)
returns table (id bigint, ok boolean, state jobs.job_state)
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query select n.id, n.ok, n.state
                 from jobs.nack_batch(p_ids, p_claims, p_errors, p_modes, p_delays_s, false) n;
end
$$;

comment on function jobs.nack_many(bigint[], bigint[], jsonb[], text[], double precision[]) is
  'Settle running jobs that did not succeed (retry, fail, park, shed, interrupt); fenced per job (ok null: busy, call again).';


-- jobs.nack(id, claim, error, mode, delay_s) -> the job's new state; raises lease_lost.
create or replace function jobs.nack(
  p_id      bigint,
  p_claim   bigint,
  p_error   jsonb default null,
  p_mode    text default 'retry',
  p_delay_s double precision default null
)
returns jobs.job_state
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_ok    boolean;
  v_state jobs.job_state;
begin
  select n.ok, n.state into v_ok, v_state
    from jobs.nack_batch(array[p_id], array[p_claim], array[p_error], array[p_mode],
                         array[p_delay_s], true) n;
  if not v_ok then
    perform jobs.lease_lost(p_id, p_claim);
  end if;
  return v_state;
end
$$;

comment on function jobs.nack(bigint, bigint, jsonb, text, double precision) is
  'Settle one running job that did not succeed; answers its new state; raises lease_lost (SJ004).';

-- ---------------------------------------------------------------------------
-- jobs.heartbeat_many(ids, claims, lease_s) -> (id, ok): extend each held lease to
-- now + lease_s. ok = false: the job is no longer this claim's (lost, cancelled); the
-- worker must stop that run. ok = null: the row was busy (another transaction holds it
-- locked), its lease was not extended this time: call again soon.
-- ---------------------------------------------------------------------------
create or replace function jobs.heartbeat_many(
  p_ids     bigint[],
  p_claims  bigint[],
  p_lease_s double precision
)
returns table (id bigint, ok boolean)
language plpgsql
volatile
set search_path = ''
-- One generic plan per session, kept to index probes (as jobs.ack_batch)
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now    timestamptz := jobs.now();
  v_locked bigint[];
begin
  perform jobs.check_batch(p_ids, p_claims, null::text[]);
  perform jobs.check_tenant(p_ids);  -- a bound session: another tenant's job is refused
  -- NaN and leases past the end of time (now + lease overflows) are refused too
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive and at most 1e9 seconds, got %s', p_lease_s));
  end if;
  v_locked := jobs.lock_batch(p_ids, p_claims, false);  -- a busy row answers null (above)
  return query
    with input as (
      select u.id, u.claim, u.ord
        from unnest(p_ids, p_claims) with ordinality as u(id, claim, ord)
    ),
    held as (
      update jobs.job as j
         set lease_expires_at = v_now + pg_catalog.make_interval(secs => p_lease_s)
        from (select input.id, input.claim from input order by input.id) as i
       where j.id = i.id and j.claim = i.claim and j.state = 'running'
         and (v_locked is null or j.id = any (v_locked))
      returning j.id, j.claim
    )
    select input.id, case when held.id is not null then true
                          else jobs.unwritten_answer(input.id, input.claim) end
      from input left join held on held.id = input.id and held.claim = input.claim
     order by input.ord;
end
$$;

comment on function jobs.heartbeat_many(bigint[], bigint[], double precision) is
  'Extend the leases of running jobs still held under these claims; ok = false means lost.';

-- jobs.heartbeat(id, claim, lease_s) -> true while the lease is still this claim's; null
-- when the row was busy (locked by another transaction: not renewed, call again).
create or replace function jobs.heartbeat(p_id bigint, p_claim bigint, p_lease_s double precision default 30)
returns boolean
language sql
volatile
set search_path = ''
as $$
  select h.ok from jobs.heartbeat_many(array[p_id], array[p_claim], p_lease_s) h
$$;

comment on function jobs.heartbeat(bigint, bigint, double precision) is
  'Extend one lease; false when the job is no longer held under this claim, null when its row was busy.';

-- jobs.progress(id, claim, progress) -> true when recorded; false when the fence failed.
create or replace function jobs.progress(p_id bigint, p_claim bigint, p_progress jsonb)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.check_value(p_progress, 'progress');
  perform jobs.check_tenant(array[p_id]);  -- a bound session: another tenant's job is refused
  update jobs.job as j
     set progress = p_progress
   where j.id = p_id and j.claim = p_claim and j.state = 'running';
  return found;
end
$$;

comment on function jobs.progress(bigint, bigint, jsonb) is
  'Record progress of a running job under its claim; false when the fence failed.';

-- ---------------------------------------------------------------------------
-- jobs.fence_run(id, claim): the writes a handler makes inside its run (an enqueue, an
-- event) go through only while that run holds its job. The Python client sends it first
-- in the same transaction as such a write: the job's row is then held (for share) until
-- that transaction ends, so a cancel either waits for it or refuses it. It also sets
-- the transaction-local setting jobs.run_actor to the job's actor (jobs.run_actor()):
-- what the transaction then enqueues, stages or emits naming no actor takes it.
-- Errors: lease_lost (SJ004) when the job no longer runs under p_claim (cancelled, its
-- lease lost and taken over, or handed back by a drain); tenant_refused (SJ018).
-- ---------------------------------------------------------------------------
create or replace function jobs.fence_run(p_id bigint, p_claim bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_actor jsonb;
begin
  perform jobs.check_tenant(array[p_id]);
  select j.actor into v_actor from jobs.job j
    where j.id = p_id and j.claim = p_claim and j.state = 'running'
      and (not jobs.distributed() or j.bucket = (p_id & 255)::smallint)  -- (its shard)
      for share of j;
  if not found then
    perform jobs.raise_error('lease_lost',
      pg_catalog.format('job %s: the run that makes this write was stopped', p_id),
      'cancelled, its lease lost, or handed back by a drain: nothing of it is written',
      'a stopped run writes nothing');
  end if;
  perform pg_catalog.set_config('jobs.run_actor', coalesce(v_actor::text, ''), true);
end
$$;

comment on function jobs.fence_run(bigint, bigint) is
  'Refuse (SJ004) a write made inside a run whose job it no longer holds; holds the row until commit.';
