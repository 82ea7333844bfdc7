"""An example app for tests/test_stalls_processes.py, run as `sqljobs worker` processes.

    sqljobs worker tests.stall_example_app:app --queue stall

`stall.steps` records, in `public.stall_effects`, the start of each run and each step
function's run (job, step, pid, database time), and pauses between steps outside any
step function: a worker stopped (SIGSTOP) mid-job is stopped between two steps, where
a stale run would start its next step on resume. `stall.sleepy` only sleeps inside its
steps (no effects), for the dropped-connection test.
"""

from __future__ import annotations

import asyncio
import functools
import os

import psycopg
from pydantic import BaseModel

from sqljobs import App, JobContext

QUEUE = "stall"
EFFECTS_TABLE = """
create table if not exists public.stall_effects (
  job_id bigint not null,
  step   integer not null,            -- -1: the run started
  pid    integer not null,
  at     timestamptz not null default clock_timestamp()
)
"""


class Steps(BaseModel):
    n: int
    pause_s: float = 0.05


app = App()


@app.job(name="stall.steps", queue=QUEUE)
async def steps(ctx: JobContext, payload: Steps) -> int:
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
        async def effect(i: int) -> int:
            await conn.execute("insert into public.stall_effects (job_id, step, pid) "
                               "values (%s, %s, %s)", (ctx.job_id, i, os.getpid()))
            return i

        await effect(-1)
        total = 0
        for i in range(payload.n):
            total += await ctx.step.run_async(f"s{i}", functools.partial(effect, i))
            await asyncio.sleep(payload.pause_s)
    return total


@app.job(name="stall.sleepy", queue=QUEUE)
async def sleepy(ctx: JobContext, payload: Steps) -> int:
    async def nap(i: int) -> int:
        await asyncio.sleep(payload.pause_s)
        return i

    total = 0
    for i in range(payload.n):
        total += await ctx.step.run_async(f"s{i}", functools.partial(nap, i))
    return total
