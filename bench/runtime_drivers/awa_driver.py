"""awa (PyPI `awa-pg`: a Rust core with a Python SDK) through its public Python API:
AsyncClient(url), migrate() then install_queue_storage() (its queue storage engine,
ADR-019 and ADR-023: append-only ready entries in a ring of partitions, a partitioned
receipt ring, truncation instead of row deletes), @client.task(Noop, kind=..., queue=...)
for the no-op handler, client.start([(queue, --concurrency)]) with its defaults
otherwise (poll 200 ms, maintenance leader in-process) and shutdown() to stop.
insert() is the one-job call (enqueue_single, latency); enqueue_many_copy() is its batch
API (COPY into queue storage: enqueue_bulk, the drain pre-fill, the sustained producer).

A job is settled when awa's terminal history holds it as completed: the view
awa.terminal_jobs is that history, but a count over it joins every completion back to
its ready entry (a count of 20,000 took minutes here, polled every 2 ms it would be the
drain's limit), so the driver counts the view's two sources directly: the compact
completion batches (awa.receipt_completion_batches.completed_count) and the completed
rows of awa.done_entries. No `steps`: awa has no durable steps."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import awa
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
if A.workload not in ("enqueue_single", "enqueue_bulk", "drain", "latency", "sustained"):
    sys.exit(f"awa: {A.workload} is not measured (awa has no durable steps or such limits)")
REC = Recorder()
KIND, QUEUE = "bench_noop", "bench"
COUNT = "select count(*) from awa.jobs"
SETTLED = ("select (select coalesce(sum(completed_count), 0) "
           "from awa.receipt_completion_batches) + (select count(*) from awa.done_entries "
           "where state = 'completed')")


@dataclass
class Noop:
    t: float = 0.0


def prepare(indexes: Sequence[int]) -> list[Noop]:
    return [Noop() for _ in indexes]


async def main() -> None:
    logging.getLogger("awa").setLevel(logging.WARNING)
    client = awa.AsyncClient(A.dsn)
    await client.migrate()
    await client.install_queue_storage()

    @client.task(Noop, kind=KIND, queue=QUEUE)
    async def noop(job: awa.Job) -> None:
        REC.ran(job.args.t or None)

    def start_worker() -> asyncio.Task[None]:
        return asyncio.create_task(client.start([(QUEUE, A.concurrency)]))

    async def stop_worker(task: asyncio.Task[None]) -> None:
        await task
        await client.shutdown()

    async def enqueue_copy(jobs: list[Noop]) -> None:
        await client.enqueue_many_copy(jobs, kind=KIND, queue=QUEUE)

    if A.workload == "enqueue_single":
        async def enqueue_one(i: int) -> None:
            await client.insert(Noop(), kind=KIND, queue=QUEUE)

        result = await enqueue_single(A, enqueue_one, COUNT)
    elif A.workload == "enqueue_bulk":
        result = await enqueue_bulk(A, prepare, enqueue_copy, COUNT)
    elif A.workload == "drain":
        for i in range(0, A.jobs, 1000):
            await enqueue_copy(prepare(range(i, min(i + 1000, A.jobs))))
        result = await drain(A, REC, start_worker, stop_worker, SETTLED)
    elif A.workload == "latency":
        async def enqueue(i: int, t: float) -> None:
            await client.insert(Noop(t=t), kind=KIND, queue=QUEUE)

        result = await latency(A, REC, start_worker, stop_worker, enqueue)
    else:
        async def enqueue_batch(n: int, t: float) -> None:
            await enqueue_copy([Noop(t=t) for _ in range(n)])

        result = await sustained(A, REC, start_worker, stop_worker, enqueue_batch)
    await client.close()
    emit(result, "awa-pg")


asyncio.run(main())
