"""sqljobs and Citus on one machine: what the extension costs the engine as it ships, and
what the distributed shape of docs/design/citus.md costs against the same shape local.

    python -m bench.citus --repeat 5        # make bench-citus

Starts a local cluster (tests/harness/citus.py: a coordinator and two worker nodes on
this machine, each a PostgreSQL with `shared_preload_libraries = 'citus'`), then, in
databases of the coordinator's server, interleaved in every repeat:

beside (the engine; the engine part's SQL-level workloads, bench/workloads.py, and the
        side-by-side latency workload: 200 jobs 10 ms apart through the real worker,
        pickup p50 and p99)
    distributed  as citus, then its hot tables distributed by bucket over the two
               worker nodes, claims and recovery in rounds (`sqljobs migrate
               --distributed`)
    citus      a database with the extension, the two workers added, a distributed table,
               and sqljobs installed by `sqljobs migrate` (docs/howto-citus.md)
    plain      a database of the same server without the extension
shape (the prototype of bench/adapters/citus_shape.sql, BUCKETS buckets)
    local      its tables local to the coordinator
    routed     distributed by bucket; claim and ack run on the coordinator, which routes
               each of their statements to the bucket's shard
    delegated  distributed; claim and ack are distributed functions, run on the node of
               their bucket's shard

Prints one line per measurement and a Markdown table of the medians; writes nothing. The
cluster's servers run with fsync and synchronous_commit off (a test cluster) and every
node shares the same 2 cores: read the ratios between rows of one run, and see
docs/design/citus.md for what one box can and cannot show.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from tests.harness.citus import LocalCluster, local_cluster

from bench import db, workloads
from bench.adapters import get_adapter
from bench.adapters.sqljobs_sql import SqljobsSql
from sqljobs._schema.distributed import distribute

BESIDE_WORKLOADS = ("enqueue_single", "enqueue_bulk", "drain")
BESIDE = ("distributed", "citus", "plain")
SHAPE = ("local", "routed", "delegated")
SHAPE_SQL = Path(__file__).resolve().parent / "adapters" / "citus_shape.sql"
LATENCY_DRIVER = Path(__file__).resolve().parent / "runtime_drivers" / "sqljobs_driver.py"
BUCKETS = 32
TENANTS = 64
SINGLE_JOBS, BULK_JOBS, BULK_BATCH, DRAIN_JOBS = 2_000, 50_000, 1_000, 20_000
DRAIN_CLIENTS, DRAIN_BATCH = 2, 50

Rates = dict[tuple[str, str], list[float]]


# -- databases -----------------------------------------------------------------------------

class DistributedSqljobs(SqljobsSql):
    """The SQL-level adapter, its install distributed (`sqljobs migrate --distributed`)."""

    def install(self, dsn: str) -> None:
        super().install(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            distribute(conn)


def _fresh(cluster: LocalCluster, with_citus: bool, name: str) -> str:
    """A new database `name` on the coordinator (and, with Citus, on every node)."""
    for node in cluster.nodes if with_citus else cluster.nodes[:1]:
        db.drop_database(node.dsn("postgres"), name)
    if with_citus:
        cluster.create_database(name)
    else:
        db.fresh_database(cluster.nodes[0].dsn("postgres"), name)
    return cluster.nodes[0].dsn(name)


def _install_shape(dsn: str, placement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SHAPE_SQL.read_text().replace(":buckets", str(BUCKETS)))  # type: ignore[arg-type]
        if placement == "local":
            return
        conn.execute(f"set citus.shard_count = {BUCKETS}")  # type: ignore[arg-type]
        conn.execute("select create_distributed_table('shape_citus.job', 'bucket')")
        conn.execute("select create_distributed_table('shape_citus.ready', 'bucket', "
                     "colocate_with => 'shape_citus.job')")
        if placement == "delegated":
            for function in ("shape_citus.claim(integer, text, integer, double precision)",
                             "shape_citus.ack(integer, bigint[], bigint)"):
                conn.execute("select create_distributed_function(%s, '$1', "
                             "colocate_with => 'shape_citus.job')", (function,))


# -- the shape's workloads -----------------------------------------------------------------

def _tenant(i: int) -> str:
    return f"tenant-{i % TENANTS}"


def _shape_enqueue_single(dsn: str) -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        for i in range(SINGLE_JOBS):
            conn.execute("select shape_citus.enqueue('bench', %s, %s, 'q', '{}')",
                         (_tenant(i), f"k{i}"))
        return SINGLE_JOBS, time.perf_counter() - start


def _enqueue_many(conn: psycopg.Connection[tuple[object, ...]], first: int, n: int) -> None:
    keys = [f"k{i}" for i in range(first, first + n)]
    conn.execute("select shape_citus.enqueue_many('bench', %s, %s, 'q')",
                 (keys, [_tenant(i) for i in range(first, first + n)]))


def _shape_enqueue_bulk(dsn: str) -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        for first in range(0, BULK_JOBS, BULK_BATCH):
            _enqueue_many(conn, first, BULK_BATCH)
        return BULK_JOBS, time.perf_counter() - start


def _shape_drain(dsn: str) -> tuple[int, float]:
    """DRAIN_CLIENTS clients claim DRAIN_BATCH at a time from one bucket, ack the batch
    in one call, and move to the next bucket when theirs is empty; each stops after a
    whole round of empty buckets."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for first in range(0, DRAIN_JOBS, BULK_BATCH):
            _enqueue_many(conn, first, BULK_BATCH)
    acked = [0] * DRAIN_CLIENTS

    def client(index: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            bucket, empty = index * BUCKETS // DRAIN_CLIENTS, 0
            while empty < BUCKETS:
                rows = conn.execute("select * from shape_citus.claim(%s, 'q', %s, 30)",
                                    (bucket, DRAIN_BATCH)).fetchall()
                if not rows:
                    empty += 1
                    bucket = (bucket + 1) % BUCKETS
                    continue
                empty = 0
                conn.execute("select shape_citus.ack(%s, %s, %s)",
                             (bucket, [r[0] for r in rows], rows[0][1]))
                acked[index] += len(rows)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(DRAIN_CLIENTS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    if sum(acked) != DRAIN_JOBS:
        raise AssertionError(f"the drain acked {sum(acked)} of {DRAIN_JOBS} jobs")
    return DRAIN_JOBS, seconds


SHAPE_WORKLOADS: dict[str, Callable[[str], tuple[int, float]]] = {
    "enqueue_single": _shape_enqueue_single,
    "enqueue_bulk": _shape_enqueue_bulk,
    "drain": _shape_drain,
}


def _latency(dsn: str) -> tuple[float, float]:
    """Pickup p50 and p99 (ms) of the side-by-side latency workload on `dsn`."""
    out = subprocess.run(
        [sys.executable, str(LATENCY_DRIVER), "--workload", "latency", "--dsn", dsn,
         "--jobs", "200", "--interval-ms", "10", "--concurrency", "10"],
        capture_output=True, text=True, timeout=300, check=True)
    result = next(json.loads(line[len("RESULT "):]) for line in out.stdout.splitlines()
                  if line.startswith("RESULT "))
    return float(result["p50_ms"]), float(result["p99_ms"])


# -- the run -------------------------------------------------------------------------------

def _record(rates: Rates, key: tuple[str, str], jobs: int, seconds: float, line: str) -> None:
    rates.setdefault(key, []).append(jobs / seconds)
    print(f"{line} {jobs / seconds:10,.0f} jobs/s ({jobs} jobs, {seconds:.2f} s)", flush=True)


def _beside_database(cluster: LocalCluster, placement: str, dbname: str) -> str:
    dsn = _fresh(cluster, placement != "plain", dbname)
    if placement != "plain":
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create table app_orders (id bigint primary key, total numeric); "
                         "select create_distributed_table('app_orders', 'id')")
    return dsn


def run(repeat: int, root: Path) -> tuple[Rates, Rates, Rates]:
    beside: Rates = {}
    latency: Rates = {}
    shape: Rates = {}
    adapter = get_adapter("sqljobs")
    distributed = DistributedSqljobs()
    with local_cluster(root) as cluster:
        admin = cluster.nodes[0].dsn("postgres")
        for rep in range(1, repeat + 1):
            for name in BESIDE_WORKLOADS:
                for placement in BESIDE:
                    dbname = f"bench_{placement}_{name}"
                    _beside_database(cluster, placement, dbname)
                    m = workloads.measure(workloads.WORKLOADS[name],
                                          distributed if placement == "distributed" else adapter,
                                          admin, dbname)
                    _record(beside, (name, placement), m.jobs, m.seconds,
                            f"[{rep}/{repeat}] beside {name:15} {placement:9}")
            for placement in BESIDE:
                dsn = _beside_database(cluster, placement, f"bench_{placement}_latency")
                if placement == "distributed":
                    distributed.install(dsn)
                p50, p99 = _latency(dsn)
                latency.setdefault(("p50 ms", placement), []).append(p50)
                latency.setdefault(("p99 ms", placement), []).append(p99)
                print(f"[{rep}/{repeat}] beside latency         {placement:9} "
                      f"p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
            for name, body in SHAPE_WORKLOADS.items():
                for placement in SHAPE:
                    dsn = _fresh(cluster, placement != "local", f"shape_{placement}")
                    _install_shape(dsn, placement)
                    jobs, seconds = body(dsn)
                    _record(shape, (name, placement), jobs, seconds,
                            f"[{rep}/{repeat}] shape  {name:15} {placement:9}")
    return beside, latency, shape


def render(rates: Rates, workloads_: tuple[str, ...], placements: tuple[str, ...],
           title: str, unit: str = "jobs/s") -> str:
    base = placements[0] if title == "shape" else placements[-1]
    out = [f"{title}: median {unit} (min–max); ratio against `{base}`\n",
           "| workload | " + " | ".join(placements) + " |",
           "| --- | " + " | ".join("---" for _ in placements) + " |"]
    for name in workloads_:
        cells = []
        base_median = statistics.median(rates[(name, base)])
        for placement in placements:
            values = rates[(name, placement)]
            median = statistics.median(values)
            digits = 2 if unit == "ms" else 0
            cells.append(f"{median:,.{digits}f} ({min(values):,.{digits}f}–"
                         f"{max(values):,.{digits}f}) "
                         f"{median / base_median:.2f}×")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.citus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sqljobs-citus-bench-") as root:
        beside, latency, shape = run(args.repeat, Path(root) / "cluster")
    print(f"\n{args.repeat} repeats, load average {db.load_average()} at the end.\n")
    print(render(beside, BESIDE_WORKLOADS, BESIDE, "beside"))
    print(render(latency, ("p50 ms", "p99 ms"), BESIDE, "beside latency", "ms"))
    print(render(shape, tuple(SHAPE_WORKLOADS), SHAPE, "shape"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
