-- The engine hot-path study's storage shapes (docs/design/engine-hot-path.md), each in
-- its own schema with the same four calls, so that bench/workloads.py drives them as it
-- drives jobs.*:
--   <shape>.enqueue(key) -> id            one job, deduped by key (null when a duplicate)
--   <shape>.enqueue_many(keys) -> ids     a batch
--   <shape>.claim(limit, lease_s, hint)   up to limit ready jobs -> (id, claim, pos)
--   <shape>.ack(ids, claims) -> ids       the fenced ones settled as succeeded
--   <shape>.succeeded() -> bigint         how many jobs are held as succeeded
-- They keep what the engine's guarantees need on the hot path (a dedupe key that outlives
-- the job, a claim token that fences the ack, a lease, a place in line) and nothing else:
-- no tenancy, limits, steps or notifications. They are prototypes to measure, not engines.

-- lean: one table as today, minus what the hot path does not need: 4 indexes
-- (pkey, key, claimable, lease) instead of 13; claim and ack update the row in place.
create schema if not exists shape_lean;
create table shape_lean.job (
  id               bigint generated always as identity primary key,
  name             text not null default 'bench.noop',
  key              text not null,
  queue            text not null default 'default',
  priority         smallint not null default 0,
  run_at           timestamptz not null default now(),
  state            smallint not null default 0,  -- 0 ready, 1 running, 2 succeeded
  payload          jsonb not null default '{}',
  attempt          integer not null default 0,
  claim            bigint not null default 0,
  lease_expires_at timestamptz,
  result           jsonb,
  finished_at      timestamptz
);
create unique index on shape_lean.job (name, key);
create index lean_claimable on shape_lean.job (queue, priority, run_at, id) where state = 0;
create index lean_lease on shape_lean.job (lease_expires_at) where state = 1;

create function shape_lean.enqueue(p_key text) returns bigint
language plpgsql as $$
declare v_id bigint;
begin
  insert into shape_lean.job (key) values (p_key) on conflict do nothing returning id into v_id;
  return v_id;
end $$;

create function shape_lean.enqueue_many(p_keys text[]) returns setof bigint
language plpgsql as $$
begin
  return query insert into shape_lean.job (key) select k from unnest(p_keys) k
               on conflict do nothing returning id;
end $$;

-- p_hint: the position (priority, run_at, id) after the last job this worker claimed,
-- or null. lean ignores it; lean_hint (below) starts its scan there.
create function shape_lean.claim(p_limit integer, p_lease_s float8, p_hint text)
returns table (id bigint, claim bigint, pos text)
language plpgsql as $$
begin
  return query
    update shape_lean.job j
       set state = 1, attempt = j.attempt + 1, claim = j.claim + 1,
           lease_expires_at = now() + make_interval(secs => p_lease_s)
     where j.id = any (array(select c.id from shape_lean.job c
                              where c.queue = 'default' and c.state = 0 and c.run_at <= now()
                              order by c.priority, c.run_at, c.id
                              limit p_limit for update skip locked))
    returning j.id, j.claim, null::text;
end $$;

create function shape_lean.ack(p_ids bigint[], p_claims bigint[]) returns setof bigint
language plpgsql as $$
begin
  return query
    update shape_lean.job j
       set state = 2, finished_at = now(), lease_expires_at = null
      from unnest(p_ids, p_claims) as u(id, claim)
     where j.id = u.id and j.claim = u.claim and j.state = 1
    returning j.id;
end $$;

create function shape_lean.succeeded() returns bigint
language sql as $$ select count(*) from shape_lean.job where state = 2 $$;

-- lean_hint: lean's table, and a claim that starts its index scan at the worker's hint
-- (the position after its last claim) instead of the head of the claimable index, where
-- the entries of claimed rows a held snapshot keeps from being pruned pile up. A scan
-- from the hint that finds fewer than the limit tries again from the head, so a job
-- that lands before the hint (a retry, a higher priority) is found within one claim.
create schema if not exists shape_lean_hint;
create table shape_lean_hint.job (like shape_lean.job including all);
create function shape_lean_hint.enqueue(p_key text) returns bigint
language plpgsql as $$
declare v_id bigint;
begin
  insert into shape_lean_hint.job (key) values (p_key) on conflict do nothing returning id into v_id;
  return v_id;
end $$;
create function shape_lean_hint.enqueue_many(p_keys text[]) returns setof bigint
language plpgsql as $$
begin
  return query insert into shape_lean_hint.job (key) select k from unnest(p_keys) k
               on conflict do nothing returning id;
end $$;
create function shape_lean_hint.claim(p_limit integer, p_lease_s float8, p_hint text)
returns table (id bigint, claim bigint, pos text)
language plpgsql as $$
declare
  v_pri  smallint := nullif(split_part(coalesce(p_hint, ''), '|', 1), '')::smallint;
  v_at   timestamptz := nullif(split_part(coalesce(p_hint, ''), '|', 2), '')::timestamptz;
  v_id   bigint := nullif(split_part(coalesce(p_hint, ''), '|', 3), '')::bigint;
  v_ids  bigint[];
begin
  if p_hint is not null then
    v_ids := array(select c.id from shape_lean_hint.job c
                    where c.queue = 'default' and c.state = 0 and c.run_at <= now()
                      and (c.priority, c.run_at, c.id) > (v_pri, v_at, v_id)
                    order by c.priority, c.run_at, c.id
                    limit p_limit for update skip locked);
  end if;
  if p_hint is null or cardinality(v_ids) < p_limit then
    v_ids := array(select c.id from shape_lean_hint.job c
                    where c.queue = 'default' and c.state = 0 and c.run_at <= now()
                    order by c.priority, c.run_at, c.id
                    limit p_limit for update skip locked);
  end if;
  return query
    update shape_lean_hint.job j
       set state = 1, attempt = j.attempt + 1, claim = j.claim + 1,
           lease_expires_at = now() + make_interval(secs => p_lease_s)
     where j.id = any (v_ids)
    returning j.id, j.claim, concat_ws('|', j.priority, j.run_at, j.id);
end $$;
create function shape_lean_hint.ack(p_ids bigint[], p_claims bigint[]) returns setof bigint
language plpgsql as $$
begin
  return query
    update shape_lean_hint.job j
       set state = 2, finished_at = now(), lease_expires_at = null
      from unnest(p_ids, p_claims) as u(id, claim)
     where j.id = u.id and j.claim = u.claim and j.state = 1
    returning j.id;
end $$;
create function shape_lean_hint.succeeded() returns bigint
language sql as $$ select count(*) from shape_lean_hint.job where state = 2 $$;

-- split: the job's record apart from two narrow tables the hot path takes from. The
-- claim deletes the job's queue entry and inserts its lease; the ack deletes the lease.
-- The record's updates change no indexed column, so they can be HOT (fillfactor 80).
create schema if not exists shape_split;
create table shape_split.job (
  id          bigint generated always as identity primary key,
  name        text not null default 'bench.noop',
  key         text not null,
  queue       text not null default 'default',
  priority    smallint not null default 0,
  run_at      timestamptz not null default now(),
  state       smallint not null default 0,
  payload     jsonb not null default '{}',
  attempt     integer not null default 0,
  claim       bigint not null default 0,
  result      jsonb,
  finished_at timestamptz
) with (fillfactor = 80);
create unique index on shape_split.job (name, key);
create table shape_split.ready (
  queue    text not null,
  priority smallint not null,
  run_at   timestamptz not null,
  id       bigint not null,
  primary key (queue, priority, run_at, id)
);
create table shape_split.lease (
  id         bigint primary key,
  claim      bigint not null,
  expires_at timestamptz not null
);
create index split_lease_expiry on shape_split.lease (expires_at);

create function shape_split.enqueue(p_key text) returns bigint
language plpgsql as $$
declare v_id bigint;
begin
  with j as (insert into shape_split.job (key) values (p_key) on conflict do nothing
             returning job.id, job.queue, job.priority, job.run_at)
  insert into shape_split.ready select j.queue, j.priority, j.run_at, j.id from j
  returning ready.id into v_id;
  return v_id;
end $$;

create function shape_split.enqueue_many(p_keys text[]) returns setof bigint
language plpgsql as $$
begin
  return query
    with j as (insert into shape_split.job (key) select k from unnest(p_keys) k
               on conflict do nothing returning job.id, job.queue, job.priority, job.run_at)
    insert into shape_split.ready select j.queue, j.priority, j.run_at, j.id from j
    returning ready.id;
end $$;

create function shape_split.claim(p_limit integer, p_lease_s float8, p_hint text)
returns table (id bigint, claim bigint, pos text)
language plpgsql as $$
begin
  return query
    with picked as (
      delete from shape_split.ready r
       where (r.queue, r.priority, r.run_at, r.id) in (
               select c.queue, c.priority, c.run_at, c.id from shape_split.ready c
                where c.queue = 'default' and c.run_at <= now()
                order by c.priority, c.run_at, c.id
                limit p_limit for update skip locked)
      returning r.id
    ), held as (
      update shape_split.job j
         set state = 1, attempt = j.attempt + 1, claim = j.claim + 1
        from picked p where j.id = p.id
      returning j.id, j.claim
    )
    insert into shape_split.lease
    select h.id, h.claim, now() + make_interval(secs => p_lease_s) from held h
    returning lease.id, lease.claim, null::text;
end $$;

create function shape_split.ack(p_ids bigint[], p_claims bigint[]) returns setof bigint
language plpgsql as $$
begin
  return query
    with gone as (
      delete from shape_split.lease l using unnest(p_ids, p_claims) as u(id, claim)
       where l.id = u.id and l.claim = u.claim
      returning l.id
    )
    update shape_split.job j set state = 2, finished_at = now()
      from gone g where j.id = g.id
    returning j.id;
end $$;

create function shape_split.succeeded() returns bigint
language sql as $$ select count(*) from shape_split.job where state = 2 $$;

-- split_trigger: split's three tables, with the engine's columns of a running job kept
-- on the record (state, lease) and the narrow tables kept by statement-level triggers
-- that read the statement's old and new rows: every writer of the record keeps them
-- right, and the claim and the ack only pick and update. A third narrow table holds the
-- finished jobs by (state, finished_at), as the engine's retention needs. Measures what
-- the triggers cost against split's hand-written writes.
create schema if not exists shape_split_trigger;
create table shape_split_trigger.job (
  id               bigint generated always as identity primary key,
  name             text not null default 'bench.noop',
  key              text not null,
  queue            text not null default 'default',
  priority         smallint not null default 0,
  run_at           timestamptz not null default now(),
  state            smallint not null default 0,
  payload          jsonb not null default '{}',
  attempt          integer not null default 0,
  claim            bigint not null default 0,
  lease_expires_at timestamptz,
  result           jsonb,
  finished_at      timestamptz
) with (fillfactor = 80);
create unique index on shape_split_trigger.job (name, key);
create table shape_split_trigger.ready (
  queue    text not null,
  priority smallint not null,
  run_at   timestamptz not null,
  id       bigint not null,
  primary key (queue, priority, run_at, id)
);
create table shape_split_trigger.lease (
  expires_at timestamptz not null,
  id         bigint not null,
  primary key (expires_at, id)
);
create table shape_split_trigger.finished (
  state       smallint not null,
  finished_at timestamptz not null,
  id          bigint not null,
  primary key (state, finished_at, id)
);

create function shape_split_trigger.inserted() returns trigger
language plpgsql as $$
begin
  insert into shape_split_trigger.ready
  select n.queue, n.priority, n.run_at, n.id from new_rows n where n.state = 0;
  return null;
end $$;

create function shape_split_trigger.updated() returns trigger
language plpgsql as $$
begin
  delete from shape_split_trigger.ready r
   using (select o.queue, o.priority, o.run_at, o.id from old_rows o where o.state = 0
          except all
          select n.queue, n.priority, n.run_at, n.id from new_rows n where n.state = 0) g
   where r.queue = g.queue and r.priority = g.priority and r.run_at = g.run_at and r.id = g.id;
  insert into shape_split_trigger.ready
  select n.queue, n.priority, n.run_at, n.id from new_rows n where n.state = 0
  except all
  select o.queue, o.priority, o.run_at, o.id from old_rows o where o.state = 0;
  delete from shape_split_trigger.lease l
   using (select o.lease_expires_at, o.id from old_rows o where o.state = 1
          except all
          select n.lease_expires_at, n.id from new_rows n where n.state = 1) g
   where l.expires_at = g.lease_expires_at and l.id = g.id;
  insert into shape_split_trigger.lease
  select n.lease_expires_at, n.id from new_rows n where n.state = 1
  except all
  select o.lease_expires_at, o.id from old_rows o where o.state = 1;
  insert into shape_split_trigger.finished
  select n.state, n.finished_at, n.id from new_rows n where n.finished_at is not null
  except all
  select o.state, o.finished_at, o.id from old_rows o where o.finished_at is not null;
  return null;
end $$;

create trigger job_inserted after insert on shape_split_trigger.job
  referencing new table as new_rows for each statement
  execute function shape_split_trigger.inserted();
create trigger job_updated after update on shape_split_trigger.job
  referencing old table as old_rows new table as new_rows for each statement
  execute function shape_split_trigger.updated();

create function shape_split_trigger.enqueue(p_key text) returns bigint
language plpgsql as $$
declare v_id bigint;
begin
  insert into shape_split_trigger.job (key) values (p_key) on conflict do nothing
  returning id into v_id;
  return v_id;
end $$;

create function shape_split_trigger.enqueue_many(p_keys text[]) returns setof bigint
language plpgsql as $$
begin
  return query insert into shape_split_trigger.job (key) select k from unnest(p_keys) k
               on conflict do nothing returning id;
end $$;

create function shape_split_trigger.claim(p_limit integer, p_lease_s float8, p_hint text)
returns table (id bigint, claim bigint, pos text)
language plpgsql as $$
begin
  return query
    update shape_split_trigger.job j
       set state = 1, attempt = j.attempt + 1, claim = j.claim + 1,
           lease_expires_at = now() + make_interval(secs => p_lease_s)
     where j.id = any (array(
             select c.id from shape_split_trigger.ready r
               join shape_split_trigger.job c on c.id = r.id
              where r.queue = 'default' and r.run_at <= now() and c.state = 0
              order by r.priority, r.run_at, r.id
              limit p_limit for update of c skip locked))
    returning j.id, j.claim, null::text;
end $$;

create function shape_split_trigger.ack(p_ids bigint[], p_claims bigint[]) returns setof bigint
language plpgsql as $$
begin
  return query
    update shape_split_trigger.job j set state = 2, finished_at = now(), lease_expires_at = null
      from unnest(p_ids, p_claims) as u(id, claim)
     where j.id = u.id and j.claim = u.claim and j.state = 1
    returning j.id;
end $$;

create function shape_split_trigger.succeeded() returns bigint
language sql as $$ select count(*) from shape_split_trigger.job where state = 2 $$;

-- outcome: lean's live table, and the ack moves the job out of it into an outcome table
-- (in an engine: partitioned by finish time, so retention drops partitions). A key stays
-- deduped while its outcome is kept: the enqueue checks the outcome table too.
create schema if not exists shape_outcome;
create table shape_outcome.job (like shape_lean.job including all);
create table shape_outcome.outcome (
  id          bigint primary key,
  name        text not null,
  key         text not null,
  result      jsonb,
  finished_at timestamptz not null
);
create unique index on shape_outcome.outcome (name, key);

create function shape_outcome.enqueue(p_key text) returns bigint
language plpgsql as $$
declare v_id bigint;
begin
  if exists (select from shape_outcome.outcome o where o.name = 'bench.noop' and o.key = p_key) then
    return null;
  end if;
  insert into shape_outcome.job (key) values (p_key) on conflict do nothing returning id into v_id;
  return v_id;
end $$;

create function shape_outcome.enqueue_many(p_keys text[]) returns setof bigint
language plpgsql as $$
begin
  return query insert into shape_outcome.job (key)
               select k from unnest(p_keys) k
                where not exists (select from shape_outcome.outcome o
                                   where o.name = 'bench.noop' and o.key = k)
               on conflict do nothing returning id;
end $$;

create function shape_outcome.claim(p_limit integer, p_lease_s float8, p_hint text)
returns table (id bigint, claim bigint, pos text)
language plpgsql as $$
begin
  return query
    update shape_outcome.job j
       set state = 1, attempt = j.attempt + 1, claim = j.claim + 1,
           lease_expires_at = now() + make_interval(secs => p_lease_s)
     where j.id = any (array(select c.id from shape_outcome.job c
                              where c.queue = 'default' and c.state = 0 and c.run_at <= now()
                              order by c.priority, c.run_at, c.id
                              limit p_limit for update skip locked))
    returning j.id, j.claim, null::text;
end $$;

create function shape_outcome.ack(p_ids bigint[], p_claims bigint[]) returns setof bigint
language plpgsql as $$
begin
  return query
    with gone as (
      delete from shape_outcome.job j using unnest(p_ids, p_claims) as u(id, claim)
       where j.id = u.id and j.claim = u.claim and j.state = 1
      returning j.id, j.name, j.key
    )
    insert into shape_outcome.outcome (id, name, key, finished_at)
    select g.id, g.name, g.key, now() from gone g
    returning outcome.id;
end $$;

create function shape_outcome.succeeded() returns bigint
language sql as $$ select count(*) from shape_outcome.outcome $$;

-- Every shape's functions keep one generic plan per session, as the engine's hot-path
-- functions do (sql/30_claim.sql): the study compares storage, not planning.
do $$
declare f regprocedure;
begin
  for f in select p.oid::regprocedure from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname like 'shape\_%' and p.prokind = 'f' and p.prorettype <> 'trigger'::regtype
  loop
    execute format('alter function %s set plan_cache_mode = force_generic_plan', f);
  end loop;
end $$;
