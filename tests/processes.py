"""Helpers for tests that run sqljobs commands as real processes and wait on the database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parent.parent


class CliProcess:
    """`sqljobs <args>` in a subprocess on `dsn` (as $SQLJOBS_DSN), its output in `log`."""

    def __init__(self, dsn: str, log: Path, *args: str, env: dict[str, str] | None = None):
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from sqljobs._cli import main; main()", *args],
            cwd=REPO, env={**os.environ, "SQLJOBS_DSN": dsn, **(env or {})},
            stdout=self._out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._out.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process must run to die
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()


@contextmanager
def spawner(dsn: str, directory: Path, *command: str) -> Iterator[Callable[..., CliProcess]]:
    """A factory of `sqljobs <command> <args>` processes, every one killed at the end."""
    started: list[CliProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> CliProcess:
        process = CliProcess(dsn, directory / f"{command[0] if command else 'sqljobs'}"
                             f"{len(started)}.log", *command, *args, env=env)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.kill()


def scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll `check` until it answers something true; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_lock_wait(conn: psycopg.Connection[Any], query_like: str, what: str) -> None:
    """Wait until a session whose current statement matches `query_like` (an ILIKE
    pattern) waits on a heavyweight lock: the moment a crash test kills its process in."""
    wait_for(lambda: scalar(conn, "select count(*) > 0 from pg_stat_activity "
                                  "where wait_event_type = 'Lock' and query ilike %s",
                            (query_like,)), what)


def kill_and_wait_sessions(conn: psycopg.Connection[Any], process: CliProcess) -> None:
    """SIGKILL a worker started with its default id (host:pid:suffix) and wait until the
    server holds no session of it: a statement it had sent before it died has then run to its
    end, so what it holds in the database no longer changes and can be read."""
    process.kill()
    pattern = f"^sqljobs-[a-z]+ [^:]*:{process.pid}:"
    wait_for(lambda: scalar(conn, "select count(*) = 0 from pg_stat_activity "
                                  "where application_name ~ %s", (pattern,)),
             f"the sessions of killed process {process.pid} to end")
