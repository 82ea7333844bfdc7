"""Crash recovery and stalls, as real `sqljobs worker` processes (issue: a recovered job
keeps its place; a stale run stops before its next step; a dropped connection costs no
attempt).

- A SIGKILLed worker's jobs, recovered under a backlog, run again while the backlog is
  still there: they keep their place in line instead of queueing behind it. (How soon
  after the kill is printed here, and measured by the chaos suite: lease TTL + one poll.)
- A worker stopped (SIGSTOP) longer than its lease and then resumed starts no step
  function and no prefetched run after another worker took its jobs over, and logs no
  unretrieved task exception.
- Backends terminated (`pg_terminate_backend`) under jobs storing steps cost no attempt.
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.processes import CliProcess, kill_and_wait_sessions, scalar, spawner, wait_for
from tests.stall_example_app import EFFECTS_TABLE
from tests.stall_example_app import QUEUE as STALL_QUEUE
from tests.worker_example_app import QUEUE as EXAMPLE_QUEUE
from tests.worker_example_app import RUNS_TABLE

pytestmark = pytest.mark.slow

LEASE_S = 2.0
POLL_S = 0.5
BACKLOG = int(os.environ.get("SQLJOBS_STALL_BACKLOG", "2000"))  # `make test-stalls`: 20,000


@pytest.fixture
def spawn(db_dsn: str, tmp_path: Path) -> Iterator[Callable[..., CliProcess]]:
    with spawner(db_dsn, tmp_path, "worker") as start:
        yield start


def enqueue(conn: psycopg.Connection[Any], name: str, queue: str, payload: str,
            count: int) -> list[int]:
    return [r[0] for r in conn.execute(
        "select m.id from jobs.enqueue_many((select jsonb_agg(jsonb_build_object("
        "'name', %s::text, 'key', %s::text || i, 'queue', %s::text, "
        "'payload', %s::jsonb) order by i) from generate_series(1, %s) i)) m order by m.ord",
        (name, f"{name}-{time.monotonic_ns()}-", queue, payload, count))]


def held_by(conn: psycopg.Connection[Any], pid: int) -> dict[int, int]:
    """The jobs running under worker process `pid`: id -> claim."""
    return dict(conn.execute(
        "select id, claim from jobs.job where state = 'running' "
        "and split_part(worker, ':', 2)::int = %s", (pid,)).fetchall())


def test_a_killed_workers_jobs_keep_their_place_under_a_backlog(
        conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    conn.execute(RUNS_TABLE)
    conn.execute("truncate public.worker_runs")
    enqueue(conn, "example.slow", EXAMPLE_QUEUE, '{"seconds": 0.05}', BACKLOG)
    args = ("tests.worker_example_app:app", "--queue", EXAMPLE_QUEUE, "--concurrency", "4",
            "--lease", str(LEASE_S), "--poll-interval", str(POLL_S))
    victim, survivor = spawn(*args), spawn(*args)
    wait_for(lambda: scalar(conn, "select count(distinct pid) = 2 from public.worker_runs "
                                  "where event = 'end'"), "both workers to run jobs")
    kill_and_wait_sessions(conn, victim)
    killed_at: datetime = scalar(conn, "select clock_timestamp()")
    held = held_by(conn, victim.pid)  # final: no session of the victim is left
    assert held, "the victim held jobs when it was killed"

    def reruns() -> dict[int, datetime]:
        return dict(conn.execute(
            "select r.job_id, min(r.at) from public.worker_runs r "
            "where r.event = 'start' and r.pid = %s and r.job_id = any(%s) group by r.job_id",
            (survivor.pid, list(held))).fetchall())

    wait_for(lambda: len(reruns()) == len(held), "the survivor to run every recovered job",
             timeout=120)
    left = scalar(conn, "select count(*) from jobs.job where name = 'example.slow' "
                        "and state in ('ready', 'running')")
    assert left > BACKLOG // 10, "a backlog remained when the recovered jobs ran again"
    delays = sorted((at - killed_at).total_seconds() for at in reruns().values())
    print(f"kill to re-claim under a backlog of {left}: p50 {statistics.median(delays):.2f} s, "
          f"max {delays[-1]:.2f} s (lease {LEASE_S} s, poll {POLL_S} s)")
    again = dict(conn.execute("select id, claim from jobs.job where id = any(%s)",
                              (list(held),)).fetchall())
    assert all(again[job_id] > claim for job_id, claim in held.items())


def test_a_stalled_worker_starts_no_step_and_no_prefetched_run_once_its_lease_ran_out(
        conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    conn.execute(EFFECTS_TABLE)
    conn.execute("truncate public.stall_effects")
    args = ("tests.stall_example_app:app", "--queue", STALL_QUEUE, "--concurrency", "1",
            "--prefetch", "1", "--lease", str(LEASE_S), "--poll-interval", str(POLL_S))
    stalled = spawn(*args)
    wait_for(lambda: scalar(conn, "select count(*) = 1 from jobs.workers() where pid = %s",
                            (stalled.pid,)), "the first worker to register", timeout=30)
    # one job running on the first worker, a second claimed ahead into its local queue
    ids = enqueue(conn, "stall.steps", STALL_QUEUE, '{"n": 30, "pause_s": 0.1}', 2)
    wait_for(lambda: len(held_by(conn, stalled.pid)) == 2 and scalar(
        conn, "select count(*) >= 3 from public.stall_effects where pid = %s", (stalled.pid,)),
        "the first worker to hold both jobs and run steps")
    stalled.proc.send_signal(signal.SIGSTOP)
    other = spawn(*args)
    wait_for(lambda: scalar(conn, "select count(distinct job_id) = 2 from public.stall_effects "
                                  "where pid = %s", (other.pid,)),
             "the second worker to take both jobs over", timeout=60)
    resumed_at: datetime = scalar(conn, "select clock_timestamp()")
    stalled.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: scalar(conn, "select count(*) = 2 from jobs.job where id = any(%s) "
                                  "and state = 'succeeded'", (ids,)),
             "both jobs to succeed on the second worker", timeout=60)
    # the resumed worker has looked at its jobs again: from here on it could only misbehave
    wait_for(lambda: "lease ran out" in stalled.output() or "lost" in stalled.output(),
             "the resumed worker to find its leases gone")
    for worker in (stalled, other):
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0, worker.output()
    late = conn.execute("select job_id, step, at from public.stall_effects "
                        "where pid = %s and at > %s", (stalled.pid, resumed_at)).fetchall()
    assert late == [], f"the stalled worker ran steps or runs after it resumed: {late}"
    assert "never retrieved" not in stalled.output(), stalled.output()


def test_terminated_backends_cost_no_attempt_of_jobs_storing_steps(
        conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    ids = enqueue(conn, "stall.sleepy", STALL_QUEUE, '{"n": 40, "pause_s": 0.03}', 8)
    worker = spawn("tests.stall_example_app:app", "--queue", STALL_QUEUE, "--concurrency", "8",
                   "--lease", "10", "--poll-interval", str(POLL_S))
    wait_for(lambda: scalar(conn, "select count(*) >= 20 from jobs.step s "
                                  "where s.job_id = any(%s)", (ids,)),
             "the jobs to store steps")
    def steps() -> int:
        return int(scalar(conn, "select count(*) from jobs.step where job_id = any(%s)", (ids,)))

    def terminate_the_workers_backends() -> int:
        # (tried again until one is there to end: right after the last blow the worker
        # may hold none for a moment, while it reconnects)
        return int(scalar(conn, "select count(*) from (select pg_terminate_backend(pid) "
                                "from pg_stat_activity where datname = current_database() "
                                "and pid <> pg_backend_pid() and backend_type = 'client backend'"
                                " and application_name like 'sqljobs-worker %%') t"))

    for _ in range(3):
        before = steps()
        wait_for(terminate_the_workers_backends, "a backend of the worker to terminate")
        # the worker reconnected and stored steps again before the next blow
        wait_for(lambda before=before: steps() > before or scalar(
            conn, "select count(*) = %s from jobs.job where id = any(%s) and state = 'succeeded'",
            (len(ids), ids)), "the worker to store steps again")
    wait_for(lambda: scalar(conn, "select count(*) = %s from jobs.job where id = any(%s) "
                                  "and state = 'succeeded'", (len(ids), ids)),
             "every job to succeed", timeout=60)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output()
    attempts = [r[0] for r in conn.execute("select attempt from jobs.job where id = any(%s)",
                                           (ids,))]
    assert attempts == [1] * len(ids), (attempts, worker.output())
