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
