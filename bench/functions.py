"""Where a claim/ack cycle's time goes, per `jobs.*` function, at the SQL level
(`python -m bench.functions`). Not part of `python -m bench`; the profile behind
docs/design/engine-hot-path.md ("Planning per call") and docs/design/limits.md.

One connection, `track_functions = all`, in a fresh database per run:
  plain     claim --batch jobs, ack_many them; repeat until the queue is empty
  limited   the same under drain_limited's limits: a global concurrency of 100 and a
            key limit of 2 slots over 100 keys (every claim takes the limited path)
  single    one job at a time, each its own transaction: enqueue, claim (no recovery,
            as a woken worker claims), ack: the latency path
Prints jobs/s, the round trip per job of claim and ack, then each function's calls,
total and self time per job (a nested function's time is in its caller's total).
"""

from __future__ import annotations

import argparse
import json
import time

import psycopg

from bench import db
from bench.adapters.sqljobs_sql import ACK_MANY, SqljobsSql

CLAIM = "select id, claim from jobs.claim_v2(%s, %s, %s, %s, %s::jsonb)"
ENQUEUE = "select id, outcome from jobs.enqueue(%s, %s, %s::jsonb, %s::jsonb)"
KEYS = 100
LIMITS = (("bench.all", {"scope": "global", "concurrency": 100}),
          ("bench.keyed", {"scope": "key", "target": "bench.keyed", "key": "k",
                           "concurrency": 2}))
NAME = "sqljobs_bench_functions"


def run(admin_dsn: str, mode: str, jobs: int, batch: int) -> None:
    dsn = db.fresh_database(admin_dsn, NAME)
    try:
        SqljobsSql().install(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            if mode == "limited":
                for name, definition in LIMITS:
                    conn.execute("select jobs.limit_put(%s, %s::jsonb)",
                                 (name, json.dumps(definition)))
            if mode != "single":
                for i in range(0, jobs, 1000):
                    conn.execute("select count(*) from jobs.enqueue_many(%s::jsonb)", (json.dumps([
                        {"name": "bench.keyed", "queue": "default", "key": f"k{j}",
                         "payload": {"k": j % KEYS}} for j in range(i, min(jobs, i + 1000))]),))
            conn.execute("analyze")
            conn.execute("set track_functions = 'all'")
            conn.execute("select pg_stat_reset()")
            options = '{"recover": false}' if mode == "single" else "{}"
            claim_s = ack_s = 0.0
            start = time.perf_counter()
            for i in range(jobs if mode == "single" else jobs // batch + 1):
                if mode == "single":
                    conn.execute(ENQUEUE, ("bench.keyed", f"k{i}", "{}", '{"queue": "default"}'),
                                 prepare=True).fetchall()
                sent = time.perf_counter()
                rows = conn.execute(CLAIM, (["default"], "w", batch, 30.0, options),
                                    prepare=True).fetchall()
                claim_s += time.perf_counter() - sent
                if not rows:
                    break
                sent = time.perf_counter()
                conn.execute(ACK_MANY, ([r[0] for r in rows], [r[1] for r in rows]),
                             prepare=True).fetchall()
                ack_s += time.perf_counter() - sent
            seconds = time.perf_counter() - start
            done = conn.execute("select count(*)::int from jobs.job "
                                "where state = 'succeeded'").fetchall()[0][0]
            if done != jobs:
                raise RuntimeError(f"{mode}: settled {done}, expected {jobs}")
            # this session's counts reach the shared statistics at its next flush
            conn.execute("select pg_stat_force_next_flush()")
            conn.execute("select pg_stat_clear_snapshot()")
            print(f"{mode}: {jobs / seconds:,.0f} jobs/s; per job: claim "
                  f"{claim_s / jobs * 1e6:.1f} µs, ack {ack_s / jobs * 1e6:.1f} µs "
                  "(round trips included)")
            for name, calls, total, own in conn.execute(
                    "select funcname, calls, total_time, self_time from pg_stat_user_functions "
                    "where schemaname = 'jobs' order by total_time desc limit 15"):
                print(f"  {name:24} {calls:7} calls  total {total * 1000 / jobs:7.1f} µs/job  "
                      f"self {own * 1000 / jobs:7.1f} µs/job")
    finally:
        db.drop_database(admin_dsn, NAME)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default=db.admin_dsn_from_env())
    p.add_argument("--mode", choices=("plain", "limited", "single"), default="plain")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100, help="claim size (single: 1)")
    a = p.parse_args()
    run(a.dsn, a.mode, a.jobs, 1 if a.mode == "single" else a.batch)


if __name__ == "__main__":
    main()
