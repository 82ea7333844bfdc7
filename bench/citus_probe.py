"""How far the engine runs distributed: a probe, not the distributed mode
(`python -m bench.citus_probe`, `make citus-probe`; docs/design/citus.md, "What the
probe finds").

On the coordinator of a local cluster (its own, or a running one's given by
--coordinator: `make citus-cluster` prints the DSN), in a database of its own, it
installs sqljobs, distributes job, step, event_wait and slot (co-located, by the job's
id: see DISTRIBUTE for why not yet its bucket), makes job_type, queue and limit
reference tables, runs the hot functions with custom plans, loads pgTAP, and runs
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
from tests.harness.citus import local_cluster

from sqljobs._schema import migrate

ROOT = Path(__file__).resolve().parent.parent
SQLTESTS = ROOT / "sqltests"
DATABASE = "sqljobs_probe"

DISTRIBUTE = """
set citus.enable_ddl_propagation = on;
-- tables that stay local cannot reference a distributed one
alter table jobs.job_fork drop constraint job_fork_job_id_fkey;
alter table jobs.webhook_attempt drop constraint webhook_attempt_job_id_fkey;
-- Distributed by the job's id (job_id), where the design distributes by its bucket
-- (id & 255): Citus refuses a generated distribution column, so the bucket must be a
-- column every insert writes, which the engine does not do yet. Every statement
-- routes the same way (by id: one shard; by queue or state: all of them); what is lost
-- here besides is the dedupe across shards, whose unique key must hold the bucket.
drop index jobs.job_key_idx;
create index job_key_idx on jobs.job (key, name, (coalesce(tenant, '')));
drop index jobs.job_singleton_idx;
drop index jobs.job_debounce_idx;
select create_distributed_table('jobs.job', 'id', shard_count => 32);
select create_distributed_table('jobs.step', 'job_id', colocate_with => 'jobs.job');
select create_distributed_table('jobs.event_wait', 'job_id', colocate_with => 'jobs.job');
select create_distributed_table('jobs.slot', 'job_id', colocate_with => 'jobs.job');
select create_reference_table('jobs.job_type');
select create_reference_table('jobs.queue');
select create_reference_table('jobs.limit');
-- The hot functions keep one generic plan per session (their plans are most of a call on
-- one PostgreSQL); Citus plans no multi-shard statement from a generic plan with
-- parameters ("could not create distributed plan"), and routes a custom one by its
-- values. The distributed mode runs them with custom plans.
do $p$
declare
  f regprocedure;
begin
  for f in select p.oid from pg_catalog.pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and 'plan_cache_mode=force_generic_plan' = any (p.proconfig) loop
    execute pg_catalog.format('alter function %s set plan_cache_mode = force_custom_plan', f);
  end loop;
end $p$;
"""


def first_problem(lines: list[str]) -> str:
    for line in lines:
        if line.startswith("not ok") or re.match(r"#\s+(ERROR|error|Failed)", line):
            return line.strip()[:160]
    return ""


def probe(coordinator: str, names: list[str]) -> int:
    """Runs the files on a distributed install in a database of the coordinator; answers
    how many passed."""
    with psycopg.connect(coordinator, autocommit=True) as admin:
        admin.execute(f"drop database if exists {DATABASE} with (force)")
        admin.execute(f"create database {DATABASE}")
    dsn = re.sub(r"/[^/?]+(\?|$)", f"/{DATABASE}\\1", coordinator, count=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create extension citus")
    migrate.upgrade(dsn)
    clean = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create extension if not exists pgtap")
        conn.execute(DISTRIBUTE)
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
    p.add_argument("--coordinator",
                   help="DSN of a running cluster's coordinator (default: start a local one)")
    p.add_argument("--file", action="append", help="only these sqltests files")
    a = p.parse_args()
    names = a.file or sorted(path.name for path in SQLTESTS.glob("test_*.sql"))
    if a.coordinator:
        clean = probe(a.coordinator, names)
    else:
        with tempfile.TemporaryDirectory(prefix="sqljobs-citus-probe-") as root, \
                local_cluster(Path(root) / "cluster") as cluster:
            clean = probe(cluster.coordinator, names)
    print(f"{clean} of {len(names)} files pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
