"""The worker's claim cursor (pyclient/sqljobs/_runtime/worker/claiming.py): between
polls it claims each queue from the place in line of the last job it took there (a few
seconds back), so a snapshot held open elsewhere does not make every claim step over
the jobs claimed since; a job put back in line behind that place is taken by the poll.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from pydantic import BaseModel

from sqljobs import App, JobContext
from sqljobs._client import queries
from sqljobs._client.connection import Client
from tests.processes import scalar, wait_for
from tests.worker_helpers import running

QUEUE = "cursor"


class Empty(BaseModel):
    pass


def cursor_app(dsn: str) -> App:
    app = App(dsn)

    @app.job(name="cursor.job", queue=QUEUE)
    async def job(ctx: JobContext, payload: Empty) -> None:
        return None

    return app


def state_of(conn: psycopg.Connection[Any], key: str) -> str:
    return str(scalar(conn, "select state::text from jobs.job where key = %s", (key,)))


def first_then_behind_and_after(app: App, conn: psycopg.Connection[Any]) -> None:
    """Run 'first' (the worker's cursor is then at its place), then enqueue in one
    transaction 'behind', in line an hour before it (an explicit past run_at), and
    'after', due now."""
    app.job_handle("cursor.job").enqueue({}, key="first")
    wait_for(lambda: state_of(conn, "first") == "succeeded", "the first job to run")
    run_at = conn.execute("select run_at from jobs.job where key = 'first'").fetchone()
    assert run_at is not None
    with conn.transaction():
        client = Client(conn)
        client.run(queries.enqueue("cursor.job", "behind", {}, {
            "queue": QUEUE, "run_at": (run_at[0] - timedelta(hours=1)).isoformat()}))
        client.run(queries.enqueue("cursor.job", "after", {}, {"queue": QUEUE}))


def test_between_polls_the_worker_claims_from_its_cursor(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = cursor_app(db_dsn)
    try:
        # the worker polls once, as it starts, and not again within the test
        with running(app, poll_interval=3600.0):
            first_then_behind_and_after(app, conn)
            wait_for(lambda: state_of(conn, "after") == "succeeded",
                     "the job after the cursor to run")
            # the wake-up's claim took 'after' from the cursor and stepped past 'behind',
            # which a claim from the head would have taken first
            assert state_of(conn, "behind") == "ready"
    finally:
        app.close()


def test_a_job_behind_the_cursor_is_taken_by_the_next_poll(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = cursor_app(db_dsn)
    try:
        with running(app, poll_interval=0.5):
            first_then_behind_and_after(app, conn)
            wait_for(lambda: state_of(conn, "behind") == "succeeded",
                     "the job behind the cursor to run, on a poll")
            wait_for(lambda: state_of(conn, "after") == "succeeded", "the job after it")
    finally:
        app.close()
