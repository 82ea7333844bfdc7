"""The worker's outcome log line names what the job became, not what the worker sent."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import App, JobContext, RetryPolicy, fresh_key
from tests.processes import wait_for
from tests.worker_helpers import running


class Nothing(BaseModel):
    pass


def test_a_last_failed_attempt_is_logged_dead_not_retry(
        conn: psycopg.Connection[Any], db_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    app = App(db_dsn)

    @app.job(name="log.once", queue="log_lines", retry=RetryPolicy(max_attempts=1))
    async def once(ctx: JobContext, payload: Nothing) -> None:
        raise RuntimeError("no luck")

    try:
        job_id = app.job_handle("log.once").enqueue({}, key=fresh_key()).id
        with caplog.at_level(logging.INFO, logger="sqljobs"), running(app, concurrency=1):
            wait_for(lambda: conn.execute("select state::text from jobs.job where id = %s",
                                          (job_id,)).fetchone() == ("dead",), "the dead job")
            wait_for(lambda: any(f"job {job_id} " in r.getMessage() for r in caplog.records),
                     "its log line")
    finally:
        app.close()
    [line] = [r for r in caplog.records if r.getMessage().startswith(f"job {job_id} ")]
    assert line.getMessage().startswith(f"job {job_id} log.once dead ")
    assert line.outcome == "dead"
