"""Shared by the runtime drivers (stdlib + psycopg only: each driver runs in its own
system's virtualenv, so nothing here may import sqljobs, bench or a peer).

A driver owns one fresh database and does, with its system's public Python API:
  install   the system's schema (untimed)
  drain     enqueue --jobs no-op jobs in bulk (untimed), ANALYZE, then start the
            system's own worker in-process (asyncio, --concurrency) and time from the
            worker's start to the moment the database holds every job as settled
  latency   start the worker, run one warm-up job, idle 0.5 s, then enqueue --jobs
            jobs --interval-ms apart from a task on the same loop; each payload carries
            time.time() taken just before its enqueue call, the handler records its own
            start minus that
and prints one line `RESULT {json}` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg


def args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=("drain", "latency"), required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--interval-ms", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=300.0)
    return p.parse_args()


def run_id() -> str:
    return uuid.uuid4().hex[:8]


class Recorder:
    """What the no-op handlers report: how many ran, and (latency) their lags."""

    def __init__(self) -> None:
        self.started = 0
        self.lags_ms: list[float] = []
        self.target = 0
        self.reached = asyncio.Event()

    def expect(self, n: int) -> None:
        self.started, self.target = 0, n
        self.lags_ms = []
        self.reached.clear()

    def ran(self, enqueued_at: float | None = None) -> None:
        now = time.time()
        if enqueued_at:
            self.lags_ms.append((now - enqueued_at) * 1000.0)
        self.started += 1
        if self.started >= self.target:
            self.reached.set()


async def scalar(dsn: str, query: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(query)
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def analyze(dsn: str) -> None:
    """Planner statistics after the pre-fill (the server runs without autovacuum)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("analyze")


async def wait_settled(dsn: str, query: str, n: int, timeout: float) -> float:
    """Poll `query` (a count of settled jobs) every 2 ms until it reaches n; answers
    perf_counter() at that moment."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            cur = await conn.execute(query, prepare=True)
            row = await cur.fetchone()
            if row and int(row[0]) >= n:
                return time.perf_counter()
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {row[0] if row else 0}/{n} settled")
            await asyncio.sleep(0.002)


async def drain(a: argparse.Namespace, rec: Recorder, start_worker: Callable[[], Any],
                stop_worker: Callable[[Any], Awaitable[None]], settled_query: str,
                ) -> dict[str, Any]:
    """Time a started-from-cold worker over the pre-filled jobs until all are settled."""
    await analyze(a.dsn)
    rec.expect(a.jobs)
    t0 = time.perf_counter()
    handle = start_worker()
    await asyncio.wait_for(rec.reached.wait(), a.timeout)
    handlers_done = time.perf_counter()
    t1 = await wait_settled(a.dsn, settled_query, a.jobs, a.timeout)
    await stop_worker(handle)
    settled = await scalar(a.dsn, settled_query)
    if settled != a.jobs or rec.started != a.jobs:
        raise RuntimeError(f"drain: {settled} settled, {rec.started} handler runs; "
                           f"expected {a.jobs}")
    return {"jobs": a.jobs, "seconds": t1 - t0, "jobs_per_s": a.jobs / (t1 - t0),
            "handlers_seconds": handlers_done - t0, "settled": settled}


async def latency(a: argparse.Namespace, rec: Recorder, start_worker: Callable[[], Any],
                  stop_worker: Callable[[Any], Awaitable[None]],
                  enqueue: Callable[[int, float], Awaitable[None]]) -> dict[str, Any]:
    rec.expect(1)
    handle = start_worker()
    await enqueue(-1, 0.0)  # warm-up: the worker has claimed and run once
    await asyncio.wait_for(rec.reached.wait(), 30)
    await asyncio.sleep(0.5)  # idle
    rec.expect(a.jobs)
    start = time.perf_counter()
    for i in range(a.jobs):
        delay = start + i * a.interval_ms / 1000.0 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await enqueue(i, time.time())
    await asyncio.wait_for(rec.reached.wait(), a.timeout)
    await stop_worker(handle)
    lags = sorted(rec.lags_ms)
    if len(lags) != a.jobs:
        raise RuntimeError(f"latency: {len(lags)} lags recorded, expected {a.jobs}")
    q = statistics.quantiles(lags, n=100, method="inclusive")
    return {"jobs": a.jobs, "p50_ms": q[49], "p95_ms": q[94], "p99_ms": q[98],
            "max_ms": lags[-1], "mean_ms": statistics.fmean(lags)}


def emit(result: dict[str, Any], package: str) -> None:
    from importlib.metadata import version

    result["version"] = version(package)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
