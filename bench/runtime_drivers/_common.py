"""Shared by the Python drivers (stdlib + psycopg only: each driver runs in its own
system's virtualenv, so nothing here may import sqljobs, bench or a peer). The Node
driver (graphile_driver.cjs) follows the same protocol.

A driver is run once per (workload, repeat) on a fresh database of its own:

    python <system>_driver.py --workload W --dsn DSN [--jobs N] [--concurrency C] ...

installs its system's schema (untimed), does the workload through the system's public
API and prints one line `RESULT {json}` per measurement on stdout. Every result holds
"workload", "version" (the system's release) and "window": [t0, t1], the wall-clock
(time.time()) bounds of the timed part, from which the runner counts round trips when
it runs the driver through its counting proxy (bench/wire.py).

  enqueue_single  --jobs enqueues, one public-API call each, one after another, on one
                  connection; verified in the database afterwards
  enqueue_bulk    --jobs enqueues through the system's batch API in batches of --batch,
                  the batches' arguments built before the clock starts; verified
  drain           --jobs no-op jobs enqueued in bulk (untimed), ANALYZE, then the
                  system's own worker started in-process (--concurrency) and timed from
                  its start to the moment the database holds every job as settled
  drain_limited   drain, the jobs under a global concurrency limit of 10 x --concurrency
                  (a claimed job holds a slot, prefetched ones too) and a limit of 2
                  running per key, the payload's `k` taking 100 values (systems that
                  hold such limits in the claim)
  latency         the worker started, one warm-up job run, 0.5 s idle, then --jobs
                  jobs enqueued --interval-ms apart, each payload carrying time.time()
                  taken just before its enqueue call; the handler records its own start
                  minus that
  steps           one job whose handler runs --steps trivial durable steps (each
                  returns its index) and, on its first run, fails after the last one so
                  the system runs it again: prints two results, "step" (the first run,
                  per-step time) and "replay" (the second run over stored steps)
  sustained       the worker running while a producer enqueues --rate jobs/s for
                  --seconds (one batch call every 100 ms), --burst-factor times that
                  from --burst-at for --burst-seconds when --burst-at >= 0; per
                  --window seconds (10): jobs started, jobs enqueued and the p50/p99
                  of handler start minus enqueue time. The runner samples the
                  database's table sizes and dead tuples beside it
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

WORKLOADS = ("enqueue_single", "enqueue_bulk", "drain", "drain_limited", "latency", "steps",
             "sustained")


def args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=WORKLOADS, required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--interval-ms", type=float, default=10.0)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--variant", default="", help="a system-specific configuration")
    p.add_argument("--timeout", type=float, default=300.0)
    # sustained: the width of the series' windows, and an optional burst
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--burst-at", type=float, default=-1.0,
                   help="sustained: seconds in when the burst starts (negative: none)")
    p.add_argument("--burst-seconds", type=float, default=30.0)
    p.add_argument("--burst-factor", type=float, default=10.0)
    return p.parse_args()


def run_id() -> str:
    return uuid.uuid4().hex[:8]


class Recorder:
    """What the no-op handlers report: how many ran, and (latency) their lags."""

    def __init__(self) -> None:
        self.started = 0
        self.lags_ms: list[float] = []
        self.ran_at: list[float] = []
        self.target = 0
        self.reached = asyncio.Event()

    def expect(self, n: int) -> None:
        self.started, self.target = 0, n
        self.lags_ms, self.ran_at = [], []
        self.reached.clear()

    def ran(self, enqueued_at: float | None = None) -> None:
        now = time.time()
        if enqueued_at:
            self.lags_ms.append((now - enqueued_at) * 1000.0)
            self.ran_at.append(now)
        self.started += 1
        if self.started >= self.target:
            self.reached.set()


class StepRecorder:
    """What a `steps` handler reports. The handler calls begin() on entry, executed()
    inside each step's function (so a replayed step that re-ran is caught) and
    after_step() once each step returned; it fails on its first run only."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.runs: list[list[float]] = []  # per run: entry time, then each step's end
        self.executions = 0
        self.done = asyncio.Event()

    @property
    def first_run(self) -> bool:
        return len(self.runs) == 1

    def begin(self) -> None:
        self.runs.append([time.time()])

    def executed(self) -> None:
        self.executions += 1

    def after_step(self) -> None:
        run = self.runs[-1]
        run.append(time.time())
        if len(self.runs) >= 2 and len(run) == self.steps + 1:
            self.done.set()


def window(t0: float, t1: float) -> list[float]:
    return [t0, t1]


async def scalar(dsn: str, query: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(query)
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def analyze(dsn: str) -> None:
    """Planner statistics after the pre-fill (the server runs without autovacuum)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("analyze")


async def verify_count(dsn: str, count_query: str, expected: int, what: str) -> None:
    got = await scalar(dsn, count_query)
    if got != expected:
        raise RuntimeError(f"{what}: the database holds {got} jobs; expected {expected}")


async def enqueue_single(a: argparse.Namespace, enqueue: Callable[[int], Awaitable[Any]],
                         count_query: str) -> dict[str, Any]:
    """`enqueue(i)` is one public-API call that enqueues one no-op job."""
    await enqueue(-1)  # warm-up: connection open, statements prepared
    t0, p0 = time.time(), time.perf_counter()
    for i in range(a.jobs):
        await enqueue(i)
    seconds = time.perf_counter() - p0
    t1 = time.time()
    await verify_count(a.dsn, count_query, a.jobs + 1, "enqueue_single")
    return {"workload": "enqueue_single", "jobs": a.jobs, "seconds": seconds,
            "jobs_per_s": a.jobs / seconds, "window": window(t0, t1)}


async def enqueue_bulk(a: argparse.Namespace, prepare: Callable[[Sequence[int]], Any],
                       enqueue_batch: Callable[[Any], Awaitable[Any]],
                       count_query: str) -> dict[str, Any]:
    """`prepare(indexes)` builds one batch call's arguments (untimed);
    `enqueue_batch(prepared)` is one public-API batch call."""
    await enqueue_batch(prepare([-1]))  # warm-up
    batches = [prepare(range(i, min(i + a.batch, a.jobs))) for i in range(0, a.jobs, a.batch)]
    t0, p0 = time.time(), time.perf_counter()
    for batch in batches:
        await enqueue_batch(batch)
    seconds = time.perf_counter() - p0
    t1 = time.time()
    await verify_count(a.dsn, count_query, a.jobs + 1, "enqueue_bulk")
    return {"workload": "enqueue_bulk", "jobs": a.jobs, "batch": a.batch,
            "seconds": seconds, "jobs_per_s": a.jobs / seconds, "window": window(t0, t1)}


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
    t0, p0 = time.time(), time.perf_counter()
    handle = start_worker()
    await asyncio.wait_for(rec.reached.wait(), a.timeout)
    handlers_done = time.perf_counter()
    p1 = await wait_settled(a.dsn, settled_query, a.jobs, a.timeout)
    t1 = time.time()
    await stop_worker(handle)
    settled = await scalar(a.dsn, settled_query)
    if settled != a.jobs or rec.started != a.jobs:
        raise RuntimeError(f"drain: {settled} settled, {rec.started} handler runs; "
                           f"expected {a.jobs}")
    return {"workload": a.workload, "jobs": a.jobs, "seconds": p1 - p0,
            "jobs_per_s": a.jobs / (p1 - p0), "handlers_seconds": handlers_done - p0,
            "settled": settled, "window": window(t0, t1)}


def _quantiles(lags: list[float]) -> dict[str, float]:
    lags = sorted(lags)
    q = statistics.quantiles(lags, n=100, method="inclusive")
    return {"p50_ms": q[49], "p95_ms": q[94], "p99_ms": q[98], "max_ms": lags[-1],
            "mean_ms": statistics.fmean(lags)}


async def latency(a: argparse.Namespace, rec: Recorder, start_worker: Callable[[], Any],
                  stop_worker: Callable[[Any], Awaitable[None]],
                  enqueue: Callable[[int, float], Awaitable[None]]) -> dict[str, Any]:
    rec.expect(1)
    handle = start_worker()
    await enqueue(-1, 0.0)  # warm-up: the worker has claimed and run once
    await asyncio.wait_for(rec.reached.wait(), 30)
    await asyncio.sleep(0.5)  # idle
    rec.expect(a.jobs)
    t0 = time.time()
    start = time.perf_counter()
    for i in range(a.jobs):
        delay = start + i * a.interval_ms / 1000.0 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await enqueue(i, time.time())
    await asyncio.wait_for(rec.reached.wait(), a.timeout)
    t1 = time.time()
    await stop_worker(handle)
    if len(rec.lags_ms) != a.jobs:
        raise RuntimeError(f"latency: {len(rec.lags_ms)} lags recorded, expected {a.jobs}")
    return {"workload": "latency", "jobs": a.jobs, **_quantiles(rec.lags_ms),
            "window": window(t0, t1)}


async def steps(a: argparse.Namespace, rec: StepRecorder, start_worker: Callable[[], Any],
                stop_worker: Callable[[Any], Awaitable[None]],
                enqueue: Callable[[], Awaitable[Any]]) -> list[dict[str, Any]]:
    """Start the worker, enqueue the one job, wait for its second run to pass its last
    step. The first run's steps are the `step` result, the second's the `replay`."""
    handle = start_worker()
    await enqueue()
    await asyncio.wait_for(rec.done.wait(), a.timeout)
    await stop_worker(handle)
    if rec.executions != a.steps:
        raise RuntimeError(f"steps: step functions ran {rec.executions} times over two "
                           f"runs; expected {a.steps} (the replay must not re-run them)")
    out = []
    for workload, run in (("step", rec.runs[0]), ("replay", rec.runs[-1])):
        # The clock starts at handler entry: stored steps a system loads before it calls
        # the handler (sqljobs in its claim, Absurd in one query per run) are outside.
        gaps = [(b - x) * 1000.0 for x, b in itertools.pairwise(run)]
        total = (run[-1] - run[0]) * 1000.0
        out.append({"workload": workload, "steps": a.steps, "total_ms": total,
                    "ms_per_step": total / a.steps, "p50_step_ms": statistics.median(gaps),
                    "runs": len(rec.runs), "window": window(run[0], run[-1])})
    return out


def offered(a: argparse.Namespace, t: float) -> float:
    """Jobs offered by `t` seconds into a sustained run: --rate a second, times
    --burst-factor from --burst-at for --burst-seconds."""
    jobs = a.rate * t
    if a.burst_at >= 0:
        jobs += (a.burst_factor - 1) * a.rate * min(max(t - a.burst_at, 0.0), a.burst_seconds)
    return jobs


def windows(a: argparse.Namespace, rec: Recorder, sends: list[tuple[float, int]],
            t0: float, t1: float) -> list[dict[str, Any]]:
    """Per --window seconds from t0 to t1: handler starts (jobs), jobs enqueued, and the
    p50/p99 pickup lag of the jobs started in it (None when none)."""
    series = []
    for b in range(int((t1 - t0) // a.window) + 1):
        lo, hi = t0 + a.window * b, t0 + a.window * (b + 1)
        lags = [lag for lag, at in zip(rec.lags_ms, rec.ran_at, strict=True) if lo <= at < hi]
        p50 = p99 = lags[0] if len(lags) == 1 else None
        if len(lags) >= 2:
            q = statistics.quantiles(lags, n=100, method="inclusive")
            p50, p99 = q[49], q[98]
        series.append({"t": a.window * b, "jobs": len(lags),
                       "enqueued": sum(n for at, n in sends if lo <= at < hi),
                       "p50_ms": p50, "p99_ms": p99})
    return series


async def sustained(a: argparse.Namespace, rec: Recorder, start_worker: Callable[[], Any],
                    stop_worker: Callable[[Any], Awaitable[None]],
                    enqueue_batch: Callable[[int, float], Awaitable[None]]) -> dict[str, Any]:
    """`enqueue_batch(n, t)` enqueues n jobs carrying enqueue time t in one call."""
    total = round(offered(a, a.seconds))
    rec.expect(total)
    handle = start_worker()
    t0 = time.time()
    start = time.perf_counter()
    sends: list[tuple[float, int]] = []
    sent, tick = 0, 0
    while sent < total:
        delay = start + tick * 0.1 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tick += 1
        n = min(total - sent, round(offered(a, tick * 0.1)) - sent)
        if n > 0:
            at = time.time()
            await enqueue_batch(n, at)
            sends.append((at, n))
            sent += n
    await asyncio.wait_for(rec.reached.wait(), a.timeout)
    t1 = time.time()
    await stop_worker(handle)
    result = {"workload": "sustained", "jobs": total, "rate": a.rate, "seconds": t1 - t0,
              **_quantiles(rec.lags_ms), "series": windows(a, rec, sends, t0, t1),
              "window": window(t0, t1)}
    if a.burst_at >= 0:
        result["burst"] = {"at": a.burst_at, "seconds": a.burst_seconds,
                           "factor": a.burst_factor}
    return result


def emit(results: dict[str, Any] | list[dict[str, Any]], package: str) -> None:
    """Print each result as a RESULT line, stamped with the system's release."""
    from importlib.metadata import version

    for result in results if isinstance(results, list) else [results]:
        result["version"] = version(package)
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
