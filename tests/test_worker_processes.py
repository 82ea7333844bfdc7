"""The worker as real processes: SIGKILL mid-run, SIGTERM drains, a lost LISTEN connection.

Each worker is `sqljobs worker tests.worker_example_app:app` in a subprocess; its
handlers record every run's start and end with the claim token and the process id in
`public.worker_runs`, and the assertions read those records and the jobs table. Leases
are short (2 s) and polls fast so the whole file stays within seconds.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sqljobs import App, fresh_key
from tests.processes import CliProcess, scalar, spawner, wait_for
from tests.worker_example_app import QUEUE, RUNS_TABLE, make_app

pytestmark = pytest.mark.slow

LEASE_S = 2.0
POLL_S = 0.5


@pytest.fixture
def spawn(db_dsn: str, tmp_path: Path) -> Iterator[Callable[..., CliProcess]]:
    with spawner(db_dsn, tmp_path, "worker", "tests.worker_example_app:app",
                 "--queue", QUEUE, "--lease", str(LEASE_S)) as start:
        yield start


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    conn.execute(RUNS_TABLE)
    conn.execute("truncate public.worker_runs")
    example = make_app(db_dsn)
    yield example
    example.close()






def registered(conn: psycopg.Connection[Any], worker: CliProcess) -> Callable[[], Any]:
    def check() -> Any:
        assert worker.proc.poll() is None, worker.output()
        return scalar(conn, "select count(*) from jobs.workers() where pid = %s", (worker.pid,))
    return check


def test_a_sigkilled_workers_jobs_are_finished_by_another_within_lease_and_a_poll(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    ids = [e.id for e in app.job_handle("example.slow").enqueue_many(
        [({"seconds": 0.3}, fresh_key()) for _ in range(200)])]
    first = spawn("--concurrency", "10", "--poll-interval", str(POLL_S))
    wait_for(lambda: scalar(conn, "select count(*) >= 30 from public.worker_runs "
                                  "where event = 'end'"), "30 jobs to finish on the first worker")
    first.proc.kill()
    first.proc.wait(10)
    killed_at: datetime = scalar(conn, "select clock_timestamp()")
    in_flight = {r[0] for r in conn.execute(
        "select s.job_id from public.worker_runs s where s.event = 'start' and s.pid = %s "
        "and not exists (select 1 from public.worker_runs e where e.event = 'end' "
        "and e.job_id = s.job_id and e.claim = s.claim)", (first.pid,))}
    assert in_flight, "the kill must land while jobs run"
    done_before = scalar(conn, "select count(*) from jobs.job where state = 'succeeded'")
    assert done_before < 200

    second = spawn("--concurrency", "50", "--poll-interval", str(POLL_S))
    wait_for(lambda: scalar(conn, "select count(*) = 1 from jobs.worker where pid = %s",
                            (second.pid,)), "the second worker to register", timeout=30)
    second_ready: datetime = scalar(conn, "select started_at from jobs.worker where pid = %s",
                                    (second.pid,))
    wait_for(lambda: scalar(conn, "select count(*) = 200 from jobs.job where id = any(%s) "
                                  "and state = 'succeeded'", (ids,)),
             "every job to succeed", timeout=30)
    second.proc.send_signal(signal.SIGTERM)
    assert second.wait(15) == 0, second.output()

    runs: dict[tuple[int, int], dict[str, Any]] = {}
    for job_id, claim, pid, event, at in conn.execute(
            "select job_id, claim, pid, event, at from public.worker_runs order by at"):
        run = runs.setdefault((job_id, claim), {"pid": pid, "start": None, "end": None})
        assert run[event] is None, f"claim {claim} of job {job_id} ran twice: {event}"
        assert run["pid"] == pid, f"claim {claim} of job {job_id} ran in two processes"
        run[event] = at
    final = dict(conn.execute("select id, claim from jobs.job where id = any(%s)", (ids,)))
    by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for (job_id, claim), run in runs.items():
        by_job[job_id].append({"claim": claim, **run})

    for job_id in ids:
        job_runs = sorted(by_job[job_id], key=lambda r: r["start"])
        # Exactly one successful end: the run under the claim the job was acked with.
        winners = [r for r in job_runs if r["claim"] == final[job_id] and r["end"] is not None]
        assert len(winners) == 1, (job_id, job_runs)
        # No two runs at once: a later run starts after the earlier one ended, or after
        # the earlier one's lease lapsed (its process was killed mid-run).
        for earlier, later in itertools.pairwise(job_runs):
            if earlier["end"] is not None:
                assert later["start"] >= earlier["end"], (job_id, job_runs)
            else:
                assert earlier["pid"] == first.pid, (job_id, job_runs)
                gap = (later["start"] - earlier["start"]).total_seconds()
                assert gap >= LEASE_S - 0.5, (job_id, job_runs)

    # The killed worker's in-flight jobs ran again within lease TTL + one poll of a live
    # worker: counted from the kill, or from the second worker's start when that came
    # later (process start-up is not what this proves), plus a second for round trips.
    recoverable_at = max(killed_at + timedelta(seconds=LEASE_S), second_ready)
    for job_id in in_flight:
        rerun = max(r["start"] for r in by_job[job_id])
        delay = (rerun - recoverable_at).total_seconds()
        assert delay <= POLL_S + 1.0, (job_id, delay)
    recovered = conn.execute(
        "select attempt, last_error->>'kind' from jobs.job where id = any(%s)",
        (list(in_flight),)).fetchall()
    assert all(row == (2, "lease_expired") for row in recovered), recovered


def test_sigterm_drains_then_sends_the_rest_back_interrupted(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    slow, slow_sync = app.job_handle("example.slow"), app.job_handle("example.slow_sync")
    short = [slow.enqueue({"seconds": 1.0}, key=fresh_key()).id,
             slow_sync.enqueue({"seconds": 1.0}, key=fresh_key()).id]
    long = [slow.enqueue({"seconds": 60}, key=fresh_key()).id,
            slow_sync.enqueue({"seconds": 60}, key=fresh_key()).id]
    worker = spawn("--concurrency", "4", "--poll-interval", "0.2", "--drain-timeout", "2.5")
    wait_for(lambda: scalar(conn, "select count(*) = 4 from public.worker_runs "
                                  "where event = 'start'"), "four runs to start")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.output()
    # the drain let the 1 s runs finish (after the signal: they were running at it) and
    # cut off the 60 s ones at its timeout (far sooner than they would have ended)
    assert scalar(conn, "select count(*) from public.worker_runs where event = 'end' "
                        "and job_id = any(%s)", (long,)) == 0

    states = dict(conn.execute(
        "select id, state::text from jobs.job where id = any(%s)", (short + long,)))
    assert [states[i] for i in short] == ["succeeded", "succeeded"]
    assert [states[i] for i in long] == ["interrupted", "interrupted"]
    rows = conn.execute("select attempt, last_error->>'kind' from jobs.job where id = any(%s)",
                        (long,)).fetchall()
    assert rows == [(0, "interrupted"), (0, "interrupted")]  # not counted as an attempt
    output = worker.output()
    assert "draining" in output and "drain cut-off: 2 job(s)" in output

    # They run later, on the next worker.
    again = spawn("--concurrency", "4", "--poll-interval", "0.2", env={"EXAMPLE_FAST": "1"})
    wait_for(lambda: scalar(conn, "select count(*) = 2 from jobs.job where id = any(%s) "
                                  "and state = 'succeeded'", (long,)), "the interrupted jobs")
    assert conn.execute("select attempt from jobs.job where id = any(%s)",
                        (long,)).fetchall() == [(1,), (1,)]
    again.proc.send_signal(signal.SIGTERM)
    assert again.wait(15) == 0


def test_a_second_signal_stops_at_once(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    job_id = app.job_handle("example.slow").enqueue({"seconds": 60}, key=fresh_key()).id
    worker = spawn("--concurrency", "2", "--poll-interval", "0.2", "--drain-timeout", "30")
    wait_for(lambda: scalar(conn, "select count(*) from public.worker_runs"), "the run to start")
    worker.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "draining" in worker.output(), "the first signal to start the drain")
    worker.proc.send_signal(signal.SIGINT)
    # the drain gives the 60 s run 30 s: an exit within 15 s is the second signal's
    assert worker.wait(15) == 1, worker.output()
    assert scalar(conn, "select state::text from jobs.job where id = %s",
                  (job_id,)) == "interrupted"


def listen_backends(conn: psycopg.Connection[Any]) -> list[int]:
    return [r[0] for r in conn.execute(
        "select pid from pg_stat_activity where datname = current_database() "
        "and application_name like 'sqljobs-listen%%'")]


def run_echo(app: App, conn: psycopg.Connection[Any], within: float) -> None:
    """Enqueue an echo job and wait for it to succeed, for at most `within` seconds."""
    job_id = app.job_handle("example.echo").enqueue({"n": 1}, key=fresh_key()).id
    wait_for(lambda: scalar(conn, "select state = 'succeeded' from jobs.job where id = %s",
                            (job_id,)), "the echo job", within)


def test_a_worker_without_listen_polls(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    worker = spawn("--concurrency", "2", "--poll-interval", "0.2", "--no-listen")
    wait_for(registered(conn, worker), "the worker to register")
    assert not listen_backends(conn)
    run_echo(app, conn, within=60)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0


def test_a_lost_listen_connection_is_logged_and_reconnects(
        app: App, conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    # A poll far apart: a job done well within it was woken by NOTIFY (or, while LISTEN
    # is down, by the catch-up wake of its reconnection), on any machine.
    poll_s, retry_s = 120.0, 1.0
    worker = spawn("--concurrency", "2", "--poll-interval", str(poll_s),
                   "--listen-retry", str(retry_s))
    wait_for(registered(conn, worker), "the worker to register")
    first_listener = wait_for(lambda: listen_backends(conn), "the LISTEN connection")
    run_echo(app, conn, within=poll_s / 2)  # woken by NOTIFY, not by a poll

    # `sqljobs workers` lists it.
    listing = subprocess.run(
        [sys.executable, "-c", "from sqljobs._cli import main; main()", "workers", "--dsn",
         conn.info.dsn], capture_output=True, text=True, check=True, env={
             **os.environ, "COLUMNS": "250"})
    assert "1 live worker(s)" in listing.stdout and str(worker.pid) in listing.stdout

    conn.execute("select pg_terminate_backend(pid) from pg_stat_activity "
                 "where pid = any(%s)", (first_listener,))
    wait_for(lambda: "LISTEN jobs_wake connection lost" in worker.output(), "the loss logged")
    run_echo(app, conn, within=poll_s / 2)  # enqueued while LISTEN may still be down
    wait_for(lambda: "LISTEN jobs_wake reconnected" in worker.output(),
             "the LISTEN connection to come back", timeout=poll_s / 2)
    assert listen_backends(conn) and listen_backends(conn) != first_listener
    for _ in range(3):
        run_echo(app, conn, within=poll_s / 2)  # NOTIFY wakes it again

    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    output = worker.output()
    assert "LISTEN jobs_wake connection lost" in output and "LISTEN jobs_wake reconnected" in output
    assert f"queues={QUEUE} concurrency=2" in output  # the start banner
