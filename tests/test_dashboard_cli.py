"""`sqljobs dashboard` as a real process, and the job's errors as `sqljobs jobs show`
prints them (the same attempt history and tracebacks the dashboard's job page shows).

The dashboard is started as a subprocess on a free port; the test waits until it answers
HTTP, sends SIGTERM, and expects a clean stop: exit code 0 (uvicorn shuts down, then the
signal it raises again is the command's clean exit, not a death by signal, 143).
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import psycopg
from typer.testing import CliRunner

from sqljobs._cli import app as cli
from sqljobs._client import queries
from sqljobs._client.connection import Client
from tests.processes import spawner, wait_for

TRACEBACK = ('Traceback (most recent call last):\n  File "app.py", line 7, in send\n'
             '    smtp.send(to)\nConnectionError: smtp.example.com refused')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_sigterm_stops_the_dashboard_cleanly_with_exit_code_0(db_dsn: str,
                                                              tmp_path: Path) -> None:
    port = _free_port()
    with spawner(db_dsn, tmp_path, "dashboard") as start:
        process = start("--port", str(port))
        url = f"http://127.0.0.1:{port}/"

        def up() -> bool:
            assert process.proc.poll() is None, process.output()
            return _answers(url)

        wait_for(up, "the dashboard to answer HTTP")
        assert "read-only" in httpx.get(url, timeout=5).text
        process.proc.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, process.output()
        assert not _answers(url)


def test_jobs_show_prints_every_attempt_and_the_traceback_as_its_lines(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    client = Client(conn)
    job_id = client.run(queries.enqueue("mail.send", "tb", {"to": "ada"},
                                        {"queue": "tb", "max_attempts": 2})).id
    for worker in ("w-one", "w-two"):
        job = client.run(queries.claim(["tb"], worker, 1))[0]
        client.run(queries.nack(job.id, job.claim, {"kind": "error", "message": "refused",
                                                    "traceback": TRACEBACK}, "retry", 0))
    shown = CliRunner().invoke(cli, ["jobs", "show", str(job_id), "--dsn", db_dsn])
    assert shown.exit_code == 0, shown.output
    out = shown.output
    attempts = out.split("# attempts\n")[1].split("\n\n")[0].splitlines()
    assert attempts[0].split("\t")[:3] == ["attempt", "outcome", "worker"]
    assert [row.split("\t")[:3] for row in attempts[1:]] == [["1/2", "retry", "w-one"],
                                                            ["2/2", "dead", "w-two"]]
    # piped, the traceback prints as its lines under a title, once, never as "\n" text
    assert "# traceback of the last error (error: refused)\n" + TRACEBACK in out
    assert out.count("Traceback (most recent call last):") == 1
    assert "\\n" not in out
