"""Settlement hooks across real worker processes: the hook job is staged by the settling
statement, so a worker SIGKILLed right after its ack (before it could do anything more)
does not lose it; another worker process runs it, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import App, JobContext, RetryPolicy, SettledJob, fresh_key
from sqljobs._client import queries
from sqljobs._client.connection import Client
from tests.processes import CliProcess, wait_for

pytestmark = pytest.mark.slow

MAIN, AFTER = "hooks_main", "hooks_after"
EFFECTS = """
create table if not exists public.hook_effects (
  job_id  bigint not null,
  state   text not null,
  kind    text not null
)
"""


class Order(BaseModel):
    order: int
    fail: bool = False


app = App()


@app.job(name="hooks.after", queue=AFTER)
async def after(ctx: JobContext, payload: SettledJob) -> None:
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
        await conn.execute("insert into public.hook_effects values (%s, %s, 'settled')",
                           (payload.job_id, payload.state.value))


@app.job(name="hooks.exhausted", queue=AFTER)
async def exhausted(ctx: JobContext, payload: SettledJob) -> None:
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
        await conn.execute("insert into public.hook_effects values (%s, %s, 'exhausted')",
                           (payload.job_id, (payload.error or {}).get("message", "")))


@app.job(name="hooks.main", queue=MAIN, on_settled=after, on_exhausted=exhausted,
         retry=RetryPolicy(max_attempts=1))
async def main(ctx: JobContext, payload: Order) -> str:
    if payload.fail:
        raise RuntimeError(f"order {payload.order} refused")
    return "shipped"


def worker(dsn: str, log: Path, queue: str) -> CliProcess:
    return CliProcess(dsn, log, "worker", "tests.test_hooks_processes:app", "--queue", queue,
                      "--poll-interval", "0.2", "--concurrency", "2")


def test_a_worker_killed_right_after_its_ack_loses_no_hook(
        conn: psycopg.Connection[Any], db_dsn: str, tmp_path: Path) -> None:
    conn.execute(EFFECTS)
    main_handle = app.job_handle("hooks.main")
    client = Client(conn)
    ok = client.run(queries.enqueue_spec(main_handle.spec({"order": 1}, key=fresh_key()))).id
    bad = client.run(queries.enqueue_spec(
        main_handle.spec({"order": 2, "fail": True}, key=fresh_key()))).id
    first = worker(db_dsn, tmp_path / "main.log", MAIN)
    try:
        wait_for(lambda: conn.execute(
            "select count(*) = 2 from jobs.job where id = any(%s) and finished_at is not null",
            ([ok, bad],)).fetchone() == (True,), "both jobs settled")
    finally:
        first.kill()  # SIGKILL at once: whatever the worker held in memory is gone
    assert conn.execute("select count(*) from hook_effects").fetchone() == (0,)  # not yet run

    second = worker(db_dsn, tmp_path / "after.log", AFTER)
    try:
        wait_for(lambda: conn.execute("select count(*) = 3 from hook_effects").fetchone()
                 == (True,), "the three hooks run by another worker")
        assert second.proc.poll() is None
    finally:
        second.proc.terminate()
        second.wait(30)
    rows = sorted(conn.execute("select job_id, state, kind from hook_effects").fetchall())
    assert rows == sorted([(ok, "succeeded", "settled"), (bad, "dead", "settled"),
                           (bad, "order 2 refused", "exhausted")])


def test_a_hook_is_a_declared_job_or_a_name() -> None:
    other = App("postgresql://unused")
    with pytest.raises(Exception, match="hook is a job handle or a job name"):
        other.job(name="x", on_settled="")(main.definition.fn)
    spec = app.job_handle("hooks.main").spec({"order": 1}, key="k")
    assert spec.hooks == {"settled": {"name": "hooks.after", "queue": AFTER},
                          "exhausted": {"name": "hooks.exhausted", "queue": AFTER}}
