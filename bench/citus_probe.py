"""How far the engine runs distributed: a probe, not the distributed mode
(`python -m bench.citus_probe`, `make citus-probe`; docs/design/citus.md, "What the
probe finds").

On a local cluster of its own (a coordinator and two worker nodes), in a database of
its own on every node, it
installs sqljobs, distributes job, step, event_wait and slot (co-located, by the job's
bucket, with the bucket in every key), makes job_type, queue and limit
reference tables, runs the hot functions with custom plans, puts the engine's functions
on every node, loads pgTAP, and runs
every file of sqltests/, printing per file the assertions that passed and failed, or
the error that stopped it and the engine function it came from. It drops what the
distributed mode replaces with something else (the foreign keys to jobs.job from
tables that stay local, the unique singleton and debounce groups, which span buckets),
so what fails is what the engine's statements still need.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import psycopg
from pytest_pgtap.pgtap import Runner
from tests.harness.citus import LocalCluster, local_cluster

from sqljobs._schema import migrate

ROOT = Path(__file__).resolve().parent.parent
SQLTESTS = ROOT / "sqltests"
DATABASE = "sqljobs_probe"

DISTRIBUTE = """
set citus.enable_ddl_propagation = on;
-- tables that stay local cannot reference a distributed one
alter table jobs.job_fork drop constraint job_fork_job_id_fkey;
alter table jobs.webhook_attempt drop constraint webhook_attempt_job_id_fkey;
-- Distributed by the bucket (jobs.job.bucket, the job's id & 255, written by every
-- insert): every unique key and reference between the four tables holds it.
alter table jobs.step drop constraint step_job_id_fkey;
alter table jobs.event_wait drop constraint event_wait_job_id_fkey;
update jobs.job set bucket = id & 255 where bucket is null;
alter table jobs.job alter column bucket set not null;
alter table jobs.step alter column bucket set not null;
alter table jobs.event_wait alter column bucket set not null;
alter table jobs.slot alter column bucket set not null;
alter table jobs.job drop constraint job_pkey, add primary key (id, bucket);
alter table jobs.step drop constraint step_pkey, add primary key (job_id, name, bucket);
alter table jobs.event_wait drop constraint event_wait_pkey,
  add primary key (job_id, step, bucket);
alter table jobs.slot drop constraint slot_pkey, add primary key (grp, job_id, bucket);
drop index jobs.job_key_idx;
create unique index job_key_idx on jobs.job (key, name, (coalesce(tenant, '')), bucket);
-- singleton and debounce groups span buckets for jobs without a tenant: lock rows in
-- the design (docs/design/citus.md), not built
drop index jobs.job_singleton_idx;
drop index jobs.job_debounce_idx;
select create_distributed_table('jobs.job', 'bucket', shard_count => 32);
select create_distributed_table('jobs.step', 'bucket', colocate_with => 'jobs.job');
select create_distributed_table('jobs.event_wait', 'bucket', colocate_with => 'jobs.job');
select create_distributed_table('jobs.slot', 'bucket', colocate_with => 'jobs.job');
alter table jobs.step add foreign key (job_id, bucket) references jobs.job (id, bucket)
  on delete cascade;
alter table jobs.event_wait add foreign key (job_id, bucket) references jobs.job (id, bucket)
  on delete cascade;
select create_reference_table('jobs.job_type');
select create_reference_table('jobs.queue');
select create_reference_table('jobs.limit');
"""

CUSTOM_PLANS = """
-- The hot functions keep one generic plan per session (their plans are most of a call on
-- one PostgreSQL), and the others may settle on one; Citus plans no multi-shard
-- statement from a generic plan with parameters ("could not create distributed plan"),
-- and routes a custom one by its values. The distributed mode runs every PL/pgSQL
-- function with custom plans.
do $p$
declare
  f regprocedure;
begin
  for f in select p.oid from pg_catalog.pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and p.prolang = (select l.oid from pg_catalog.pg_language l
                                where l.lanname = 'plpgsql') loop
    execute pg_catalog.format('alter function %s set plan_cache_mode = force_custom_plan', f);
  end loop;
end $p$;
"""

# The statements that lock rows of several buckets (claims, lease recovery, settles,
# verbs) run in rounds, one per bucket: what the distributing step does to
# jobs.distributed(), its security and grants as the roles step left them.
ROUNDS = """
create or replace function jobs.distributed() returns boolean language sql immutable
security definer set search_path = '' as $$ select true $$;
revoke all on function jobs.distributed() from public;
"""

# The engine's functions on every node: a statement Citus sends to a shard calls there
# the functions in it (jobs.now, jobs.text_set, jobs.retry_state ...). The beside mode's
# guard keeps them off the worker nodes (sqljobs/_schema/citus.py); distributed, they
# must be there. In one transaction whose settings reach the nodes, bodies unchecked: an
# SQL function's body names tables that stay on the coordinator.
PROPAGATE = ("set local citus.propagate_set_commands = 'local'",
             "set local check_function_bodies = off",
             """do $p$
                declare f regprocedure;
                begin
                  for f in select p.oid from pg_catalog.pg_proc p
                            where p.pronamespace = 'jobs'::regnamespace and p.prokind = 'f' loop
                    perform create_distributed_function(f);
                  end loop;
                end $p$""")


def distribute(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Distribute a fresh install on a Citus coordinator as the probe does (`conn`:
    autocommit): the tables, the rounds, the functions on every node."""
    conn.execute(DISTRIBUTE)
    # (each a transaction of its own: Citus refuses a function command after a parallel
    # multi-shard one in the same transaction)
    conn.execute(CUSTOM_PLANS)
    conn.execute(ROUNDS)
    with conn.transaction():
        for statement in PROPAGATE:
            conn.execute(statement)  # type: ignore[arg-type]  # literals


def first_problem(lines: list[str]) -> str:
    for line in lines:
        if line.startswith("not ok") or re.match(r"#\s+(ERROR|error|Failed)", line):
            return line.strip()[:160]
    return ""


def probe(cluster: LocalCluster, names: list[str]) -> int:
    """Runs the files on a distributed install in a database of its own on every node of
    the cluster (Citus keeps its node list per database); answers how many passed."""
    for node in cluster.nodes:
        with psycopg.connect(node.dsn("postgres"), autocommit=True) as admin:
            admin.execute(f"drop database if exists {DATABASE} with (force)")
    cluster.create_database(DATABASE)
    dsn = cluster.nodes[0].dsn(DATABASE)
    migrate.upgrade(dsn)
    clean = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create extension if not exists pgtap")
        distribute(conn)
        conn.execute((SQLTESTS / "_helpers.sql").read_bytes())
        runner = Runner(conn)
        for name in names:
            try:
                lines = runner.run((SQLTESTS / name).read_text(encoding="utf-8"))
            except psycopg.Error as exc:
                # the innermost engine function the failing statement ran in
                where = re.findall(r"function (jobs\.\w+)\(", exc.diag.context or "")
                print(f"{name:45} ERROR {exc.diag.message_primary} "
                      f"(in {where[0] if where else '?'})", flush=True)
                continue
            ok = sum(1 for line in lines if line.startswith("ok "))
            bad = sum(1 for line in lines if line.startswith("not ok"))
            clean += bad == 0
            print(f"{name:45} {ok:4} ok {bad:4} not ok  {first_problem(lines)}", flush=True)
    return clean


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.citus_probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", action="append", help="only these sqltests files")
    a = p.parse_args()
    names = a.file or sorted(path.name for path in SQLTESTS.glob("test_*.sql"))
    with tempfile.TemporaryDirectory(prefix="sqljobs-citus-probe-") as root, \
            local_cluster(Path(root) / "cluster") as cluster:
        clean = probe(cluster, names)
    print(f"{clean} of {len(names)} files pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
