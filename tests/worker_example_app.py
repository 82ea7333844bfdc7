"""An example app the worker tests run, in-process and as `sqljobs worker` subprocesses.

    sqljobs worker tests.worker_example_app:app --queue example

Handlers record each run's start and end, with the claim token and the process id, in
`public.worker_runs` (the tests create it), so a test can prove what ran where and when.
EXAMPLE_FAST=1 in the environment makes the slow jobs return at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import psycopg
from pydantic import BaseModel

from sqljobs import App, JobContext, Retry, RetryPolicy, Snooze

RUNS_TABLE = """
create table if not exists public.worker_runs (
  job_id bigint not null,
  claim  bigint not null,
  pid    integer not null,
  event  text not null,            -- start | end
  at     timestamptz not null default clock_timestamp()
)
"""

QUEUE = "example"
INSERT_RUN = "insert into public.worker_runs (job_id, claim, pid, event) values (%s, %s, %s, %s)"


class Sleep(BaseModel):
    seconds: float = 0.0


class Count(BaseModel):
    n: int


class Nothing(BaseModel):
    pass


class Refused(Exception):
    """Declared terminal on `example.terminal`."""


def _dsn(app: App) -> str:
    return app.dsn


def make_app(dsn: str | None = None) -> App:
    app = App(dsn)

    async def record(ctx: JobContext, event: str) -> None:
        async with await psycopg.AsyncConnection.connect(_dsn(app), autocommit=True) as conn:
            await conn.execute(INSERT_RUN, (ctx.job_id, ctx.claim, os.getpid(), event))

    def record_sync(ctx: JobContext, event: str) -> None:
        with psycopg.connect(_dsn(app), autocommit=True) as conn:
            conn.execute(INSERT_RUN, (ctx.job_id, ctx.claim, os.getpid(), event))

    def seconds(payload: Sleep) -> float:
        return 0.0 if os.environ.get("EXAMPLE_FAST") == "1" else payload.seconds

    @app.job(name="example.slow", queue=QUEUE, retry=RetryPolicy(max_attempts=5, base_s=0.1))
    async def slow(ctx: JobContext, payload: Sleep) -> dict[str, Any]:
        await record(ctx, "start")
        await asyncio.sleep(seconds(payload))
        await record(ctx, "end")
        return {"job": ctx.job_id, "pid": os.getpid()}

    @app.job(name="example.slow_sync", queue=QUEUE, retry=RetryPolicy(max_attempts=5, base_s=0.1))
    def slow_sync(ctx: JobContext, payload: Sleep) -> dict[str, Any]:
        record_sync(ctx, "start")
        deadline = time.monotonic() + seconds(payload)
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(0.02)
        record_sync(ctx, "end")
        return {"job": ctx.job_id, "thread": threading.current_thread().name}

    @app.job(name="example.echo", queue=QUEUE)
    async def echo(ctx: JobContext, payload: Count) -> dict[str, Any]:
        return {"n": payload.n, "attempt": ctx.attempt, "queue": ctx.queue,
                "tenant": ctx.tenant}

    @app.job(name="example.not_json", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    async def not_json(ctx: JobContext, payload: Nothing) -> Any:
        return {"when": object()}

    @app.job(name="example.terminal", queue=QUEUE, terminal=(Refused,))
    def terminal(ctx: JobContext, payload: Nothing) -> None:
        raise Refused("the account is closed")

    @app.job(name="example.flaky", queue=QUEUE, retry=RetryPolicy(max_attempts=3, base_s=60))
    async def flaky(ctx: JobContext, payload: Nothing) -> None:
        raise RuntimeError(f"boom on attempt {ctx.attempt}")

    @app.job(name="example.retry_once", queue=QUEUE)
    async def retry_once(ctx: JobContext, payload: Nothing) -> dict[str, int]:
        if ctx.attempt == 1:
            raise Retry(in_=0.3, reason="not yet")
        return {"attempt": ctx.attempt}

    @app.job(name="example.snooze_once", queue=QUEUE)
    def snooze_once(ctx: JobContext, payload: Nothing) -> dict[str, Any]:
        if ctx.saved_progress is None:
            ctx.progress({"snoozed": True})
            raise Snooze(0.3)
        return {"attempt": ctx.attempt, "saved": ctx.saved_progress}

    @app.job(name="example.timeout", queue=QUEUE, timeout=0.5,
             retry=RetryPolicy(max_attempts=2, base_s=60))
    async def too_slow(ctx: JobContext, payload: Sleep) -> None:
        await asyncio.sleep(payload.seconds)

    @app.job(name="example.sync_timeout", queue=QUEUE, timeout=0.5,
             retry=RetryPolicy(max_attempts=2, base_s=60))
    def sync_too_slow(ctx: JobContext, payload: Sleep) -> None:
        record_sync(ctx, "start")
        if ctx.cancelled.wait(payload.seconds):
            record_sync(ctx, "cancelled")

    @app.job(name="example.progress", queue=QUEUE)
    async def progress(ctx: JobContext, payload: Count) -> int:
        for i in range(payload.n):
            await ctx.progress_async({"done": i + 1, "of": payload.n})
        return payload.n

    @app.job(name="example.until_cancelled", queue=QUEUE)
    async def until_cancelled(ctx: JobContext, payload: Sleep) -> None:
        await record(ctx, "start")
        try:
            await asyncio.sleep(payload.seconds)
        except asyncio.CancelledError:
            await record(ctx, "cancelled")
            raise
        await record(ctx, "end")

    return app


app = make_app()
