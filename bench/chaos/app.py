"""The app the chaos fleet runs: `sqljobs worker bench.chaos.app:app --queue chaos`.

Every handler writes what it did to side tables in the same database (SIDE_TABLES), so
the checks read the truth from the database, not from the processes that were killed:

- chaos_exec: one row per handler run (job, claim, pid, time): duplicates are runs of
  a job beyond its first (at-least-once), and the first run under a later claim after a
  kill is the re-claim that the recovery time is measured to;
- chaos_step_exec: one row per durable step body run, and `reexecuted` true when the
  step's result was already stored when the body started (must never happen);
- chaos_settled: one row per transition of a job into a final state (a trigger on
  jobs.job): a job with two rows settled twice;
- chaos_run: one row per run of a limited job (the limits scenario) with its groups
  (account, tenant) and the times it started and ended on the database clock (ended_at
  null for a run its process died in: the harness knows when it killed it, chaos_kill):
  the runs of a group that overlap are what it ran at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from sqljobs import App, JobContext

QUEUE = "chaos"

SIDE_TABLES = """
create table if not exists public.chaos_exec (
  job_id bigint not null, claim bigint not null, kind text not null, pid integer not null,
  at timestamptz not null default clock_timestamp());
create index if not exists chaos_exec_job on public.chaos_exec (job_id, claim);
create table if not exists public.chaos_step_exec (
  job_id bigint not null, step text not null, reexecuted boolean not null,
  at timestamptz not null default clock_timestamp());
create table if not exists public.chaos_settled (
  job_id bigint not null, state text not null,
  at timestamptz not null default clock_timestamp());
create table if not exists public.chaos_run (
  job_id bigint not null, claim bigint not null, pid integer not null, acct text not null,
  tenant text, started_at timestamptz not null default clock_timestamp(),
  ended_at timestamptz);
create table if not exists public.chaos_kill (pid integer not null, at timestamptz not null);
create or replace function public.chaos_note_settled() returns trigger
language plpgsql as $$
begin
  insert into public.chaos_settled (job_id, state) values (new.id, new.state::text);
  return null;
end $$;
drop trigger if exists chaos_settled on jobs.job;
create trigger chaos_settled after update of state on jobs.job for each row
  when (old.state::text not in ('succeeded', 'failed', 'dead', 'cancelled')
        and new.state::text in ('succeeded', 'failed', 'dead', 'cancelled'))
  execute function public.chaos_note_settled();
"""


class Work(BaseModel):
    ms: int = 20
    steps: int = 0
    fail: bool = False


class Limited(BaseModel):
    ms: int = 20
    acct: str = "a0"


class SagaFailed(Exception):
    """A saga that fails for good after its compensable step: it must unwind."""


app = App()


_side: AsyncConnectionPool[Any] | None = None


@contextlib.asynccontextmanager
async def _side_connection() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection for the side tables, from a small pool of this process's own: two
    connections, however many handlers run (the exhaust scenario starves the fleet of
    connection slots on purpose; what it tests is the worker, not these writes)."""
    global _side
    if _side is None:
        _side = AsyncConnectionPool(app.dsn, min_size=1, max_size=2, open=False,
                                    kwargs={"autocommit": True}, name="chaos-side")
        await _side.open()
    # Past this the handler fails, and its job is retried soon (prepare() gives every
    # chaos job a short backoff) rather than held by a process starved of connections.
    async with _side.connection(timeout=10) as conn:
        yield conn


async def _record_run(ctx: JobContext, kind: str) -> None:
    async with _side_connection() as conn:
        await conn.execute("insert into public.chaos_exec (job_id, claim, kind, pid) "
                           "values (%s, %s, %s, %s)", (ctx.job_id, ctx.claim, kind, os.getpid()))


async def _step_body(job_id: int, name: str, ms: int) -> int:
    async with _side_connection() as conn:
        await conn.execute(
            "insert into public.chaos_step_exec (job_id, step, reexecuted) values (%s, %s, "
            "exists (select 1 from jobs.step s where s.job_id = %s and s.name = %s))",
            (job_id, name, job_id, name))
    await asyncio.sleep(ms / 1000)
    return 1


@app.job(name="chaos.plain", queue=QUEUE)
async def plain(ctx: JobContext, payload: Work) -> int:
    await _record_run(ctx, "plain")
    await asyncio.sleep(payload.ms / 1000)
    return 1


@app.job(name="chaos.stepped", queue=QUEUE)
async def stepped(ctx: JobContext, payload: Work) -> int:
    await _record_run(ctx, "stepped")
    total = 0
    for i in range(payload.steps):
        total += await ctx.step.run_async(f"s{i}", functools.partial(
            _step_body, ctx.job_id, f"s{i}", payload.ms))
    return total


@app.job(name="chaos.saga", queue=QUEUE, terminal=(SagaFailed,))
async def saga(ctx: JobContext, payload: Work) -> int:
    await _record_run(ctx, "saga")
    job_id = ctx.job_id

    def undo(value: object) -> None:
        return None

    async def book() -> int:
        return await _step_body(job_id, "book", payload.ms)

    await ctx.step.run_async("book", book, compensate=undo)
    if payload.fail:
        raise SagaFailed("the saga fails after booking: its booking is undone")
    return 1


@app.job(name="chaos.limited", queue=QUEUE)
async def limited(ctx: JobContext, payload: Limited) -> int:
    """A job under limits (the limits scenario sets them in SQL: LIMITS in run.py): its
    run's start and end go to chaos_run, the end before the worker acks, so the recorded
    interval lies inside the time the run held its slots."""
    async with _side_connection() as conn:
        await conn.execute(
            "insert into public.chaos_run (job_id, claim, pid, acct, tenant) "
            "values (%s, %s, %s, %s, %s)",
            (ctx.job_id, ctx.claim, os.getpid(), payload.acct, ctx.tenant))
    try:
        await _record_run(ctx, "limited")
        await asyncio.sleep(payload.ms / 1000)
    finally:  # a run cut off (drain, lost lease) ends here too; a SIGKILL at the kill
        async with _side_connection() as conn:
            await conn.execute("update public.chaos_run set ended_at = clock_timestamp() "
                               "where job_id = %s and claim = %s", (ctx.job_id, ctx.claim))
    return 1


# Every second, each second once: the scheduler kills check each occurrence fired once.
@app.task(name="chaos.tick", cron="* * * * * *", catch_up="all", queue=QUEUE)
async def tick(ctx: JobContext) -> None:
    await _record_run(ctx, "tick")
