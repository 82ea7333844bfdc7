"""A client whose connection drops mid-call (the backend terminated while the call waits
on a row lock another session holds, so the kill lands inside the call).

- step put (`AsyncClient.run_again_once`): fenced and first-write-wins, so it is sent
  once more on a live connection and the step is stored once;
- ack_many: the call fails with a connection error and did not commit; sent again under
  the same claim it settles the job once (the worker's settler does exactly that);
- enqueue: the call fails with a connection error; enqueuing again with the same key
  answers one job, whichever attempt created it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from sqljobs import fresh_key
from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import TRANSIENT_ERRORS
from tests.processes import wait_for


def _enqueue_and_claim(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    conn.execute("select jobs.enqueue('loss.job', %s, '{}', '{\"queue\": \"loss\"}')",
                 (fresh_key(),))
    row = conn.execute("select id, claim from jobs.claim(array['loss'], 'w', 1, 300)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _waiting_on_a_lock(conn: psycopg.Connection[Any], application: str) -> int | None:
    row = conn.execute("select pid from pg_stat_activity where application_name = %s "
                       "and wait_event_type = 'Lock'", (application,)).fetchone()
    return None if row is None else int(row[0])


async def _kill_mid_call(conn: psycopg.Connection[Any], db_dsn: str, lock_sql: str,
                         lock_params: tuple[Any, ...],
                         call: Callable[[AsyncClient], Awaitable[Any]]) -> Any:
    """Run `call` on a one-connection pool while another session holds a lock it needs;
    terminate the call's backend once it waits on that lock, then release the lock.
    Answers what the call answered, or the exception it raised."""
    application = f"loss-{fresh_key()}"
    with psycopg.connect(db_dsn) as holder:
        holder.execute(lock_sql, lock_params)  # a transaction left open: the lock is held
        async with AsyncConnectionPool(db_dsn, min_size=1, max_size=1, open=False, kwargs={
                "autocommit": True, "application_name": application}) as pool:
            task = asyncio.ensure_future(call(AsyncClient(pool)))
            for _ in range(600):  # 30 s
                pid = _waiting_on_a_lock(conn, application)
                if pid is not None or task.done():
                    break
                await asyncio.sleep(0.05)
            assert pid is not None, "the call never waited on the held lock"
            conn.execute("select pg_terminate_backend(%s)", (pid,))
            wait_for(lambda: conn.execute("select count(*) = 0 from pg_stat_activity "
                                          "where pid = %s", (pid,)).fetchone() == (True,),
                     "the backend to go")
            holder.rollback()
            try:
                return await task
            except Exception as error:  # the outcome under test
                return error


def test_a_step_put_cut_off_mid_call_is_sent_again_and_stored_once(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    job_id, claim = _enqueue_and_claim(conn)

    async def put(client: AsyncClient) -> Any:
        return await client.run_again_once(queries.step_put(job_id, claim, "charge", {"c": 1}))

    answer = asyncio.run(_kill_mid_call(
        conn, db_dsn, "select 1 from jobs.job where id = %s for update", (job_id,), put))
    assert answer == {"c": 1}
    assert conn.execute("select name, value from jobs.step where job_id = %s",
                        (job_id,)).fetchall() == [("charge", {"c": 1})]


def test_an_ack_cut_off_mid_call_did_not_commit_and_settles_once_when_sent_again(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    job_id, claim = _enqueue_and_claim(conn)

    # (the one-job ack waits for a held row; ack_many would skip it and answer busy)
    async def ack(client: AsyncClient) -> Any:
        return await client.run(queries.ack(job_id, claim, {"r": 1}))

    outcome = asyncio.run(_kill_mid_call(
        conn, db_dsn, "select 1 from jobs.job where id = %s for update", (job_id,), ack))
    assert isinstance(outcome, TRANSIENT_ERRORS), outcome
    assert conn.execute("select state::text from jobs.job where id = %s",
                        (job_id,)).fetchone() == ("running",)

    async def again() -> Any:
        async with AsyncConnectionPool(db_dsn, min_size=1, max_size=1, open=False,
                                       kwargs={"autocommit": True}) as pool:
            first = await AsyncClient(pool).run(queries.ack_many([job_id], [claim], [{"r": 1}]))
            # a second replay (as after a commit whose answer was lost) changes nothing
            second = await AsyncClient(pool).run(queries.ack_many([job_id], [claim], [{"r": 2}]))
            return [a.ok for a in first], [a.ok for a in second]

    assert asyncio.run(again()) == ([True], [False])
    assert conn.execute("select state::text, result from jobs.job where id = %s",
                        (job_id,)).fetchone() == ("succeeded", {"r": 1})


@pytest.mark.parametrize("holder_commits", [False, True])
def test_an_enqueue_cut_off_mid_call_is_safe_to_send_again_with_its_key(
        conn: psycopg.Connection[Any], db_dsn: str, holder_commits: bool) -> None:
    key = fresh_key()
    options = {"queue": "loss"}

    async def enqueue(client: AsyncClient) -> Any:
        return await client.run(queries.enqueue("loss.job", key, {"n": 1}, options))

    # The holder enqueues the same key in an open transaction: the call waits on it.
    lock = "select jobs.enqueue('loss.job', %s, '{\"n\": 0}', '{\"queue\": \"loss\"}')"
    outcome = asyncio.run(_kill_mid_call(conn, db_dsn, lock, (key,), enqueue))
    assert isinstance(outcome, TRANSIENT_ERRORS), outcome
    if holder_commits:  # as if the cut-off call had committed: the retry finds its job
        conn.execute("select jobs.enqueue('loss.job', %s, '{\"n\": 0}', '{\"queue\": \"loss\"}')",
                     (key,))

    async def again() -> Any:
        async with AsyncConnectionPool(db_dsn, min_size=1, max_size=1, open=False,
                                       kwargs={"autocommit": True}) as pool:
            return await AsyncClient(pool).run(queries.enqueue("loss.job", key, {"n": 1}, options))

    retried = asyncio.run(again())
    rows = conn.execute("select id, payload from jobs.job where key = %s", (key,)).fetchall()
    assert len(rows) == 1 and rows[0][0] == retried.id
    assert retried.outcome == ("deduped" if holder_commits else "created")
