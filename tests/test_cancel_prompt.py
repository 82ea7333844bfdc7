"""An operator's cancel reaches the running handler by NOTIFY (jobs_wake carries the
worker's token), not at the next heartbeat: with heartbeats 200 s apart, the handler
still stops, and the job is cancelled, well within the wait below."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from pydantic import BaseModel

from sqljobs import App, JobContext, fresh_key
from tests.processes import wait_for
from tests.worker_helpers import running


class Nothing(BaseModel):
    pass


def test_a_cancel_stops_the_running_handler_without_waiting_for_a_heartbeat(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    app = App(db_dsn)
    stopped: dict[str, float] = {}

    @app.job(name="cancel.long", queue="cancel_prompt")
    async def long(ctx: JobContext, payload: Nothing) -> None:
        try:  # an async run is stopped by cancelling its task (or it sees the flag)
            while not ctx.cancelled.is_set():
                await asyncio.sleep(0.01)
        finally:
            stopped["at"] = time.monotonic()

    try:
        job_id = app.job_handle("cancel.long").enqueue({}, key=fresh_key()).id
        # lease 600 s: heartbeats 200 s apart, far beyond the waits below
        with running(app, concurrency=1, lease_s=600.0):
            wait_for(lambda: conn.execute("select state::text from jobs.job where id = %s",
                                          (job_id,)).fetchone() == ("running",), "the run")
            sent = time.monotonic()
            conn.execute("select jobs.cancel(%s)", (job_id,))
            wait_for(lambda: "at" in stopped, "the handler to hear the cancel")
    finally:
        app.close()
    print(f"cancel to handler stopped: {(stopped['at'] - sent) * 1000:.1f} ms")
    assert conn.execute("select state::text from jobs.job where id = %s",
                        (job_id,)).fetchone() == ("cancelled",)


def test_a_stopped_run_writes_nothing(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """Inside a run, an enqueue goes through while the run holds its job; once the job
    is cancelled the handler's follow-up enqueue and event are refused (RunCancelled)
    and nothing of them is written."""
    app = App(db_dsn)
    seen: dict[str, Any] = {}

    @app.job(name="cancel.followup", queue="cancel_prompt_after")
    def followup(ctx: JobContext, payload: Nothing) -> None:
        pass

    @app.job(name="cancel.writer", queue="cancel_prompt")
    def writer(ctx: JobContext, payload: Nothing) -> None:
        followup.enqueue({}, key=f"before-{ctx.job_id}")   # held: written
        seen["started"] = True
        ctx.cancelled.wait(60)                            # a sync handler sees the flag
        for what, write in (("enqueue", lambda: followup.enqueue({}, key=f"after-{ctx.job_id}")),
                            ("event", lambda: app.emit_event("cancel.after", {"job": ctx.job_id}))):
            try:
                write()
                seen[what] = "written"
            except Exception as error:
                seen[what] = type(error).__name__

    try:
        job_id = app.job_handle("cancel.writer").enqueue({}, key=fresh_key()).id
        with running(app, concurrency=1, lease_s=600.0):
            wait_for(lambda: seen.get("started"), "the run")
            conn.execute("select jobs.cancel(%s)", (job_id,))
            wait_for(lambda: "event" in seen, "the handler's writes after the cancel")
    finally:
        app.close()
    assert seen["enqueue"] == "RunCancelled" and seen["event"] == "RunCancelled"
    keys = [r[0] for r in conn.execute("select key from jobs.job where name = 'cancel.followup'")]
    assert keys == [f"before-{job_id}"]
    assert conn.execute("select count(*) from jobs.event where name = 'cancel.after'"
                        ).fetchone() == (0,)
