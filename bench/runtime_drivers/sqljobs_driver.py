"""sqljobs through its public Python API: sqljobs.App, @app.job, enqueue_async /
enqueue_many_async, sqljobs.Worker run in-process on asyncio (defaults: LISTEN on,
poll 1 s, prefetch sized to the work), and ctx.step.run for the steps workload (see
_common.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from _common import (
    Recorder,
    StepRecorder,
    args,
    drain,
    emit,
    enqueue_bulk,
    enqueue_single,
    latency,
    run_id,
    steps,
    sustained,
)
from pydantic import BaseModel

import sqljobs
from sqljobs._schema.migrate import upgrade

A = args()
REC = Recorder()
STEPS = StepRecorder(A.steps)
app = sqljobs.App(A.dsn)
RUN = run_id()
COUNT = "select count(*) from jobs.job"


class Noop(BaseModel):
    t: float = 0.0


class Keyed(BaseModel):
    k: int


class Empty(BaseModel):
    pass


@app.job(name="bench.noop", queue="default")
async def noop(ctx: Any, payload: Noop) -> None:
    REC.ran(payload.t)


# drain_limited: limits the claim holds (declared here, written when the worker starts;
# declared for that workload only: any limit in the database puts every claim on its
# limited path)
KEYS = 100
LIMITED = A.workload == "drain_limited"
if LIMITED:
    app.limit("bench.all", scope="global", concurrency=10 * A.concurrency)


@app.job(name="bench.keyed", queue="default", limit=sqljobs.key("k", 2) if LIMITED else None)
async def keyed(ctx: Any, payload: Keyed) -> None:
    REC.ran()


def trivial(i: int) -> int:
    STEPS.executed()
    return i


# The first run fails after its last step; the retry (at once: 1 ms backoff) replays.
@app.job(name="bench.steps", queue="default",
         retry=sqljobs.RetryPolicy(max_attempts=2, base_s=0.001, cap_s=0.001, jitter="none"))
async def step_job(ctx: Any, payload: Empty) -> None:
    STEPS.begin()
    for i in range(A.steps):
        await ctx.step.run_async(f"s{i}", lambda i=i: trivial(i))
        STEPS.after_step()
    if STEPS.first_run:
        raise RuntimeError("first run: fail after the last step so that the job is retried")


# --variant prefetch=N: the worker's local queue (default: as many as --concurrency);
# --variant retention=S (sustained): succeeded jobs are kept S seconds (the stored
# policy), purged by a scheduler's leader running beside the worker with its defaults.
VARIANT, _, VALUE = A.variant.partition("=")
OPTIONS = {"prefetch": int(VALUE)} if VARIANT == "prefetch" else {}
RETENTION_S = float(VALUE) if VARIANT == "retention" else None


def start_worker() -> tuple[sqljobs.Worker, asyncio.Task[int]]:
    worker = sqljobs.Worker(app, queues=["default"], concurrency=A.concurrency,
                            install_signals=False, **OPTIONS)
    return worker, asyncio.create_task(worker.run_async())


async def stop_worker(handle: tuple[sqljobs.Worker, asyncio.Task[int]]) -> None:
    worker, task = handle
    worker.stop()
    await task


def batch_of(indexes: Sequence[int]) -> list[tuple[dict[str, Any], str]]:
    return [({}, f"{RUN}-{i}") for i in indexes]


async def main() -> None:
    logging.getLogger("sqljobs").setLevel(logging.CRITICAL)
    upgrade(A.dsn)
    await app.open_async()
    result: Any
    if A.workload == "enqueue_single":
        async def enqueue(i: int) -> None:
            await noop.enqueue_async({}, key=f"{RUN}-{i}")

        result = await enqueue_single(A, enqueue, COUNT)
    elif A.workload == "enqueue_bulk":
        async def enqueue_batch(batch: list[tuple[dict[str, Any], str]]) -> None:
            await noop.enqueue_many_async(batch)

        result = await enqueue_bulk(A, batch_of, enqueue_batch, COUNT)
    elif A.workload == "drain":
        for i in range(0, A.jobs, 1000):
            await noop.enqueue_many_async(batch_of(range(i, min(i + 1000, A.jobs))))
        result = await drain(A, REC, start_worker, stop_worker,
                             "select count(*) from jobs.job where state = 'succeeded'")
    elif A.workload == "drain_limited":
        for i in range(0, A.jobs, 1000):
            await keyed.enqueue_many_async([({"k": j % KEYS}, f"{RUN}-{j}")
                                            for j in range(i, min(i + 1000, A.jobs))])
        result = await drain(A, REC, start_worker, stop_worker,
                             "select count(*) from jobs.job where state = 'succeeded'")
    elif A.workload == "latency":
        async def enqueue_at(i: int, t: float) -> None:
            await noop.enqueue_async({"t": t}, key=f"{RUN}-{i}")

        result = await latency(A, REC, start_worker, stop_worker, enqueue_at)
    elif A.workload == "steps":
        async def enqueue_steps() -> None:
            await step_job.enqueue_async({}, key=RUN)

        result = await steps(A, STEPS, start_worker, stop_worker, enqueue_steps)
    else:
        sent = 0
        scheduler = None
        if RETENTION_S is not None:
            app.client.run(sqljobs.queries.retention_put(
                "*", {"succeeded": RETENTION_S}))
            scheduler = sqljobs.Scheduler(app, install_signals=False)
            scheduler_task = asyncio.create_task(scheduler.run_async())

        async def enqueue_many_at(n: int, t: float) -> None:
            nonlocal sent
            await noop.enqueue_many_async(
                [({"t": t}, f"{RUN}-{i}") for i in range(sent, sent + n)])
            sent += n

        result = await sustained(A, REC, start_worker, stop_worker, enqueue_many_at)
        if scheduler is not None:
            scheduler.stop()
            await scheduler_task
            result["purged"] = scheduler.counts["purged"]
    await app.close_async()
    emit(result, "sqljobs")


asyncio.run(main())
