"""Chancy through its public API: Chancy(dsn).migrate(), @job, push / push_many, and
Worker(chancy) started in-process on asyncio over one declared Queue("default") with
executor=Chancy.Executor.Async and concurrency=--concurrency. Defaults otherwise
(default plugins, LISTEN/NOTIFY on, job updates written in batches every 1 s, jobs kept
as `succeeded`); its per-job INFO logging is turned down to WARNING, as for the peers.

One deviation: the queue sets eager_polling=True. Without it a queue polls only when a
push is NOTIFYed or every polling_interval (default 5 s, whole seconds only), not when a
slot frees, so drain and sustained would run at most --concurrency jobs per poll interval.
eager_polling is Chancy's documented knob for that; polling_interval keeps its default,
since NOTIFY already wakes the worker on each push (what latency measures)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from _common import Recorder, args, drain, emit, enqueue_bulk, enqueue_single, latency, sustained
from chancy import Chancy, Job, Queue, Worker, job

A = args()
REC = Recorder()
QUEUE = "default"
JOBS = "chancy_jobs"  # Chancy's jobs table under its default "chancy_" prefix


@job(queue=QUEUE)
async def noop(t: float = 0.0) -> None:
    REC.ran(t)


def jobs(n: int, t: float | None = None) -> list[Job]:
    kwargs = {} if t is None else {"t": t}
    return [noop.job.with_kwargs(**kwargs) for _ in range(n)]


async def push_batch(chancy: Chancy, batch: list[Job]) -> None:
    """One push_many call: one transaction for the whole batch."""
    async for _ in chancy.push_many(batch, batch_size=max(1, len(batch))):
        pass


async def main() -> None:
    if A.workload == "steps":
        sys.exit("chancy_driver: the steps workload is not implemented for Chancy")
    log = logging.getLogger("chancy")
    log.setLevel(logging.WARNING)
    async with Chancy(A.dsn, log=log) as chancy:
        await chancy.migrate()
        # declared before the worker starts, whose own declare of "default" then
        # leaves it as is (no upsert)
        await chancy.declare(Queue(QUEUE, concurrency=A.concurrency,
                                   executor=Chancy.Executor.Async, eager_polling=True))

        def start_worker() -> tuple[Worker, asyncio.Task[None]]:
            worker = Worker(chancy, register_signal_handlers=False)

            async def run() -> None:
                await worker.start()
                await worker.wait_for_shutdown()

            return worker, asyncio.create_task(run())

        async def stop_worker(handle: tuple[Worker, asyncio.Task[None]]) -> None:
            worker, task = handle
            await worker.stop()  # drains the executor and flushes pending job updates
            await task

        count = f"select count(*) from {JOBS}"
        if A.workload == "enqueue_single":
            async def enqueue_one(i: int) -> None:
                await chancy.push(noop.job.with_kwargs())

            result = await enqueue_single(A, enqueue_one, count)
        elif A.workload == "enqueue_bulk":
            def prepare(indexes: Sequence[int]) -> list[Job]:
                return jobs(len(indexes))

            async def enqueue_prepared(batch: list[Job]) -> None:
                await push_batch(chancy, batch)

            result = await enqueue_bulk(A, prepare, enqueue_prepared, count)
        elif A.workload == "drain":
            for i in range(0, A.jobs, A.batch):
                await push_batch(chancy, jobs(min(A.batch, A.jobs - i)))
            result = await drain(A, REC, start_worker, stop_worker,
                                 f"{count} where state = 'succeeded'")
        elif A.workload == "latency":
            async def enqueue_timed(i: int, t: float) -> None:
                await chancy.push(noop.job.with_kwargs(t=t))

            result = await latency(A, REC, start_worker, stop_worker, enqueue_timed)
        else:
            async def enqueue_many(n: int, t: float) -> None:
                await push_batch(chancy, jobs(n, t))

            result = await sustained(A, REC, start_worker, stop_worker, enqueue_many)
    emit(result, "chancy")


asyncio.run(main())
