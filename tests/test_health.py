"""`sqljobs worker --health-port`: real HTTP against a real worker process.

The app below has a handler that blocks the worker's event loop (an `async def` that
calls time.sleep) and one that awaits: the first must turn /healthz to 503 while it
blocks, the second keeps a drain going so /readyz can be seen at 503 while /healthz is 200.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

APP = '''
import asyncio
import time

from pydantic import BaseModel

from sqljobs import App, JobContext

app = App()


class Seconds(BaseModel):
    seconds: float


@app.job(queue="health")
async def block_loop(ctx: JobContext, payload: Seconds) -> None:
    time.sleep(payload.seconds)  # on purpose: nothing else on the loop runs meanwhile


@app.job(queue="health")
async def wait_politely(ctx: JobContext, payload: Seconds) -> None:
    await asyncio.sleep(payload.seconds)
'''


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


@pytest.fixture
def worker(db_dsn: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    (tmp_path / "health_app.py").write_text(APP)
    port = free_port()
    env = {**os.environ, "SQLJOBS_DSN": db_dsn, "PYTHONPATH": str(tmp_path)}
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("sqljobs")), "worker", "health_app:app",
         "--health-port", str(port), "--health-stall", "2", "--poll-interval", "0.2",
         "--drain-timeout", "60"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=60)


def enqueue(dsn: str, name: str, key: str, seconds: float) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue(%s, %s, %s::jsonb, '{\"queue\": \"health\"}')",
                     (f"health_app.{name}", key, f'{{"seconds": {seconds}}}'))


def state_of(dsn: str, key: str) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select state::text from jobs.job where key = %s", (key,)).fetchone()
    return row[0] if row else None


def reachable(port: int) -> bool:
    try:
        get(port, "/healthz")
    except OSError:
        return False
    return True


def test_probes_follow_the_worker_loop_and_its_drain(
        worker: tuple[subprocess.Popen[str], int], db_dsn: str) -> None:
    process, port = worker
    wait_for(lambda: reachable(port), "the probe server listens")
    wait_for(lambda: get(port, "/readyz")[0] == 200, "the worker is ready")
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/readyz") == (200, "ready\n")
    assert get(port, "/metrics")[0] == 404

    # a handler blocks the loop for 8 s: /healthz says so (the probes have their own loop)
    enqueue(db_dsn, "block_loop", "blocker", 8)
    wait_for(lambda: get(port, "/healthz")[0] == 503, "/healthz reports the stuck loop")
    status, reason = get(port, "/healthz")
    assert status == 503 and "event loop has not run" in reason, reason
    assert get(port, "/readyz")[0] == 503  # not ready while dead either
    wait_for(lambda: state_of(db_dsn, "blocker") == "succeeded", "the blocking job ends")
    wait_for(lambda: get(port, "/healthz")[0] == 200, "/healthz recovers with the loop")

    # draining: still alive, no longer ready
    enqueue(db_dsn, "wait_politely", "slow", 30)
    wait_for(lambda: state_of(db_dsn, "slow") == "running", "the slow job runs")
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: get(port, "/readyz")[0] == 503, "/readyz reports the drain")
    assert "not claiming" in get(port, "/readyz")[1]
    assert get(port, "/healthz") == (200, "ok\n")
    process.send_signal(signal.SIGTERM)  # the second signal: stop now
    process.wait(timeout=60)
    assert not reachable(port)


def test_a_taken_port_is_a_clear_error(db_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "health_app.py").write_text(APP)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = subprocess.run(
            [str(Path(sys.executable).with_name("sqljobs")), "worker", "health_app:app",
             "--health-port", str(port)],
            cwd=tmp_path, env={**os.environ, "SQLJOBS_DSN": db_dsn, "PYTHONPATH": str(tmp_path)},
            capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 2, ran.stderr
    assert f"cannot serve the health probes on 0.0.0.0:{port}" in " ".join(ran.stderr.split())
