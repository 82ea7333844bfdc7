"""The scheduler as real processes: two of them over a per-second task, the leader
killed mid-run; and one worker process that also runs a relay and a scheduler.

The task is `roles.tick` (tests/roles_example_app.py): cron `* * * * * *` (every second,
seconds-resolution), catch_up = all. Assertions read jobs.job and jobs.lease: every
second between the first and the last fired is enqueued exactly once, across the
handover, and the new leader took over only after the dead one's lease lapsed.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.processes import CliProcess, scalar, spawner, wait_for

pytestmark = pytest.mark.slow

LEASE_S = 2.0
TICK_S = 0.5


@pytest.fixture
def spawn(db_dsn: str, tmp_path: Path) -> Iterator[Callable[..., CliProcess]]:
    with spawner(db_dsn, tmp_path) as start:
        yield start


def ticks(conn: psycopg.Connection[Any]) -> int:
    return int(scalar(conn, "select count(*) from jobs.job where name = 'roles.tick'"))


def scheduler(spawn: Callable[..., CliProcess], name: str) -> CliProcess:
    return spawn("scheduler", "tests.roles_example_app:app", "--scheduler-id", name,
                 "--lease", str(LEASE_S), "--tick", str(TICK_S))


def test_two_schedulers_fire_every_second_exactly_once_across_a_killed_leader(
        conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    processes = {"A": scheduler(spawn, "A"), "B": scheduler(spawn, "B")}
    wait_for(lambda: ticks(conn) >= 5, "five seconds fired")
    leader, token, expires = conn.execute(
        "select holder, token, lease_expires_at from jobs.lease where name = 'scheduler'"
    ).fetchone() or (None, None, None)
    assert leader in processes, leader
    processes[leader].proc.kill()
    processes[leader].proc.wait(10)
    # The lease as the dead leader last renewed it (nobody can take it before it lapses).
    expires = scalar(conn, "select lease_expires_at from jobs.lease where name = 'scheduler' "
                           "and holder = %s", (leader,))
    survivor = "B" if leader == "A" else "A"
    wait_for(lambda: scalar(conn, "select holder = %s from jobs.lease", (survivor,)),
             "the survivor to take the lease over")
    taken = conn.execute("select token, acquired_at from jobs.lease").fetchone()
    assert taken is not None
    assert taken[0] >> 32 == (token >> 32) + 1, "a new holder moves the fencing token"
    assert taken[1] >= expires, "never taken over before the dead leader's lease lapsed"
    fired_at_handover = ticks(conn)
    wait_for(lambda: ticks(conn) >= fired_at_handover + 5, "five more seconds fired")

    processes[survivor].proc.send_signal(signal.SIGTERM)
    assert processes[survivor].wait(20) == 0, processes[survivor].output()
    assert scalar(conn, "select holder from jobs.lease") is None, "a clean stop releases"

    occurrences = [datetime.fromisoformat(key.split("@", 1)[1]) for (key,) in conn.execute(
        "select key from jobs.job where name = 'roles.tick' order by key")]
    assert len(occurrences) == len(set(occurrences)) == ticks(conn)
    # Every second from the first to the last, none missing, none twice: the seconds
    # the dead leader missed were caught up (catch_up = all) by the survivor.
    first = occurrences[0]
    assert occurrences == [first + timedelta(seconds=i) for i in range(len(occurrences))]
    assert scalar(conn, "select count(*) from jobs.job where name = 'roles.tick' "
                        "and run_at <> (substring(key from '@(.*)$'))::timestamptz") == 0


def test_a_worker_runs_a_relay_and_a_scheduler_beside_it(
        conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    worker = spawn("worker", "tests.roles_example_app:app", "--queue", "roles",
                   "--with-relay", "--with-scheduler", "--poll-interval", "0.2")
    with psycopg.connect(conn.info.dsn) as caller:
        staged = scalar(caller, "select id from jobs.stage('roles.note', 'hello', "
                                "'{\"text\": \"hi\"}', '{\"queue\": \"roles\"}')")
        caller.commit()
    wait_for(lambda: scalar(conn, "select state = 'succeeded' from jobs.job where id = %s",
                            (staged,)) if scalar(conn, "select count(*) from jobs.job "
                                                       "where id = %s", (staged,)) else False,
             "the staged job to be relayed and run")
    wait_for(lambda: scalar(conn, "select count(*) >= 2 from jobs.job where name = 'roles.tick' "
                                  "and state = 'succeeded'"), "scheduled ticks to run")
    assert scalar(conn, "select result from jobs.job where id = %s", (staged,)) == "hi"
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    output = worker.output()
    assert "relay" in output and "scheduler" in output and "stopped (exit 0)" in output
    assert scalar(conn, "select holder from jobs.lease") is None
