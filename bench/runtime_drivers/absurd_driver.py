"""Absurd through its public Python SDK (PyPI absurd-sdk, the asyncio client): AsyncAbsurd(dsn)
on its one autocommit connection, @app.register_task, app.spawn, await ctx.step(name, fn),
and app.start_worker(concurrency=1) run in-process as an asyncio task (defaults otherwise:
poll 0.25 s when idle, claim timeout 120 s). Only the `steps` workload is measured.

Replay: the job is spawned with max_attempts=2 and retry_strategy {"kind": "fixed",
"base_seconds": 0}, i.e. no backoff (the SQL's retry_delay_seconds gives 0), so when the first
run raises after its last step, fail_run inserts the second run as available at once and the
worker's loop, which claims again without sleeping after a batch, picks it up. On that run
the SDK has loaded every stored checkpoint of the task (one get_task_checkpoint_states call)
while building the task context, i.e. before the handler is entered, so ctx.step answers the
--steps steps from that cache; the load itself falls outside the "replay" window.

Schema: absurd.sql is not in absurd-sdk. It ships bundled in the PyPI package absurdctl (same
release; the peer venv needs it besides absurd-sdk, and `psql` on PATH, which absurdctl runs).
The driver runs `absurdctl init -d DSN` (untimed), refuses unless absurdctl reports the bundled
copy (it would otherwise download it) and the schema's version equals absurd-sdk's, then
creates the queue with the SDK's app.create_queue()."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psycopg
from _common import StepRecorder, args, emit, scalar, steps
from absurd_sdk import AsyncAbsurd

A = args()
STEPS = StepRecorder(A.steps)
QUEUE = "default"
TASK = "bench.steps"
app = AsyncAbsurd(A.dsn, queue_name=QUEUE)
WRONG: list[tuple[int, Any]] = []  # steps whose answer was not their index


def step_fn(i: int) -> Callable[[], Awaitable[int]]:
    async def trivial() -> int:
        STEPS.executed()
        return i

    return trivial


@app.register_task(name=TASK)
async def step_task(params: Any, ctx: Any) -> None:
    STEPS.begin()
    for i in range(A.steps):
        value = await ctx.step(f"s{i}", step_fn(i))
        STEPS.after_step()
        if value != i:
            WRONG.append((i, value))
    if STEPS.first_run:
        raise RuntimeError("first run: fail after the last step so that the task is retried")


def install_schema() -> None:
    """`absurdctl init` with the absurd.sql bundled in the absurdctl wheel (no download)."""
    sdk = version("absurd-sdk")
    try:
        ctl = version("absurdctl")
    except PackageNotFoundError:
        sys.exit(f"absurd: install absurdctl=={sdk} in this virtualenv (it ships absurd.sql)")
    if ctl != sdk:
        sys.exit(f"absurd: absurdctl {ctl} and absurd-sdk {sdk} differ; install the same release")
    exe = os.path.join(os.path.dirname(sys.executable), "absurdctl")
    if not os.path.exists(exe):
        exe = shutil.which("absurdctl") or exe
    done = subprocess.run([exe, "init", "-d", A.dsn], capture_output=True, text=True)
    if done.returncode != 0 or "via bundled" not in done.stdout:
        sys.exit(f"absurd: `absurdctl init` failed or did not use its bundled absurd.sql:\n"
                 f"{done.stdout}{done.stderr}")


async def main() -> None:
    if A.workload != "steps":
        sys.exit("absurd: only `steps` is measured")
    install_schema()
    schema = await scalar_text("select absurd.get_schema_version()")
    if schema != version("absurd-sdk"):
        sys.exit(f"absurd: schema version {schema} != absurd-sdk {version('absurd-sdk')}")
    await app.create_queue(QUEUE)  # also opens the client's connection before the worker

    def start_worker() -> asyncio.Task[None]:
        return asyncio.create_task(app.start_worker(concurrency=1))

    async def stop_worker(task: asyncio.Task[None]) -> None:
        app.stop_worker()  # the loop ends after its current claim or 0.25 s idle sleep
        await task

    async def enqueue() -> None:
        await app.spawn(TASK, {}, max_attempts=2,
                        retry_strategy={"kind": "fixed", "base_seconds": 0})

    result = await steps(A, STEPS, start_worker, stop_worker, enqueue)
    await app.close()
    if WRONG:
        raise RuntimeError(f"steps answered other values than their index: {WRONG[:5]}")
    runs = await scalar(A.dsn, f"select count(*) from absurd.r_{QUEUE}")
    if runs != 2:
        raise RuntimeError(f"absurd: {runs} runs recorded; expected 2")
    emit(result, "absurd-sdk")


async def scalar_text(query: str) -> str:
    async with await psycopg.AsyncConnection.connect(A.dsn, autocommit=True) as conn:
        cur = await conn.execute(query)
        row = await cur.fetchone()
        return str(row[0]) if row else ""


asyncio.run(main())
