"""An example app with limits, run by tests/test_limits_processes.py as worker processes.

    sqljobs worker tests.limits_example_app:app          # the concurrency limits
    sqljobs worker tests.limits_example_app:rated_app    # the rate limit

Declared limits: on `app`, at most 3 jobs running at once everywhere (`all`), 1 in
queue `lim_b` (`lim_b`) and 2 per payload `key` of `lim.work`; on `rated_app`, 50
starts a second per `site` of `lim.rated`. Handlers of `lim.work` record each run's
start and end with the claim token, the process id and the key in `public.limit_runs`,
on one connection per process.
"""

from __future__ import annotations

import asyncio
import os

import psycopg
from pydantic import BaseModel

from sqljobs import App, JobContext, key

RUNS_TABLE = """
create table if not exists public.limit_runs (
  job_id bigint not null,
  claim  bigint not null,
  pid    integer not null,
  queue  text not null,
  key    text not null,
  event  text not null,            -- start | end
  at     timestamptz not null default clock_timestamp()
)
"""
INSERT_RUN = ("insert into public.limit_runs (job_id, claim, pid, queue, key, event) "
              "values (%s, %s, %s, %s, %s, %s)")
GLOBAL_LIMIT, QUEUE_B_LIMIT, KEY_LIMIT, RATE_PER_S = 3, 1, 2, 50


class Work(BaseModel):
    key: str
    pause_s: float = 0.005


class Rated(BaseModel):
    site: str


def make_app(dsn: str | None = None) -> App:
    app = App(dsn)
    app.limit("all", scope="global", concurrency=GLOBAL_LIMIT)
    app.limit("lim_b", scope="queue", target="lim_b", concurrency=QUEUE_B_LIMIT)
    recorder: list[tuple[psycopg.AsyncConnection[object], asyncio.Lock]] = []

    async def record(ctx: JobContext, key_value: str, event: str) -> None:
        if not recorder:
            recorder.append((await psycopg.AsyncConnection.connect(app.dsn, autocommit=True),
                             asyncio.Lock()))
        conn, lock = recorder[0]
        async with lock:
            await conn.execute(INSERT_RUN, (ctx.job_id, ctx.claim, os.getpid(), ctx.queue,
                                            key_value, event))

    @app.job(name="lim.work", queue="lim_a", limit=key("key", KEY_LIMIT))
    async def work(ctx: JobContext, payload: Work) -> None:
        await record(ctx, payload.key, "start")
        await asyncio.sleep(payload.pause_s)
        await record(ctx, payload.key, "end")

    return app


def make_rated_app(dsn: str | None = None) -> App:
    app = App(dsn)

    @app.job(name="lim.rated", queue="lim_r", limit=key("site", rate=(RATE_PER_S, 1.0)))
    async def rated(ctx: JobContext, payload: Rated) -> None:
        return None

    return app


app = make_app()
rated_app = make_rated_app()
