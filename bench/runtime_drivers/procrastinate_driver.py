"""Procrastinate through its public API: App(PsycopgConnector), @app.task,
batch_defer_async / defer_async, app.run_worker_async(concurrency=...) in-process on
asyncio with its defaults otherwise (LISTEN/NOTIFY on, jobs kept as `succeeded`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import procrastinate
from _common import Recorder, args, drain, emit, latency

A = args()
REC = Recorder()
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=A.dsn))


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


async def main() -> None:
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        if A.workload == "drain":
            for i in range(0, A.jobs, 1000):
                await noop.batch_defer_async(*({} for _ in range(i, min(i + 1000, A.jobs))))
            result = await drain(
                A, REC, start_worker, stop_worker,
                "select count(*) from procrastinate_jobs where status = 'succeeded'")
        else:
            async def enqueue(i: int, t: float) -> None:
                await noop.defer_async(t=t)

            result = await latency(A, REC, start_worker, stop_worker, enqueue)
    emit(result, "procrastinate")


asyncio.run(main())
