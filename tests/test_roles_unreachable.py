"""A worker, relay or scheduler whose database cannot be reached at start-up stops at
once with one line naming the cause (exit code 1), never a traceback nor a minute of
psycopg.pool warnings.

Each runs as `sqljobs <role> tests.worker_example_app:app`, a subprocess, against a
local port nothing listens on (bound, then closed): the connection is refused outright,
so the role must fail on its first attempt. The tests wait on the process's exit; the
timeout only guards a hang.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import psycopg
import pytest

from sqljobs._runtime.lifecycle import reason_of, where_of
from tests.processes import REPO

pytestmark = pytest.mark.slow


def closed_port() -> int:
    """A local TCP port nothing listens on: bound by this process, then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("args", [
    pytest.param(["worker"], id="worker"),
    pytest.param(["relay"], id="relay"),
    pytest.param(["scheduler"], id="scheduler"),
    pytest.param(["worker", "--with-relay", "--with-scheduler"], id="worker-with-all"),
])
def test_a_role_whose_database_refuses_the_connection_stops_with_one_line(
        args: list[str]) -> None:
    port = closed_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SQLJOBS_DSN", "DATABASE_URL")}
    env["SQLJOBS_DSN"] = f"postgresql://postgres:s3cr3t-pw@127.0.0.1:{port}/postgres"
    result = subprocess.run(
        [sys.executable, "-c", "from sqljobs._cli import main; main()", args[0],
         "tests.worker_example_app:app", *args[1:]],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "s3cr3t-pw" not in result.stderr + result.stdout
    assert len(lines) == 1, result.stderr
    assert re.fullmatch(rf"sqljobs {args[0]}: cannot connect to the database at "
                        rf"127\.0\.0\.1:{port}: Connection refused", lines[0]), lines[0]


@pytest.mark.parametrize(("dsn", "where"), [
    ("postgresql://u:pw@db.internal:6543/app", "db.internal:6543"),
    ("host=10.0.0.5 user=u password=pw dbname=app", "10.0.0.5:5432"),
    ("postgresql://u:pw@/app?host=/run/postgresql&port=5433", "/run/postgresql:5433"),
])
def test_the_line_names_host_and_port_never_the_password(
        dsn: str, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGHOST", raising=False)
    monkeypatch.delenv("PGPORT", raising=False)
    assert where_of(dsn) == where


@pytest.mark.parametrize(("message", "reason"), [
    ('connection failed: connection to server at "127.0.0.1", port 1 failed: Connection '
     'refused\n\tIs the server running on that host and accepting TCP/IP connections?',
     "Connection refused"),
    ('connection failed: connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  '
     'password authentication failed for user "app"',
     'FATAL: password authentication failed for user "app"'),
    ('connection failed: connection to server on socket "/run/postgresql/.s.PGSQL.5432" '
     'failed: FATAL:  the database system is starting up',
     "FATAL: the database system is starting up"),
])
def test_the_reason_is_what_libpq_says_after_where(message: str, reason: str) -> None:
    assert reason_of(psycopg.OperationalError(message)) == reason
