"""Event waits and emits across real sessions (pgTAP runs in one transaction and cannot
show this): an emit whose transaction is still open when a wait is registered is not
lost, whichever commits first.

Session A emits inside an open transaction; session B registers a wait for that event
name and blocks on the per-name advisory lock (seen in pg_stat_activity) until A
commits, then sees A's event and resolves without parking. The other order: B's wait
commits (the job parks), then A's emit wakes it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from sqljobs import fresh_key


def claimed_job(conn: psycopg.Connection[Any], queue: str) -> tuple[int, int]:
    conn.execute("select jobs.enqueue('race.job', %s, '{}', %s)",
                 (fresh_key(), Jsonb({"queue": queue})))
    row = conn.execute("select id, claim from jobs.claim(%s, 'w', 1, 60)", ([queue],)).fetchone()
    assert row is not None
    return row[0], row[1]


def wait_until_blocked(conn: psycopg.Connection[Any], pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = conn.execute("select wait_event_type from pg_stat_activity where pid = %s",
                           (pid,)).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.02)
    raise AssertionError("the wait never blocked on the emitter's lock")


def test_a_wait_blocks_on_an_open_emit_and_then_sees_its_event(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    job_id, claim = claimed_job(conn, "race_a")
    with psycopg.connect(db_dsn) as emitter, psycopg.connect(db_dsn, autocommit=True) as waiter:
        emitter.execute("select jobs.emit_event('race.go', '{\"n\": 1}')")  # open transaction
        pid = waiter.info.backend_pid
        answer: dict[str, Any] = {}

        def wait() -> None:
            answer["row"] = waiter.execute(
                "select value, parked from jobs.step_wait(%s, %s, 'w', %s)",
                (job_id, claim, Jsonb([{"event": "race.go"}]))).fetchone()

        thread = threading.Thread(target=wait)
        thread.start()
        wait_until_blocked(conn, pid)
        emitter.commit()
        thread.join(30)
        assert not thread.is_alive()
    value, parked = answer["row"]
    assert parked is False
    assert value["payload"] == {"n": 1}


def test_an_emit_after_a_committed_wait_wakes_the_parked_job(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    job_id, claim = claimed_job(conn, "race_b")
    with psycopg.connect(db_dsn) as waiter:
        row = waiter.execute("select parked from jobs.step_wait(%s, %s, 'w', %s)",
                             (job_id, claim, Jsonb([{"event": "race.late"}]))).fetchone()
        assert row == (True,)
        waiter.commit()
    with psycopg.connect(db_dsn, autocommit=True) as emitter:
        emitter.execute("listen jobs_wake")
        emitter.execute("select jobs.emit_event('race.late', '{}')")
        woken = [n.payload for n in emitter.notifies(timeout=30, stop_after=1)]
        # jobs_wake names the queue by its token (a listener of another tenant learns nothing)
        token = emitter.execute("select token from jobs.wake_tokens(array['race_b'])").fetchone()
    assert token is not None and woken == [token[0]]
    state = conn.execute("select state::text from jobs.job where id = %s", (job_id,)).fetchone()
    assert state == ("ready",)
