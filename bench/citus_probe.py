"""How far the pgTAP suite runs on the distributed mode (`python -m bench.citus_probe`,
`make citus-probe`; docs/design/citus.md, "What the probe finds").

On a local cluster of its own (a coordinator and two worker nodes), in a database of
its own on every node, it installs sqljobs, distributes it as `sqljobs migrate
--distributed` does (sqljobs/_schema/distributed.py), loads pgTAP, and runs every file
of sqltests/, printing per file the assertions that passed and failed, or the error
that stopped it and the engine function it came from.
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
from sqljobs._schema.distributed import distribute

ROOT = Path(__file__).resolve().parent.parent
SQLTESTS = ROOT / "sqltests"
DATABASE = "sqljobs_probe"

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
        # the files' own writes over one connection per node, as the engine's functions
        # make theirs (sqljobs/_schema/distributed.py): Citus refuses a role or function
        # command in a transaction after a parallel multi-shard write, and several files
        # make their roles after their first jobs
        conn.execute("set citus.multi_shard_modify_mode = sequential")
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
