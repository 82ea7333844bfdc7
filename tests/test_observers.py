"""Observers (sqljobs._runtime.observing): what a worker tells metrics and tracing.

A real worker against the real database, with an observer that records each hook: every
run begins and ends once with its outcome's label, the handler (async and sync) runs
inside the context its watch made active, and an observer that raises costs no job.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from pydantic import BaseModel

from sqljobs import App, RetryPolicy, fresh_key
from sqljobs._client.records import ClaimedJob
from sqljobs._runtime.context import JobContext
from sqljobs._runtime.observing import RunObserver, RunWatch
from tests.processes import wait_for
from tests.worker_helpers import running

QUEUE = "observed"
current_run: contextvars.ContextVar[int | None] = contextvars.ContextVar("current_run",
                                                                         default=None)


class Nothing(BaseModel):
    pass


class Recorder(RunObserver):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.begun: list[int] = []
        self.ended: dict[int, tuple[str, str | None]] = {}
        self.claimed_jobs = 0

    def run_begins(self, job: ClaimedJob) -> RunWatch:
        with self.lock:
            self.begun.append(job.id)
        recorder = self

        class Watch(RunWatch):
            @contextlib.contextmanager
            def active(self) -> Iterator[None]:
                token = current_run.set(job.id)
                try:
                    yield
                finally:
                    current_run.reset(token)

            def ended(self, label: str, error: Mapping[str, Any] | None,
                      duration_s: float) -> None:
                assert duration_s >= 0
                with recorder.lock:
                    recorder.ended[job.id] = (label, (error or {}).get("kind"))

        return Watch()

    def claimed(self, count: int, seconds: float) -> None:
        with self.lock:
            self.claimed_jobs += count


class Broken(RunObserver):
    def run_begins(self, job: ClaimedJob) -> RunWatch:
        raise RuntimeError("this observer is broken")

    def claimed(self, count: int, seconds: float) -> None:
        raise RuntimeError("this observer is broken")


def make_app(dsn: str) -> App:
    app = App(dsn)

    @app.job(name="observed.seen", queue=QUEUE)
    async def seen(ctx: JobContext, payload: Nothing) -> int | None:
        return current_run.get()

    @app.job(name="observed.seen_sync", queue=QUEUE)
    def seen_sync(ctx: JobContext, payload: Nothing) -> int | None:
        return current_run.get()

    @app.job(name="observed.fails", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    async def fails(ctx: JobContext, payload: Nothing) -> None:
        raise ValueError("no")

    return app


def results(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, tuple[str, Any]]:
    rows = conn.execute("select id, state::text, result from jobs.job where id = any(%s)",
                        (ids,)).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def test_observer_sees_each_run_once_and_the_handler_runs_inside_its_watch(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = make_app(db_dsn)
    recorder = Recorder()
    try:
        ids = [app.job_handle(name).enqueue({}, key=fresh_key()).id
               for name in ("observed.seen", "observed.seen_sync", "observed.fails")]
        with running(app, queues=[QUEUE], observers=[recorder, Broken()]):
            wait_for(lambda: len(recorder.ended) == 3, what="three runs ended")
        seen, seen_sync, fails = ids
        assert results(conn, ids) == {seen: ("succeeded", seen),
                                      seen_sync: ("succeeded", seen_sync),
                                      fails: ("dead", None)}
        assert sorted(recorder.begun) == sorted(ids)
        assert recorder.ended == {seen: ("succeeded", None), seen_sync: ("succeeded", None),
                                  fails: ("dead", "error")}
        assert recorder.claimed_jobs == 3
    finally:
        app.close()
