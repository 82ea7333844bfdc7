"""The relay as real processes (`sqljobs relay`): two at once, one killed mid-batch, SIGTERM.

Staged rows are written with jobs.stage_many; the assertions read jobs.outbox and
jobs.job: every staged row becomes exactly one job, whose id is the staged id.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.processes import CliProcess, scalar, spawner, wait_for

pytestmark = pytest.mark.slow

LEASE_S = 2.0


@pytest.fixture
def spawn(db_dsn: str, tmp_path: Path) -> Iterator[Callable[..., CliProcess]]:
    with spawner(db_dsn, tmp_path, "relay", "tests.roles_example_app:app",
                 "--lease", str(LEASE_S), "--poll-interval", "0.2") as start:
        yield start


def stage(conn: psycopg.Connection[Any], count: int, prefix: str) -> None:
    for start in range(0, count, 1000):
        specs = [{"name": "roles.note", "key": f"{prefix}{i}", "queue": "roles",
                  "payload": {"text": str(i)}, "ordering_key": f"o{i % 50}"}
                 for i in range(start, min(start + 1000, count))]
        conn.execute("select count(*) from jobs.stage_many(%s)", (Jsonb(specs),))


def assert_exactly_once(conn: psycopg.Connection[Any], count: int) -> None:
    assert scalar(conn, "select count(*) from jobs.outbox where published_at is null") == 0
    assert scalar(conn, "select count(*) from jobs.job") == count
    # Each staged row became the job with its id: no duplicate, no loss.
    assert scalar(conn, "select count(*) from jobs.outbox o join jobs.job j on j.id = o.id "
                        "where o.outcome = 'created' and o.job_id = o.id") == count


def test_two_relays_publish_10000_staged_rows_each_exactly_once(
        conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    # A relay holding a key's earliest unpublished row blocks that key for the other
    # (per-key order), so a batch that spans all 50 ordering keys could starve the
    # second relay: batches of 20 leave keys free for both.
    first = spawn("--batch", "20")
    second = spawn("--batch", "20")
    for relay in (first, second):
        wait_for(lambda r=relay: "relay" in r.output() and "started" in r.output(),  # type: ignore[misc]
                 "the relays to start")
    stage(conn, 10_000, "two")  # while both run
    wait_for(lambda: scalar(conn, "select pending = 0 from jobs.outbox_stats()"),
             "every staged row to be published")
    for relay in (first, second):
        relay.proc.send_signal(signal.SIGTERM)
    for relay in (first, second):
        assert relay.wait(20) == 0, relay.output()
    assert_exactly_once(conn, 10_000)
    # Both took part: their relay ids are on the rows.
    assert scalar(conn, "select count(distinct claimed_by) from jobs.outbox") == 2
    # Rows of one ordering key were published in stage order.
    assert scalar(conn, """
        select count(*) from (
          select o.id, o.published_at,
                 lag(o.published_at) over (partition by o.ordering_key order by o.id) as prev
            from jobs.outbox o) s
         where s.prev > s.published_at""") == 0


def test_a_relay_killed_mid_batch_is_finished_by_another_after_its_lease(
        conn: psycopg.Connection[Any], db_dsn: str, spawn: Callable[..., CliProcess]) -> None:
    stage(conn, 10_000, "kill")
    # Pin the first relay mid-batch at any machine speed: an open transaction enqueues a
    # job under the key of the first staged row, so publishing the batch that holds that
    # row waits on this transaction (the key's unique index). The batch was claimed, and
    # committed, by the call before: while it waits, the relay holds it.
    blocker = psycopg.connect(db_dsn)
    try:
        blocker.execute("select jobs.enqueue('roles.note', 'kill0', '{}', "
                        "'{\"queue\": \"roles\"}')")
        first = spawn("--batch", "100", "--relay-id", "first")
        wait_for(lambda: scalar(conn, "select count(*) > 0 from pg_stat_activity "
                                      "where application_name = 'sqljobs-relay first' "
                                      "and wait_event_type = 'Lock'"),
                 "the first relay to wait on the staged row's key, holding its batch")
        first.kill()  # SIGKILL
        # Its call in flight would publish once the blocker ends: end it on the server
        # first, so what it holds now is what it will never publish.
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity "
                     "where application_name = 'sqljobs-relay first'")
        wait_for(lambda: scalar(conn, "select count(*) = 0 from pg_stat_activity "
                                      "where application_name = 'sqljobs-relay first'"),
                 "the killed relay's sessions to end")
    finally:
        blocker.rollback()
        blocker.close()
    held = [r[0] for r in conn.execute(
        "select id from jobs.outbox where claimed_by = 'first' and published_at is null")]
    assert held, "the first relay must hold a batch when it is killed"
    assert scalar(conn, "select count(*) from jobs.outbox where published_at is not null") == 0

    second = spawn("--batch", "100", "--relay-id", "second")
    wait_for(lambda: scalar(conn, "select pending = 0 from jobs.outbox_stats()"),
             "the second relay to publish everything")
    second.proc.send_signal(signal.SIGTERM)
    assert second.wait(20) == 0, second.output()
    assert_exactly_once(conn, 10_000)
    # The dead relay's batch was taken over (a second claim: token 2) and published once.
    assert conn.execute("select distinct claimed_by, claim from jobs.outbox where id = any(%s)",
                        (held,)).fetchall() == [("second", 2)]


def test_sigterm_finishes_the_batch_in_flight_then_stops(
        conn: psycopg.Connection[Any], spawn: Callable[..., CliProcess]) -> None:
    stage(conn, 3_000, "term")
    relay = spawn("--batch", "50", "--relay-id", "draining")
    wait_for(lambda: scalar(conn, "select count(*) > 0 from jobs.outbox "
                                  "where published_at is not null"), "publishing to start")
    relay.proc.send_signal(signal.SIGTERM)
    assert relay.wait(20) == 0, relay.output()
    # Nothing is left held: the drain published the batch it held and claimed no more.
    assert scalar(conn, "select count(*) from jobs.outbox "
                        "where claimed_by is not null and published_at is null") == 0
    published = scalar(conn, "select count(*) from jobs.outbox where published_at is not null")
    assert scalar(conn, "select count(*) from jobs.job") == published
    assert "relay draining" in relay.output()
