"""sqljobs beside Citus: the engine workloads on a Citus coordinator, against the same
server without the extension.

    python -m bench.citus --repeat 3        # make bench-citus

Starts a local cluster (tests/harness/citus.py: a coordinator and two worker nodes on
this machine, each a PostgreSQL with `shared_preload_libraries = 'citus'`), then runs
each SQL-level workload of the engine part (bench/workloads.py) in two databases of the
coordinator's server, interleaved in every repeat:

    citus   a database with the extension, the two workers added, and sqljobs installed
            by `sqljobs migrate` beside a distributed table (docs/howto-citus.md)
    plain   a database of the same server without the extension: the same binary,
            settings and disk, so the difference is what the extension costs the queue

Prints one line per measurement and a Markdown table of the medians; writes nothing. The
cluster's servers run with fsync and synchronous_commit off (a test cluster), so read
the ratio between the rows, not the rates against bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import psycopg
from tests.harness.citus import LocalCluster, local_cluster

from bench import db, workloads
from bench.adapters import get_adapter

WORKLOADS = ("enqueue_single", "enqueue_bulk", "drain")
PLACEMENTS = ("citus", "plain")


def _fresh(cluster: LocalCluster, placement: str, name: str) -> None:
    coordinator = cluster.nodes[0]
    for node in cluster.nodes if placement == "citus" else cluster.nodes[:1]:
        db.drop_database(node.dsn("postgres"), name)
    if placement == "plain":
        db.fresh_database(coordinator.dsn("postgres"), name)
        return
    cluster.create_database(name)
    with psycopg.connect(coordinator.dsn(name), autocommit=True) as conn:
        conn.execute("create table app_orders (id bigint primary key, total numeric);"
                     "select create_distributed_table('app_orders', 'id')")


def run(repeat: int, root: Path) -> dict[tuple[str, str], list[float]]:
    rates: dict[tuple[str, str], list[float]] = {}
    adapter = get_adapter("sqljobs")
    with local_cluster(root) as cluster:
        admin = cluster.nodes[0].dsn("postgres")
        for rep in range(1, repeat + 1):
            for name in WORKLOADS:
                for placement in PLACEMENTS:
                    dbname = f"bench_{placement}_{name}"
                    _fresh(cluster, placement, dbname)
                    m = workloads.measure(workloads.WORKLOADS[name], adapter, admin, dbname)
                    rate = m.jobs / m.seconds
                    rates.setdefault((name, placement), []).append(rate)
                    print(f"[{rep}/{repeat}] {name:15} {placement:6} {rate:10,.0f} jobs/s "
                          f"({m.jobs} jobs, {m.seconds:.2f} s, {m.commits} commits)",
                          flush=True)
    return rates


def render(rates: dict[tuple[str, str], list[float]], repeat: int) -> str:
    out = [f"Median jobs/s of {repeat} repeats (min–max), load average "
           f"{db.load_average()} at the end.\n",
           "| workload | " + " | ".join(PLACEMENTS) + " | citus / plain |",
           "| --- | " + " | ".join("---" for _ in PLACEMENTS) + " | --- |"]
    for name in WORKLOADS:
        cells, medians = [], []
        for placement in PLACEMENTS:
            values = rates[(name, placement)]
            medians.append(statistics.median(values))
            cells.append(f"{medians[-1]:,.0f} ({min(values):,.0f}–{max(values):,.0f})")
        out.append(f"| {name} | " + " | ".join(cells) + f" | {medians[0] / medians[1]:.2f}× |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.citus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sqljobs-citus-bench-") as root:
        rates = run(args.repeat, Path(root) / "cluster")
    print(render(rates, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
