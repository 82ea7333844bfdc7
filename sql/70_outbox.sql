-- sqljobs: the transactional outbox (docs/howto-outbox.md, docs/design/outbox-and-scheduler.md).
--
-- A service that must not talk to the worker fleet stages jobs in its OWN transaction
-- (jobs.stage / jobs.stage_many); a relay publishes them as jobs later (jobs.relay).
-- A staged row exists only if the stager's transaction commits, so a rollback stages
-- nothing and nothing is relayed.
--
-- Identity: a staged row's id is made as a job's is (jobs.new_job_id) and IS the id of
-- the job it becomes, so the stager can store it at once. Staging shares the job's
-- idempotency namespace (name, coalesce(tenant, ''), key): staging a key that already
-- has a job, or an unpublished staged row, answers that id with outcome 'deduped' and
-- writes nothing. (One race is left to the relay: a job enqueued directly for a key
-- whose staged row is not yet published; that row publishes as 'deduped' and records
-- the job's id.)
--
-- Ordering: a spec may carry `ordering_key` (text, at most 1000 bytes), ordered within
-- its tenant. Rows of one (tenant, ordering key) are staged under that key's lock row
-- (jobs.lock_keys, held to commit), so their ids follow commit order; the relay
-- publishes them in id order and never has two of them in flight in two relays at
-- once. Rows without an ordering key are unordered.
--
-- Relay (jobs.relay(batch, relay_id, lease_s)): each call is one transaction that
--   1. PUBLISHES the rows this relay claimed on its previous call: enqueues them as one
--      batch under their own ids (a key that already has a job answers 'deduped', so a
--      repeated publish never makes a second job) and marks them published; fenced on
--      claimed_by = relay_id, so rows another relay has since taken over are left alone;
--   2. CLAIMS the next batch under a lease (claimed_by, claim token + 1, lease expiry).
-- The claim commits, so a relay that dies holding a batch leaves it leased; once the
-- lease lapses another relay claims it (a new token) and publishes it. A relay loop
-- calls jobs.relay again at once while it holds rows; jobs.relay(0, ...) only publishes
-- (the drain's first phase).
--
-- Wake-ups: jobs.stage notifies channel 'jobs_outbox' (PostgreSQL folds repeats within
-- a transaction); the relay publishes through jobs.wake (channel jobs_wake) per queue.
-- `set jobs.notify = off` silences both.
--
-- Retention: published rows stay until jobs.purge_outbox deletes them (bounded batches).

-- ---------------------------------------------------------------------------
-- jobs.stage_many(specs jsonb) -> (ord, id, outcome), one row per spec in input order.
--
-- Contract:
--   * A spec is an enqueue spec (sql/20_enqueue.sql) plus `ordering_key`; on_conflict
--     is refused (staging always answers an existing key as 'deduped'). Refuses the
--     whole call before the first write: invalid_argument SJ001, payload_too_large SJ002.
--   * delay_s is turned into run_at at stage time (the delay counts from staging).
--   * outcome 'staged': a new row whose id is its future job's id; 'deduped': the key
--     already has a job (its id) or an unpublished staged row (its id).
--   * Writes in the caller's transaction; notifies 'jobs_outbox' once.
-- Locks: the lock row of each distinct (tenant, ordering key) (jobs.lock_keys, in key
--   order), held to commit, so one key's rows are staged one transaction at a time;
--   then the insert, in (name, tenant, key) order.
-- ---------------------------------------------------------------------------
create or replace function jobs.stage_many(p_specs jsonb)
returns table (ord integer, id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now     timestamptz := jobs.now();
  v_problem text;
  v_created bigint[];
begin
  -- GUARD: shape of the extra field, then the enqueue spec rules, before any write.
  if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array' then
    perform jobs.raise_error('invalid_argument', 'specs must be a JSON array of job specs');
  end if;
  select pg_catalog.format('spec %s: %s', e.ord, case
           when pg_catalog.jsonb_typeof(e.spec) = 'object' and e.spec ? 'on_conflict'
             then 'on_conflict is not accepted by stage: an existing key is always answered as deduped'
           else 'ordering_key must be a non-empty string of at most 1000 bytes' end)
    into v_problem
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
   where pg_catalog.jsonb_typeof(e.spec) = 'object'
     and (e.spec ? 'on_conflict'
          or (e.spec ? 'ordering_key' and pg_catalog.jsonb_typeof(e.spec->'ordering_key') <> 'null'
              and (pg_catalog.jsonb_typeof(e.spec->'ordering_key') <> 'string'
                   or e.spec->>'ordering_key' = ''
                   or pg_catalog.octet_length(e.spec->>'ordering_key') > 1000)))
   order by e.ord
   limit 1;
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  if pg_catalog.current_setting('jobs.run_actor', true) <> '' then
    p_specs := jobs.run_actor_specs(p_specs);  -- staged inside a run: its actor
  end if;
  -- the job fields, checked as enqueue_many checks them (ordering_key is the outbox's own)
  perform jobs.check_specs(
    (select coalesce(pg_catalog.jsonb_agg(
              case when pg_catalog.jsonb_typeof(e.spec) = 'object' then e.spec - 'ordering_key'
                   else e.spec end order by e.ord), '[]')
       from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)));
  p_specs := jobs.tenant_specs(p_specs);  -- a tenant-bound session's tenant (sql/15_tenancy.sql)

  -- LOCK ACQUISITION: the lock row of each (tenant, ordering key), in key order
  -- (jobs.lock_keys: a tenant's session can hold up only its own tenant's keys).
  perform jobs.lock_keys(k.keys, array(select 'update' from pg_catalog.unnest(k.keys)))
     from (select array(select distinct 'outbox|' || coalesce(e.spec->>'tenant', '') || '|'
                                        || (e.spec->>'ordering_key')
                          from pg_catalog.jsonb_array_elements(p_specs) as e(spec)
                         where e.spec->>'ordering_key' is not null) as keys) k;

  -- WRITE: keys with no job and no unpublished staged row; a key repeated in the batch
  -- is staged from its first spec.
  with ins as (
    insert into jobs.outbox as o (id, name, tenant, key, ordering_key, spec, staged_at)
    select jobs.new_job_id(e.spec->>'name', e.spec->>'tenant', e.spec->>'key'),
           e.spec->>'name', e.spec->>'tenant', e.spec->>'key', e.spec->>'ordering_key',
           case when e.spec->>'delay_s' is null then e.spec - 'ordering_key'
                else e.spec - 'ordering_key' - 'delay_s'
                     || pg_catalog.jsonb_build_object('run_at', v_now
                          + pg_catalog.make_interval(secs => (e.spec->>'delay_s')::double precision))
           end,
           v_now
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
     where jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key') is null
     order by e.ord
    on conflict (name, (coalesce(tenant, '')), key) where published_at is null do nothing
    returning o.id
  )
  select pg_catalog.array_agg(ins.id) into v_created from ins;

  if v_created is not null
     and coalesce(pg_catalog.current_setting('jobs.notify', true), '') <> 'off' then
    perform pg_catalog.pg_notify('jobs_outbox', '');
  end if;

  -- ANSWER: the job of the key when there is one, else its unpublished staged row.
  return query
    select a.ord::integer, a.id,
           case when a.id = any (coalesce(v_created, '{}')) and a.first then 'staged'
                else 'deduped' end
      from (select e.ord, coalesce(j.id, o.id) as id,
                   pg_catalog.row_number() over (partition by coalesce(j.id, o.id)
                                                 order by e.ord) = 1 as first
              from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
             cross join lateral (select jobs.job_of_key(e.spec->>'name', e.spec->>'tenant',
                                                        e.spec->>'key') as id) j
              left join lateral (select b.id from jobs.outbox b
                                  where b.name = e.spec->>'name'
                                    and coalesce(b.tenant, '') = coalesce(e.spec->>'tenant', '')
                                    and b.key = e.spec->>'key' and b.published_at is null) o
                     on true) a
     order by a.ord;
end
$$;

comment on function jobs.stage_many(jsonb) is
  'Stage jobs in the caller''s transaction; one (ord, id, staged | deduped) per spec.';

-- ---------------------------------------------------------------------------
-- jobs.stage(name, key, payload, options) -> (id, outcome): one staged job.
-- A thin wrapper over stage_many; options takes every spec field but name, key and
-- payload (ordering_key included). Same refusals, same locks.
-- ---------------------------------------------------------------------------
create or replace function jobs.stage(
  p_name    text,
  p_key     text,
  p_payload jsonb default '{}',
  p_options jsonb default '{}'
)
returns table (id bigint, outcome text)
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query
    select m.id, m.outcome
      from jobs.stage_many(jobs.one_spec(p_name, p_key, p_payload, p_options)) m;
end
$$;

comment on function jobs.stage(text, text, jsonb, jsonb) is
  'Stage one job in the caller''s transaction; answers its (future job) id and staged | deduped.';

-- ---------------------------------------------------------------------------
-- jobs.relay(batch, relay_id, lease_s) -> (published, deduped, held): one relay step.
--
-- Contract (one transaction):
--   PUBLISH  every unpublished row claimed_by = p_relay_id (what this relay claimed on
--            its previous call), fenced on claimed_by: a row another relay took over
--            after this one's lease lapsed is not touched. Each becomes a job with the
--            row's id (created), or, when its key already has a job, records that job
--            (deduped): a repeated publish never makes a second job. Rows are marked
--            published (published_at, job_id, outcome) and their claim cleared.
--   CLAIM    up to p_batch unpublished rows, in id order, that no live lease holds
--            (unclaimed, or lease_expires_at <= now): sets claimed_by, claim + 1 (the
--            fencing token) and lease_expires_at = now + p_lease_s. A row of an
--            ordering key is claimed only when every earlier unpublished row of that key
--            is claimed with it, so one key is never in flight in two relays; and of
--            the ordering keys among those rows, one call takes at most half (rounded
--            up, oldest first), so that a relay never holds every key and starves the
--            others.
--   Answers published (rows marked published now), deduped (of those, rows whose key
--   already had a job) and held (rows claimed now, published by the next call).
-- Refuses (invalid_argument SJ001): p_batch < 0 or > 10000, an empty relay id, a
--   lease_s that is not positive and finite.
-- Locks: outbox rows (held rows, then claimed rows with skip locked, in id order), then
--   job rows by insert in id order; notifies jobs_wake once per queue made runnable.
-- ---------------------------------------------------------------------------
create or replace function jobs.relay(
  p_batch    integer,
  p_relay_id text,
  p_lease_s  double precision default 30
)
returns table (published integer, deduped integer, held integer)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_now       timestamptz := jobs.now();
  v_published integer := 0;
  v_deduped   integer := 0;
  v_held      integer := 0;
  v_specs     jsonb;
  v_ids       bigint[];
  v_created   bigint[];
  v_wake      text[];
begin
  perform jobs.fleet_only('jobs.relay');  -- (sql/15_tenancy.sql)
  -- GUARD
  if p_batch is null or p_batch < 0 or p_batch > 10000 then
    perform jobs.raise_error('invalid_argument', 'batch must be between 0 and 10000');
  end if;
  perform jobs.check_name(p_relay_id, 'relay_id');
  -- bounded (about 31 years): now + lease must stay a timestamp (NaN is refused too)
  if p_lease_s is null or not (p_lease_s > 0 and p_lease_s <= 1e9) then
    perform jobs.raise_error('invalid_argument', 'lease_s must be positive and at most 1e9 seconds');
  end if;

  -- PUBLISH: the rows this relay holds, as jobs under their own ids (jobs.insert_jobs).
  select pg_catalog.jsonb_agg(h.spec order by h.id), pg_catalog.array_agg(h.id order by h.id)
    into v_specs, v_ids
    from (select o.id, o.spec
            from jobs.outbox o
           where o.claimed_by = p_relay_id and o.published_at is null
           order by o.id
             for update) h;
  if v_ids is not null then
    select pg_catalog.array_agg(c.id),
           pg_catalog.array_agg(distinct c.queue) filter (where c.run_at <= v_now)
      into v_created, v_wake
      from jobs.insert_jobs(v_specs, v_now, v_ids) c;
  end if;

  with done as (
    update jobs.outbox o
       set published_at = v_now,
           lease_expires_at = null,
           job_id = case when o.id = any (coalesce(v_created, '{}')) then o.id
                         else jobs.job_of_key(o.name, o.tenant, o.key) end,
           outcome = case when o.id = any (coalesce(v_created, '{}')) then 'created'
                          else 'deduped' end
     where o.claimed_by = p_relay_id and o.published_at is null
    returning o.outcome
  )
  select pg_catalog.count(*)::integer,
         (pg_catalog.count(*) filter (where done.outcome = 'deduped'))::integer
    into v_published, v_deduped
    from done;

  perform jobs.wake(v_wake);

  -- CLAIM: the next batch under a lease; an ordering key only from its head.
  if p_batch > 0 then
    with cand as materialized (
      select o.id, o.ordering_key, coalesce(o.tenant, '') as tenant
        from jobs.outbox o
       where o.published_at is null
         and (o.claimed_by is null or o.lease_expires_at <= v_now)
       order by o.id
       limit p_batch
         for update skip locked
    ),
    -- Per ordering key in the batch: its first unpublished row NOT in the batch (held
    -- by a live lease elsewhere, locked by another relay, or past the limit). Rows of
    -- the key after that one must wait; the seek stops at the first such row.
    keyed as (
      select c.tenant, c.ordering_key, pg_catalog.array_agg(c.id) as ids,
             pg_catalog.min(c.id) as head
        from cand c
       where c.ordering_key is not null
       group by c.tenant, c.ordering_key
    ),
    -- FAIR SHARE: a key is in flight in one relay only, so a relay that took every key
    -- of its window would leave the others nothing to claim until it published. It
    -- takes at most half the keys (rounded up; the oldest heads first) and leaves the
    -- rest of them to the next relay.
    taken as (
      select k.tenant, k.ordering_key, k.ids
        from keyed k
       order by k.head
       limit (select (pg_catalog.count(*) + 1) / 2 from keyed)
    ),
    blocked as (
      select k.tenant, k.ordering_key,
             (select p.id from jobs.outbox p
               where p.ordering_key = k.ordering_key and coalesce(p.tenant, '') = k.tenant
                 and p.published_at is null and p.id <> all (k.ids)
               order by p.id
               limit 1) as first_out
        from taken k
    ),
    ok as (
      select c.id
        from cand c
        left join blocked b on b.ordering_key = c.ordering_key and b.tenant = c.tenant
       where c.ordering_key is null
          or (b.ordering_key is not null and (b.first_out is null or c.id < b.first_out))
    ),
    claimed as (
      update jobs.outbox o
         set claimed_by = p_relay_id,
             claim = o.claim + 1,
             lease_expires_at = v_now + pg_catalog.make_interval(secs => p_lease_s)
        from ok
       where o.id = ok.id
      returning o.id
    )
    select pg_catalog.count(*)::integer into v_held from claimed;
  end if;

  return query select v_published, v_deduped, v_held;
end
$$;

comment on function jobs.relay(integer, text, double precision) is
  'Publish the rows this relay holds as jobs, then claim the next batch under a lease.';

-- ---------------------------------------------------------------------------
-- jobs.purge_outbox(retention_s, max) -> (purged, remaining): retention of published
-- rows. Deletes at most p_max rows published more than p_retention_s seconds ago
-- (skip locked, oldest first) and answers how many such rows remain. Unpublished rows
-- are never purged. Refuses a negative or non-finite retention, or p_max < 1.
-- ---------------------------------------------------------------------------
create or replace function jobs.purge_outbox(
  p_retention_s double precision,
  p_max         integer default 1000
)
returns table (purged integer, remaining bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_before timestamptz;
  v_purged integer;
begin
  perform jobs.fleet_only('jobs.purge_outbox');  -- (sql/15_tenancy.sql)
  -- bounded (about 31 years): now - retention must stay a timestamp
  if p_retention_s is null or not (p_retention_s >= 0 and p_retention_s <= 1e9) then
    perform jobs.raise_error('invalid_argument',
      'retention_s must be zero or more, and at most 1e9 seconds');
  end if;
  if p_max is null or p_max < 1 then
    perform jobs.raise_error('invalid_argument', 'max must be at least 1');
  end if;
  v_before := jobs.now() - pg_catalog.make_interval(secs => p_retention_s);
  with victims as (
    select o.id from jobs.outbox o
     where o.published_at is not null and o.published_at < v_before
     order by o.published_at
     limit p_max
       for update skip locked
  ), gone as (
    delete from jobs.outbox o using victims v where o.id = v.id returning o.id
  )
  select pg_catalog.count(*)::integer into v_purged from gone;
  return query
    select v_purged, (select pg_catalog.count(*) from jobs.outbox o
                       where o.published_at is not null and o.published_at < v_before);
end
$$;

comment on function jobs.purge_outbox(double precision, integer) is
  'Delete at most p_max outbox rows published more than p_retention_s seconds ago.';

-- ---------------------------------------------------------------------------
-- jobs.outbox_stats() -> one row: pending (unpublished), held (claimed under a live
-- lease), lapsed (claimed, lease lapsed), published (retained), oldest_pending_s.
-- ---------------------------------------------------------------------------
create or replace function jobs.outbox_stats()
returns table (pending bigint, held bigint, lapsed bigint, published bigint,
               oldest_pending_s double precision)
language sql
stable
set search_path = ''
as $$
  select jobs.fleet_only('jobs.outbox_stats');  -- (sql/15_tenancy.sql)
  select pg_catalog.count(*) filter (where o.published_at is null),
         pg_catalog.count(*) filter (where o.published_at is null and o.claimed_by is not null
                                       and o.lease_expires_at > jobs.now()),
         pg_catalog.count(*) filter (where o.published_at is null and o.claimed_by is not null
                                       and o.lease_expires_at <= jobs.now()),
         pg_catalog.count(*) filter (where o.published_at is not null),
         coalesce(extract(epoch from jobs.now() - pg_catalog.min(o.staged_at)
                          filter (where o.published_at is null))::double precision, 0)
    from jobs.outbox o
$$;

comment on function jobs.outbox_stats() is 'Outbox counts: pending, held, lapsed, published.';
