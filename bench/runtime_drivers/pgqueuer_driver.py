"""PgQueuer through its public API: Queries(driver).install/enqueue (one entrypoint for
enqueue_single and latency; lists for enqueue_bulk, sustained and the drain pre-fill),
QueueManager with @qm.entrypoint, qm.run(...) in-process on asyncio over one asyncpg
connection (its documented set-up). Concurrency: max_concurrent_tasks=--concurrency with
batch_size=--concurrency // 2 (PgQueuer requires max_concurrent_tasks >= 2 x batch_size).
A job is settled when PgQueuer has deleted it from its queue table and logged it. No
`steps`: PgQueuer has no durable steps."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import asyncpg
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
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
from psycopg.conninfo import conninfo_to_dict

A = args()
if A.workload == "steps":
    sys.exit("pgqueuer: only queue workloads are measured")
REC = Recorder()
JOBS = "select count(*) from pgqueuer"

Batch = tuple[list[str], list[bytes | None], list[int]]


def connect() -> Any:
    """asyncpg wants a URL or keywords; the runner hands a libpq DSN of either form."""
    info = conninfo_to_dict(A.dsn)
    keys = {"host": "host", "port": "port", "user": "user", "password": "password",
            "dbname": "database"}
    return asyncpg.connect(**{keys[k]: v for k, v in info.items() if k in keys})


def prepare(indexes: Sequence[int]) -> Batch:
    n = len(indexes)
    return ["bench.noop"] * n, [None] * n, [0] * n


async def main() -> None:
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    conn = await connect()
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    worker_conn = await connect()
    qm = QueueManager(Queries(AsyncpgDriver(worker_conn)))

    @qm.entrypoint("bench.noop")
    async def noop(job: Job) -> None:
        REC.ran(json.loads(job.payload)["t"] if job.payload else None)

    def start_worker() -> asyncio.Task[None]:
        return asyncio.create_task(qm.run(
            batch_size=max(1, A.concurrency // 2), max_concurrent_tasks=A.concurrency))

    async def stop_worker(task: asyncio.Task[None]) -> None:
        qm.shutdown.set()
        await task

    async def enqueue_lists(batch: Batch) -> None:
        await queries.enqueue(*batch)

    if A.workload == "enqueue_single":
        async def enqueue_one(i: int) -> None:
            await queries.enqueue("bench.noop", None)

        result = await enqueue_single(A, enqueue_one, JOBS)
    elif A.workload == "enqueue_bulk":
        result = await enqueue_bulk(A, prepare, enqueue_lists, JOBS)
    elif A.workload == "drain":
        for i in range(0, A.jobs, 1000):
            await enqueue_lists(prepare(range(i, min(i + 1000, A.jobs))))
        result = await drain(
            A, REC, start_worker, stop_worker,
            f"select {A.jobs} - count(*) from pgqueuer")
        logged = await conn.fetchval(
            "select count(*) from pgqueuer_log where status = 'successful'")
        result["logged_successful"] = logged
    elif A.workload == "latency":
        async def enqueue(i: int, t: float) -> None:
            await queries.enqueue("bench.noop", json.dumps({"t": t}).encode())

        result = await latency(A, REC, start_worker, stop_worker, enqueue)
    else:
        async def enqueue_batch(n: int, t: float) -> None:
            await queries.enqueue(["bench.noop"] * n, [json.dumps({"t": t}).encode()] * n,
                                  [0] * n)

        result = await sustained(A, REC, start_worker, stop_worker, enqueue_batch)
    await conn.close()
    await worker_conn.close()
    emit(result, "pgqueuer")


asyncio.run(main())
