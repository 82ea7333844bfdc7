"""What one sqljobs worker's claim/settle cycle costs at the SQL level, and what folding
the settle into the next claim would save (`python -m bench.cycle`). Not part of
`python -m bench`; an experiment behind a worker-runtime suggestion.

One connection, as the worker's claim loop and settler use it at concurrency C with
instant handlers (bench/runtime_drivers/sqljobs_profile.py shows the worker claiming
exactly C and acking exactly C, in lockstep):
  serial    claim C; ack_many those C; repeat           (2 round trips, 2 commits)
  folded    one statement: ack_many the previous C and claim the next C
                                                        (1 round trip, 1 commit)
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg

from bench import db, workloads
from bench.adapters.sqljobs_sql import ACK_MANY, CLAIM, LEASE_S, QUEUES, SqljobsSql

FOLDED = ("with acked as materialized (select count(*) as n from jobs.ack_many(%s, %s, null)) "
          "select c.id, c.claim from acked, jobs.claim_v2(%s, %s, %s, %s) as c")


def run(admin_dsn: str, mode: str, jobs: int, batch: int) -> float:
    adapter = SqljobsSql()
    dsn = db.fresh_database(admin_dsn, "sqljobs_bench_cycle")
    try:
        adapter.install(dsn)
        workloads.prefill(adapter, dsn, jobs)
        with psycopg.connect(dsn, autocommit=True) as conn:
            start = time.perf_counter()
            done = 0
            if mode == "serial":
                while rows := conn.execute(CLAIM, (QUEUES, "w", batch, LEASE_S),
                                           prepare=True).fetchall():
                    conn.execute(ACK_MANY, ([r[0] for r in rows], [r[1] for r in rows]),
                                 prepare=True).fetchall()
                    done += len(rows)
            else:
                ids: list[int] = []
                claims: list[int] = []
                while True:
                    rows = conn.execute(FOLDED, (ids, claims, QUEUES, "w", batch, LEASE_S),
                                        prepare=True).fetchall()
                    done += len(ids)
                    if not rows:
                        break
                    ids, claims = [r[0] for r in rows], [r[1] for r in rows]
            seconds = time.perf_counter() - start
        if done != jobs or adapter.count_succeeded(dsn) != jobs:
            raise RuntimeError(f"{mode}: settled {done}, expected {jobs}")
        return jobs / seconds
    finally:
        db.drop_database(admin_dsn, "sqljobs_bench_cycle")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dsn", default=db.admin_dsn_from_env())
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    rates: dict[str, list[float]] = {"serial": [], "folded": []}
    for rep in range(a.repeat):
        for mode in rates:
            rates[mode].append(run(a.dsn, mode, a.jobs, a.batch))
            print(f"[{rep + 1}/{a.repeat}] {mode:7} batch {a.batch}: "
                  f"{rates[mode][-1]:,.0f} jobs/s", flush=True)
    for mode, r in rates.items():
        print(f"{mode:7} median {statistics.median(r):,.0f} ({min(r):,.0f}–{max(r):,.0f}) jobs/s")
    ratio = statistics.median(rates["folded"]) / statistics.median(rates["serial"])
    print(f"folded ÷ serial: {ratio:.2f}")


if __name__ == "__main__":
    main()
