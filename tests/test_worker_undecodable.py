"""A claimed row the worker cannot decode fails that job alone.

A payload nested 5,000 deep is valid jsonb (30 KB, within the size cap) but deeper than
Python's recursion limit: `json.loads` raises RecursionError. The claim selects its jsonb
columns as text and decodes them row by row (`sqljobs.queries.claim`), so such a row
comes back marked `undecodable` and the worker fails it at once (kind "undecodable",
through the fenced settle path), while the rest of its claim runs. Before, one such row
failed the whole claim's fetch and left every job of it running until its lease lapsed,
then again.

The rows are inserted with plain SQL as the superuser: the engine may refuse such a
payload at `jobs.enqueue` (SJ001), and what it must never do is block the jobs claimed
with a row that got in some other way (an older schema, a direct write).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from sqljobs import App, Client, fresh_key, queries
from tests.processes import wait_for
from tests.worker_example_app import QUEUE, RUNS_TABLE, make_app
from tests.worker_helpers import running

DEPTH = 5000
DEEP_PAYLOAD = f"('{{\"deep\": ' || repeat('[', {DEPTH}) || repeat(']', {DEPTH}) || '}}')::jsonb"
DEEP_MESSAGE = "payload nested deeper than Python can decode (RecursionError)"


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    conn.execute(RUNS_TABLE)
    example = make_app(db_dsn)
    yield example
    example.close()


def insert(conn: psycopg.Connection[Any], key: str, payload_sql: str = "'{\"n\": 1}'::jsonb",
           *, progress_sql: str = "null", compensable: bool = False) -> int:
    """A job of example.echo written straight into jobs.job, bypassing jobs.enqueue;
    its payload and progress are SQL expressions (this module's constants)."""
    statement = sql.SQL(
        "insert into jobs.job (id, name, queue, key, payload, progress, compensable, run_at, "
        "created_at) values (jobs.new_job_id('example.echo', null, %s), 'example.echo', %s, %s, "
        "{payload}, {progress}, %s, now(), now()) returning id").format(
            payload=sql.SQL(payload_sql), progress=sql.SQL(progress_sql))
    row = conn.execute(statement, (key, QUEUE, key, compensable)).fetchone()
    assert row is not None
    return int(row[0])


def states(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, str]:
    return dict(conn.execute("select id, state::text from jobs.job where id = any(%s)",
                             (ids,)).fetchall())


def test_the_claim_decodes_row_by_row_and_marks_the_row_it_cannot_decode(
        conn: psycopg.Connection[Any]) -> None:
    before = insert(conn, "before")
    deep = insert(conn, "deep", DEEP_PAYLOAD)
    huge = insert(conn, "huge-int", "('{\"n\": ' || repeat('7', 5000) || '}')::jsonb")
    deep_progress = insert(conn, "deep-progress",
                           progress_sql=f"({DEEP_PAYLOAD.removesuffix('::jsonb')})::jsonb")
    after = insert(conn, "after", "'{\"n\": 2}'::jsonb")
    # the deep payload is in the table, whole, and PostgreSQL reads it back fine
    assert conn.execute("select octet_length(payload::text) from jobs.job where id = %s",
                        (deep,)).fetchone() == (2 * DEPTH + 10,)

    claimed = {job.id: job for job in Client(conn).run(queries.claim([QUEUE], "w", 10))}

    assert set(claimed) == {before, deep, huge, deep_progress, after}
    assert claimed[before].payload == {"n": 1} and claimed[before].undecodable is None
    assert claimed[after].payload == {"n": 2} and claimed[after].undecodable is None
    assert claimed[deep].undecodable == DEEP_MESSAGE
    assert claimed[deep].payload is None and claimed[deep].claim > 0
    assert (claimed[huge].undecodable or "").startswith(
        "payload could not be decoded (ValueError: ")
    assert claimed[deep_progress].undecodable == (
        "progress nested deeper than Python can decode (RecursionError)")
    assert claimed[deep_progress].payload is None and claimed[deep_progress].progress is None


def test_a_worker_fails_the_undecodable_job_alone_and_runs_the_rest_of_its_claim(
        app: App, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture) -> None:
    ordinary = [r.id for r in app.job_handle("example.echo").enqueue_many(
        [({"n": i}, fresh_key()) for i in range(3)])]
    deep = insert(conn, "deep", DEEP_PAYLOAD)
    ordinary += [r.id for r in app.job_handle("example.echo").enqueue_many(
        [({"n": i}, fresh_key()) for i in range(3, 6)])]
    every = [*ordinary, deep]

    caplog.set_level(logging.WARNING, logger="sqljobs")
    # room for every job in one claim (concurrency + prefetch)
    with running(app, concurrency=4, prefetch=10) as worker:
        wait_for(lambda: all(state in ("succeeded", "failed")
                             for state in states(conn, every).values()),
                 "every job of the claim to settle")
        # nothing stays running, and the claim loop never failed
        assert "running" not in states(conn, every).values()

    found = states(conn, every)
    assert {found[i] for i in ordinary} == {"succeeded"}
    assert found[deep] == "failed"
    row = conn.execute("select attempt, last_error, result, "
                       "(select count(distinct started_at) from jobs.job where id = any(%s)) "
                       "from jobs.job where id = %s", (every, deep)).fetchone()
    assert row is not None
    attempt, error, result, claims = row
    assert claims == 1, "the deep job and the ordinary ones were claimed together"
    assert attempt == 1 and result is None
    assert error["kind"] == "undecodable"
    assert error["message"] == DEEP_MESSAGE
    assert worker.counts.get("failed") == 1 and worker.counts.get("succeeded") == 6
    assert not [r for r in caplog.records if r.getMessage().startswith("claim failed")]
    assert any(DEEP_MESSAGE in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


def test_an_undecodable_job_with_compensable_steps_fails_too(
        app: App, conn: psycopg.Connection[Any]) -> None:
    """Its first nack begins the saga's unwind (the job stays running, compensating);
    nothing of the job decodes to compensate, so the worker nacks it again and it fails
    at once instead of waiting for its lease to lapse."""
    deep = insert(conn, "deep-saga", DEEP_PAYLOAD, compensable=True)
    with running(app, lease_s=60.0):  # a lapsed lease cannot be what ends it
        wait_for(lambda: states(conn, [deep])[deep] == "failed", "the deep saga job to fail")
    row = conn.execute("select attempt, compensating, last_error->>'kind' from jobs.job "
                       "where id = %s", (deep,)).fetchone()
    assert row == (1, True, "undecodable")
