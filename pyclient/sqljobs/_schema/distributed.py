"""`sqljobs migrate --distributed`: the queue's tables distributed over a Citus cluster.

docs/design/citus.md is the design; docs/howto-citus.md, "Distributed mode", the manual.
On a Citus coordinator with sqljobs installed, this distributes `jobs.job`, `step`,
`event_wait` and `slot` by the job's bucket (the id's low 8 bits, a column every insert
writes since schema version 3), co-located, makes the configuration tables reference
tables, and switches the engine to rounds per shard (`jobs.distributed()`). Everything
else stays local to the coordinator.

It is a few transactions, not one: Citus refuses a command on functions after a
parallel multi-shard command in the same transaction. Each is idempotent, so running it
again (after an interruption, or after a later `sqljobs migrate` that brought new
functions) finishes or refreshes the job and changes nothing else:

  1. CHECK_AND_DISTRIBUTE refuses a database without Citus (SJ061), a worker node
     (SJ060), and live jobs made before schema version 3 (SJ062: their ids do not carry
     the bucket of their key, so dedupe across shards would miss them); then, unless
     `jobs.job` is distributed already, fills the bucket of older rows, adds it to every
     key and reference of the four tables and distributes them;
  2. CUSTOM_PLANS runs every PL/pgSQL function of the engine with custom plans (Citus
     plans no multi-shard statement from a generic plan with parameters) and its
     multi-shard writes over one connection per node (`citus.multi_shard_modify_mode =
     sequential`: a transaction that writes several shards at once and then one of
     them, as a limited claim does, is refused otherwise);
  3. ROUNDS makes `jobs.distributed()` answer true and `jobs.shard_buckets` the map of
     the shards (the buckets a round names to reach one whole shard), with the security
     and grants the roles step gave them; only a shard split changes the map, and
     running this again after one makes it anew;
  4. PROPAGATE puts the engine's functions on every node (a statement sent to a shard
     calls there the functions it names), with bodies unchecked there: an SQL
     function's body may name a table that stays on the coordinator.

Plain SQL throughout, so `sqljobs migrate --distributed --sql` prints it for review or
psql.
"""

from __future__ import annotations

import psycopg

DDL_PROPAGATION = "set local citus.enable_ddl_propagation = on;\n"
CHECK_AND_DISTRIBUTE = """\
do $distribute$
declare
  v_live bigint;
begin
  if not exists (select from pg_catalog.pg_extension where extname = 'citus') then
    raise exception using
      errcode = 'SJ061',
      message = 'the distributed mode needs the Citus extension in this database',
      hint = 'Create the extension (create extension citus) on a Citus coordinator, '
             'add its worker nodes, then run sqljobs migrate --distributed again.';
  end if;
  if (select groupid from pg_catalog.pg_dist_local_group) <> 0 then
    raise exception using
      errcode = 'SJ060',
      message = 'this database is a Citus worker node; sqljobs lives on the coordinator',
      hint = 'Run sqljobs migrate --distributed on the coordinator.';
  end if;
  if exists (select from pg_catalog.pg_dist_partition
              where logicalrelid = 'jobs.job'::pg_catalog.regclass) then
    return;  -- distributed already: the steps that follow refresh the functions
  end if;
  -- (the table locked first: no job made live between the check and the distributing)
  lock table jobs.job in exclusive mode;
  select count(*) into v_live from jobs.job
   where bucket is null and state in ('ready', 'running', 'parked', 'interrupted');
  if v_live > 0 then
    raise exception using
      errcode = 'SJ062',
      message = pg_catalog.format(
        '%s live jobs were made before schema version 3; their ids do not carry a bucket',
        v_live),
      detail = 'Distributed, a job''s key is unique within its bucket; these jobs sit '
               'outside their key''s bucket, so a new enqueue of their key would not '
               'find them.',
      hint = 'Let them finish (or cancel them), then run sqljobs migrate --distributed '
             'again. Finished jobs are kept; one requeued later runs, but its key then '
             'dedupes only on its own shard.';
  end if;

  -- Rows made before version 3 (finished ones only, above) get the bucket their id
  -- routes to; every later insert wrote it.
  update jobs.job set bucket = id & 255 where bucket is null;
  update jobs.step set bucket = job_id & 255 where bucket is null;
  update jobs.event_wait set bucket = job_id & 255 where bucket is null;
  update jobs.slot set bucket = job_id & 255 where bucket is null;
  alter table jobs.job alter column bucket set not null;
  alter table jobs.step alter column bucket set not null;
  alter table jobs.event_wait alter column bucket set not null;
  alter table jobs.slot alter column bucket set not null;

  -- Tables that stay on the coordinator cannot reference a distributed one, and a
  -- distributed key or reference must hold the distribution column.
  alter table jobs.job_fork drop constraint job_fork_job_id_fkey;
  alter table jobs.webhook_attempt drop constraint webhook_attempt_job_id_fkey;
  alter table jobs.step drop constraint step_job_id_fkey;
  alter table jobs.event_wait drop constraint event_wait_job_id_fkey;
  alter table jobs.job drop constraint job_pkey, add primary key (id, bucket);
  alter table jobs.step drop constraint step_pkey, add primary key (job_id, name, bucket);
  alter table jobs.event_wait drop constraint event_wait_pkey,
    add primary key (job_id, step, bucket);
  alter table jobs.slot drop constraint slot_pkey, add primary key (grp, job_id, bucket);
  drop index jobs.job_key_idx;
  create unique index job_key_idx on jobs.job (key, name, (coalesce(tenant, '')), bucket);
  -- Singleton and debounce groups hold per bucket: exactly for jobs with a tenant (a
  -- tenant is one bucket), per bucket for jobs without one (docs/design/citus.md).
  drop index jobs.job_singleton_idx;
  create unique index job_singleton_idx
    on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')), bucket)
    where singleton and state in ('ready', 'running', 'parked', 'interrupted');
  drop index jobs.job_debounce_idx;
  create unique index job_debounce_idx
    on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')), bucket)
    where debounce_s is not null and state = 'ready' and attempt = 0;

  perform create_distributed_table('jobs.job', 'bucket',
            shard_count => pg_catalog.current_setting('sqljobs.shard_count')::integer);
  perform create_distributed_table('jobs.step', 'bucket', colocate_with => 'jobs.job');
  perform create_distributed_table('jobs.event_wait', 'bucket', colocate_with => 'jobs.job');
  perform create_distributed_table('jobs.slot', 'bucket', colocate_with => 'jobs.job');
  alter table jobs.step add foreign key (job_id, bucket) references jobs.job (id, bucket)
    on delete cascade;
  alter table jobs.event_wait add foreign key (job_id, bucket)
    references jobs.job (id, bucket) on delete cascade;
  perform create_reference_table('jobs.job_type');
  perform create_reference_table('jobs.queue');
  perform create_reference_table('jobs.limit');
end
$distribute$;
"""

CUSTOM_PLANS = """\
do $custom_plans$
declare
  f regprocedure;
begin
  for f in select p.oid from pg_catalog.pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and p.prolang = (select l.oid from pg_catalog.pg_language l
                                where l.lanname = 'plpgsql') loop
    execute pg_catalog.format('alter function %s set plan_cache_mode = force_custom_plan', f);
    execute pg_catalog.format(
      'alter function %s set citus.multi_shard_modify_mode = sequential', f);
  end loop;
end
$custom_plans$;
"""

ROUNDS = """\
create or replace function jobs.distributed() returns boolean language sql immutable
security definer set search_path = '' as $$ select true $$;
revoke all on function jobs.distributed() from public;
do $shard_map$
declare
  v_map text[];
begin
  -- per bucket, the buckets of its shard (a round names them all: Citus routes a
  -- statement on `bucket = any (...)` to one shard when they share it)
  with b as (select s::smallint as bucket,
                    get_shard_id_for_distribution_column('jobs.job', s::smallint) as shard
               from pg_catalog.generate_series(0, 255) s),
       g as (select b.shard, pg_catalog.array_agg(b.bucket order by b.bucket) as buckets
               from b group by b.shard)
  select pg_catalog.array_agg(g.buckets::text order by b.bucket) into v_map
    from b join g on g.shard = b.shard;
  execute pg_catalog.format($f$
    create or replace function jobs.shard_buckets(p_bucket smallint) returns smallint[]
    language sql immutable security definer set search_path = ''
    as $b$ select (%L::text[])[p_bucket + 1]::smallint[] $b$$f$, v_map);
end
$shard_map$;
revoke all on function jobs.shard_buckets(smallint) from public;
"""

# Citus sends a propagated SET to the nodes as the client's whole query string, so each
# statement of a step goes on its own (a DO block must not run on the nodes).
PROPAGATE_SETTINGS = ("set local citus.propagate_set_commands = 'local';\n",
                      "set local check_function_bodies = off;\n")
PROPAGATE = """\
do $propagate$
declare
  f regprocedure;
begin
  for f in select p.oid from pg_catalog.pg_proc p
            where p.pronamespace = 'jobs'::regnamespace and p.prokind = 'f' loop
    perform create_distributed_function(f);
  end loop;
end
$propagate$;
"""

STEPS = ((DDL_PROPAGATION, CHECK_AND_DISTRIBUTE), (CUSTOM_PLANS,), (ROUNDS,),
         (*PROPAGATE_SETTINGS, PROPAGATE))
DEFAULT_SHARD_COUNT = 32


def distribute(conn: psycopg.Connection[tuple[object, ...]],
               shard_count: int = DEFAULT_SHARD_COUNT) -> None:
    """Distribute (or refresh) the sqljobs install `conn` is connected to, each step in a
    transaction of its own (`conn`: autocommit). Raises the refusals above, translated
    by the caller."""
    for step in STEPS:
        with conn.transaction():
            conn.execute("select pg_catalog.set_config('sqljobs.shard_count', %s, true)",
                         (str(shard_count),))
            for statement in step:
                conn.execute(statement.encode())


def render_sql(shard_count: int = DEFAULT_SHARD_COUNT) -> str:
    """The steps as a script for psql, each in its own transaction."""
    return "".join(f"begin;\nset local sqljobs.shard_count = {shard_count};\n"
                   f"{''.join(step)}commit;\n" for step in STEPS)


def is_distributed(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    """Whether `jobs.job` is a distributed table (a later `sqljobs migrate` then refreshes
    the steps after its revisions)."""
    row = conn.execute("""select exists (select from pg_catalog.pg_extension
                                          where extname = 'citus')""").fetchone()
    if not (row and row[0]):
        return False
    row = conn.execute("""select exists (select from pg_catalog.pg_dist_partition
                                          where logicalrelid = 'jobs.job'::regclass)""").fetchone()
    return bool(row and row[0])
