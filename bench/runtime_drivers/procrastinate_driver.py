"""Procrastinate through its public API: App(PsycopgConnector), @app.task, defer_async
(enqueue_single, latency), batch_defer_async (enqueue_bulk, sustained, the drain
pre-fill), app.run_worker_async(concurrency=...) in-process on asyncio with its defaults
otherwise (LISTEN/NOTIFY on, jobs kept as `succeeded`). No `steps`: Procrastinate has
no durable steps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

import procrastinate
from _common import (
    Recorder,
    args,
    drain,
    emit,
    enqueue_bulk,
    enqueue_single,
    latency,
    sustained,
)

A = args()
if A.workload == "steps":
    sys.exit("procrastinate: only queue workloads are measured")
REC = Recorder()
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=A.dsn))
JOBS = "select count(*) from procrastinate_jobs"


@app.task(name="bench.noop", queue="default")
async def noop(t: float = 0.0) -> None:
    REC.ran(t)


def start_worker() -> asyncio.Task[None]:
    return asyncio.create_task(app.run_worker_async(
        queues=["default"], concurrency=A.concurrency, install_signal_handlers=False))


async def stop_worker(task: asyncio.Task[None]) -> None:
    task.cancel()  # procrastinate turns this into a graceful stop
    with contextlib.suppress(asyncio.CancelledError):
        await task


def prepare(indexes: Sequence[int]) -> list[dict[str, Any]]:
    return [{} for _ in indexes]


async def defer_batch(kwargs: list[dict[str, Any]]) -> None:
    await noop.batch_defer_async(*kwargs)


async def main() -> None:
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        if A.workload == "enqueue_single":
            async def enqueue_one(i: int) -> None:
                await noop.defer_async()

            result = await enqueue_single(A, enqueue_one, JOBS)
        elif A.workload == "enqueue_bulk":
            result = await enqueue_bulk(A, prepare, defer_batch, JOBS)
        elif A.workload == "drain":
            for i in range(0, A.jobs, 1000):
                await defer_batch(prepare(range(i, min(i + 1000, A.jobs))))
            result = await drain(
                A, REC, start_worker, stop_worker,
                "select count(*) from procrastinate_jobs where status = 'succeeded'")
        elif A.workload == "latency":
            async def enqueue(i: int, t: float) -> None:
                await noop.defer_async(t=t)

            result = await latency(A, REC, start_worker, stop_worker, enqueue)
        else:
            async def enqueue_batch(n: int, t: float) -> None:
                await noop.batch_defer_async(*({"t": t} for _ in range(n)))

            result = await sustained(A, REC, start_worker, stop_worker, enqueue_batch)
    emit(result, "procrastinate")


asyncio.run(main())
