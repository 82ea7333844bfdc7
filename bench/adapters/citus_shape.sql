-- The distributed shape of docs/design/citus.md, as a prototype at the SQL level
-- (python -m bench.citus). Not an engine: it keeps what the hot path needs (a dedupe
-- key, a claim token that fences the ack, a lease, a place in line) and leaves out
-- tenancy, limits, steps and notifications, like the storage shapes of shapes.sql.
--
-- Distribution column: `bucket`, a hash of the tenant into BUCKETS buckets; the job's id
-- carries its bucket in its low 8 bits, so a call by id finds its shard without a lookup.
-- Both unique namespaces contain the tenant, so both hold per shard. The claim takes
-- from one bucket per call (a single-shard FOR UPDATE SKIP LOCKED); the client rotates.
-- bench/citus.py replaces :buckets, then distributes the two tables (co-located), and
-- for the `delegated` placement makes claim and ack distributed functions (they run on
-- the node of their bucket's shard); left local, the same tables are the baseline of the
-- same shape on one PostgreSQL.

create schema shape_citus;

create sequence shape_citus.job_seq;

create table shape_citus.job (
  bucket           integer not null,
  id               bigint not null,
  name             text not null,
  tenant           text not null default '',
  key              text not null,
  queue            text not null,
  priority         smallint not null default 0,
  run_at           timestamptz not null default now(),
  state            text not null default 'ready',
  payload          jsonb,
  claim            bigint,
  lease_expires_at timestamptz,
  result           jsonb,
  primary key (bucket, id),
  unique (bucket, name, tenant, key)
) with (fillfactor = 80);

-- What the claim takes from: the backlog only (the split shape of engine-hot-path.md).
create table shape_citus.ready (
  bucket   integer not null,
  queue    text not null,
  priority smallint not null,
  run_at   timestamptz not null,
  id       bigint not null,
  primary key (bucket, id)
);
create index ready_pick on shape_citus.ready (bucket, queue, priority, run_at, id);

create function shape_citus.bucket_of(p_tenant text) returns integer
language sql immutable as $$ select abs(hashtext(p_tenant)) % :buckets $$;

-- PL/pgSQL throughout: Citus cannot plan a SQL function's statements that use its
-- parameters ("could not create distributed plan").
create function shape_citus.enqueue(p_name text, p_tenant text, p_key text, p_queue text,
                                    p_payload jsonb)
returns bigint language plpgsql as $$
declare
  v_bucket integer := shape_citus.bucket_of(p_tenant);
  v_id     bigint := (nextval('shape_citus.job_seq') << 8) | v_bucket;
begin
  insert into shape_citus.job (bucket, id, name, tenant, key, queue, payload)
  values (v_bucket, v_id, p_name, p_tenant, p_key, p_queue, p_payload)
  on conflict (bucket, name, tenant, key) do nothing;
  if not found then
    return null;  -- deduped
  end if;
  insert into shape_citus.ready values (v_bucket, p_queue, 0, now(), v_id);
  return v_id;
end $$;

create function shape_citus.enqueue_many(p_name text, p_keys text[], p_tenants text[],
                                         p_queue text)
returns integer language plpgsql as $$
declare
  v_count integer;
begin
  with specs as (
    select k.key, k.tenant, shape_citus.bucket_of(k.tenant) as bucket,
           nextval('shape_citus.job_seq') as seq
      from unnest(p_keys, p_tenants) as k(key, tenant)),
  made as (
    insert into shape_citus.job (bucket, id, name, tenant, key, queue, payload)
    select s.bucket, (s.seq << 8) | s.bucket, p_name, s.tenant, s.key, p_queue, '{}'
      from specs s
    on conflict (bucket, name, tenant, key) do nothing
    returning bucket, id)
  insert into shape_citus.ready select m.bucket, p_queue, 0, now(), m.id from made m;
  get diagnostics v_count = row_count;
  return v_count;
end $$;

create function shape_citus.claim(p_bucket integer, p_queue text, p_limit integer,
                                  p_lease_s double precision)
returns table (id bigint, claim bigint)
language plpgsql as $$
declare
  v_claim bigint := (random() * 9e15)::bigint;
begin
  return query
  with picked as (
    delete from shape_citus.ready r
     where r.bucket = p_bucket and r.id in (
       select r2.id from shape_citus.ready r2
        where r2.bucket = p_bucket and r2.queue = p_queue and r2.run_at <= now()
        order by r2.priority, r2.run_at, r2.id
        limit p_limit
        for update skip locked)
    returning r.id)
  update shape_citus.job j
     set state = 'running', claim = v_claim,
         lease_expires_at = now() + p_lease_s * interval '1 second'
    from picked
   where j.bucket = p_bucket and j.id = picked.id
  returning j.id, v_claim;
end $$;

create function shape_citus.ack(p_bucket integer, p_ids bigint[], p_claim bigint)
returns integer language plpgsql as $$
declare
  v_count integer;
begin
  update shape_citus.job j
     set state = 'succeeded', lease_expires_at = null
   where j.bucket = p_bucket and j.id = any (p_ids) and j.claim = p_claim
     and j.state = 'running';
  get diagnostics v_count = row_count;
  return v_count;
end $$;
