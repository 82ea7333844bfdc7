"""`sqljobs worker --processes N`: real processes under a real supervisor.

The supervisor runs `sqljobs worker tests.worker_example_app:app` N times; the handlers
record each run (job, claim, pid) in `public.worker_runs`. The assertions read those
records, `jobs.workers()` and the jobs table, and signal the processes themselves.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sqljobs import App, fresh_key
from tests.processes import CliProcess, scalar, spawner, wait_for
from tests.worker_example_app import QUEUE, RUNS_TABLE, make_app

pytestmark = pytest.mark.slow


@pytest.fixture
def spawn(db_dsn: str, tmp_path: Path) -> Iterator[Callable[..., CliProcess]]:
    with spawner(db_dsn, tmp_path, "worker", "tests.worker_example_app:app",
                 "--queue", QUEUE, "--lease", "2", "--poll-interval", "0.5") as start:
        yield start


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    conn.execute(RUNS_TABLE)
    conn.execute("truncate public.worker_runs")
    example = make_app(db_dsn)
    yield example
    example.close()


def workers(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute("select id, pid from jobs.workers()").fetchall())


def registered(conn: psycopg.Connection[Any], count: int) -> Callable[[], dict[str, int] | None]:
    """A check for wait_for: the live workers (id -> pid) once there are `count`."""
    def check() -> dict[str, int] | None:
        live = workers(conn)
        return live if len(live) == count else None
    return check


def test_processes_share_the_work_under_one_family_of_ids_and_drain_together(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    ids = [e.id for e in app.job_handle("example.slow").enqueue_many(
        [({"seconds": 0.05}, fresh_key()) for _ in range(300)])]
    supervisor = spawn("--processes", "2", "--id", "pod-a", "--concurrency", "4")
    family = wait_for(registered(conn, 2), "two worker processes registered")
    assert set(family) == {"pod-a/1", "pod-a/2"}
    assert supervisor.pid not in family.values()
    # both processes run jobs: each pid shows up in the runs
    wait_for(lambda: scalar(conn, "select count(distinct pid) from public.worker_runs "
                                  "where pid = any(%s)", (list(family.values()),)) == 2,
             "jobs run in both processes")

    supervisor.proc.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.output()
    assert workers(conn) == {}, "every process deregistered on its way out"
    assert scalar(conn, "select count(*) from jobs.job where id = any(%s) and state = 'running'",
                  (ids,)) == 0, "a drain leaves no job running"
    unfinished = scalar(conn, "select count(*) from public.worker_runs s where s.event = 'start' "
                              "and not exists (select 1 from public.worker_runs e "
                              "where e.event = 'end' and e.job_id = s.job_id "
                              "and e.claim = s.claim)")
    assert unfinished == 0, "every run that started finished: the processes drained"
    output = supervisor.output()
    assert "drain: passing SIGTERM to 2 worker process(es)" in output
    assert "exited with code 0" in output
    assert output.rstrip().endswith("supervisor stopped: 2 worker process(es) ended, exit code 0")


def test_a_killed_process_is_started_again_under_its_id(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    supervisor = spawn("--processes", "2", "--id", "pod-b")
    first = wait_for(registered(conn, 2), "two worker processes registered")
    victim = first["pod-b/1"]
    os.kill(victim, signal.SIGKILL)

    def restarted() -> dict[str, int] | None:
        live = workers(conn)
        return live if live.get("pod-b/1") not in (None, victim) else None

    again = wait_for(restarted, "pod-b/1 registered again under a new process")
    assert again["pod-b/2"] == first["pod-b/2"], "the other process was left alone"
    assert "worker process 1" in supervisor.output() and "starting it again" in supervisor.output()
    # the restarted process runs jobs
    job = app.job_handle("example.echo").enqueue({"n": 1}, key=fresh_key())
    wait_for(lambda: scalar(conn, "select state = 'succeeded' from jobs.job where id = %s",
                            (job.id,)), "a job to run after the restart")
    supervisor.proc.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.output()


def test_a_second_signal_stops_every_process_at_once(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    ids = [e.id for e in app.job_handle("example.slow").enqueue_many(
        [({"seconds": 30}, fresh_key()) for _ in range(4)])]
    supervisor = spawn("--processes", "2", "--id", "pod-c", "--concurrency", "2",
                       "--drain-timeout", "60")
    wait_for(lambda: scalar(conn, "select count(*) = 4 from jobs.job where id = any(%s) "
                                  "and state = 'running'", (ids,)), "four long jobs running")
    supervisor.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "drain: passing SIGTERM" in supervisor.output(), "the drain passed on")
    supervisor.proc.send_signal(signal.SIGINT)
    assert supervisor.wait(30) == 1, supervisor.output()
    assert scalar(conn, "select count(*) from jobs.job where id = any(%s) "
                        "and state = 'interrupted'", (ids,)) == 4, \
        "stopped at once, every running job went back interrupted"


def test_processes_must_be_at_least_one(spawn: Callable[..., CliProcess]) -> None:
    refused = spawn("--processes", "0")
    assert refused.wait(30) == 2
    assert "--processes" in refused.output()
