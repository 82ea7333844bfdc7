"""Shared helpers for tests that open their own sessions (races, state machine, client).

Nothing here mocks the database: every helper talks to the real server behind `db_dsn`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

# Safety net for helpers that wait on the server: a bug turns into a failure instead of a
# hung test run. It is never the argument of an assertion.
SAFETY_S = 30.0


@contextmanager
def session(dsn: str, fake_now: datetime | None = None) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection of its own, optionally with `jobs.fake_now` set."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if fake_now is not None:
            set_clock(conn, fake_now)
        yield conn


def set_clock(conn: psycopg.Connection[Any], when: datetime) -> None:
    """Make jobs.now() answer `when` on this session (`set jobs.fake_now = ...`)."""
    conn.execute("select pg_catalog.set_config('jobs.fake_now', %s, false)", (when.isoformat(),))


def empty_jobs_tables(conn: psycopg.Connection[Any]) -> None:
    """Truncate every table in the jobs schema but jobs.channel_key, the install's secret
    (the sequence of job ids keeps counting)."""
    tables = [
        row[0]
        for row in conn.execute(
            "select format('%I.%I', schemaname, tablename) from pg_catalog.pg_tables "
            "where schemaname = 'jobs' and tablename <> 'channel_key'"
        ).fetchall()
    ]
    if tables:
        conn.execute("truncate " + ", ".join(tables))  # type: ignore[arg-type]


def run_together(fns: list[Callable[[], T]]) -> list[T]:
    """Run each function in its own thread, released together by a barrier.

    Answers their results in order; the first exception raised by any of them is raised
    here (after every thread has finished).
    """
    barrier = threading.Barrier(len(fns))

    def start(fn: Callable[[], T]) -> T:
        barrier.wait(timeout=SAFETY_S)
        return fn()

    with ThreadPoolExecutor(max_workers=len(fns)) as pool:
        futures = [pool.submit(start, fn) for fn in fns]
        return [future.result() for future in futures]


def wait_until_blocked_on_lock(observer: psycopg.Connection[Any], pid: int) -> None:
    """Return once pg_stat_activity shows backend `pid` waiting for a lock.

    This is how a test proves an interleaving (Absurd's lock-ordering tests): it polls
    the server's own view of the waiting session instead of sleeping and hoping.
    """
    deadline = time.monotonic() + SAFETY_S
    while time.monotonic() < deadline:
        row = observer.execute(
            "select wait_event_type from pg_catalog.pg_stat_activity where pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.005)
    raise AssertionError(f"backend {pid} never waited for a lock")
