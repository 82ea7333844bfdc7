"""sqljobs through its public Python API: sqljobs.App, @app.job, enqueue_many /
enqueue_async, and sqljobs.Worker run in-process on asyncio (see _common.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from _common import Recorder, args, drain, emit, latency, run_id
from pydantic import BaseModel

import sqljobs
from sqljobs.migrate import upgrade

A = args()
REC = Recorder()
app = sqljobs.App(A.dsn)


class Noop(BaseModel):
    t: float = 0.0


@app.job(name="bench.noop", queue="default")
async def noop(ctx: Any, payload: Noop) -> None:
    REC.ran(payload.t)


def start_worker() -> tuple[sqljobs.Worker, asyncio.Task[int]]:
    worker = sqljobs.Worker(app, queues=["default"], concurrency=A.concurrency,
                            install_signals=False)
    return worker, asyncio.create_task(worker.run())


async def stop_worker(handle: tuple[sqljobs.Worker, asyncio.Task[int]]) -> None:
    worker, task = handle
    worker.stop()
    await task


async def main() -> None:
    logging.getLogger("sqljobs").setLevel(logging.WARNING)
    upgrade(A.dsn)
    run = run_id()
    if A.workload == "drain":
        with app:
            for i in range(0, A.jobs, 1000):
                noop.enqueue_many([({}, f"{run}-{j}") for j in range(i, min(i + 1000, A.jobs))])
        result = await drain(A, REC, start_worker, stop_worker,
                             "select count(*) from jobs.job where state = 'succeeded'")
    else:
        await app.open_async()

        async def enqueue(i: int, t: float) -> None:
            await noop.enqueue_async({"t": t}, key=f"{run}-{i}")

        result = await latency(A, REC, start_worker, stop_worker, enqueue)
        await app.close_async()
    emit(result, "sqljobs")


asyncio.run(main())
