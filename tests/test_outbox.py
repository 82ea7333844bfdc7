"""The outbox from Python: `handle.stage` in a caller's transaction, and the `Relay` role.

A staged row exists only if the stager's transaction commits; the relay publishes it
as a job whose id is the staged id; the relay drains in two phases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sqljobs import App, InvalidArgument
from sqljobs._runtime.relay import Relay
from tests.processes import scalar
from tests.roles_example_app import make_app


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    example = make_app(db_dsn)
    yield example
    example.close()



def relay_until_idle(app: App, **options: Any) -> Relay:
    """Run one in-process relay until the outbox has nothing pending, then drain it."""
    relay = Relay(app, install_signals=False, poll_interval=0.05, **options)

    async def main() -> None:
        task = asyncio.create_task(relay.run_async())
        while True:
            await asyncio.sleep(0.05)
            assert not task.done(), "the relay stopped early"
            async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as c:
                cur = await c.execute("select pending from jobs.outbox_stats()")
                row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
        relay.stop()
        assert await task == 0

    asyncio.run(main())
    return relay


def test_a_rolled_back_stage_is_never_relayed(app: App, conn: psycopg.Connection[Any],
                                              db_dsn: str) -> None:
    note = app.job_handle("roles.note")
    with psycopg.connect(db_dsn) as caller:
        staged = note.stage({"text": "never"}, key="rolled-back", conn=caller)
        assert staged.outcome == "staged"
        caller.rollback()
    assert scalar(conn, "select count(*) from jobs.outbox") == 0
    relay_until_idle(app)
    assert scalar(conn, "select count(*) from jobs.job") == 0


def test_a_committed_stage_becomes_the_job_with_its_id(app: App, conn: psycopg.Connection[Any],
                                                       db_dsn: str) -> None:
    note = app.job_handle("roles.note")
    with psycopg.connect(db_dsn) as caller:
        staged = note.stage({"text": "hello"}, key="committed", conn=caller, ordering_key="a")
        again = note.stage({"text": "hello"}, key="committed", conn=caller)
        caller.commit()
    assert again.id == staged.id and again.deduped
    relay = relay_until_idle(app)
    assert relay.counts["published"] == 1
    row = conn.execute("select id, name, queue, payload, state from jobs.job").fetchall()
    assert row == [(staged.id, "roles.note", "roles", {"text": "hello"}, "ready")]
    # Staging a key whose job exists answers the job.
    assert note.stage({"text": "x"}, key="committed").id == staged.id


def test_stage_many_is_all_or_nothing(app: App, conn: psycopg.Connection[Any]) -> None:
    note = app.job_handle("roles.note")
    with pytest.raises(InvalidArgument):
        note.stage_many([({"text": "a"}, "k1"), ({"text": "b"}, "")])
    assert scalar(conn, "select count(*) from jobs.outbox") == 0
    staged = note.stage_many([({"text": str(i)}, f"k{i}") for i in range(2500)])
    assert len({s.id for s in staged}) == 2500
    relay_until_idle(app, batch=1000)
    assert scalar(conn, "select count(*) from jobs.job") == 2500
    assert scalar(conn, "select count(*) from jobs.outbox o join jobs.job j on j.id = o.id") == 2500


def test_stage_async_in_a_transaction(app: App, conn: psycopg.Connection[Any],
                                      db_dsn: str) -> None:
    note = app.job_handle("roles.note")

    async def main() -> int:
        async with await psycopg.AsyncConnection.connect(db_dsn) as caller:
            staged = await note.stage_async({"text": "async"}, key="async", conn=caller)
            await caller.commit()
            return staged.id

    staged_id = asyncio.run(main())
    assert scalar(conn, "select id from jobs.outbox") == staged_id


def test_the_relay_purges_published_rows_after_the_retention(
        app: App, conn: psycopg.Connection[Any]) -> None:
    note = app.job_handle("roles.note")
    note.stage_many([({"text": str(i)}, f"p{i}") for i in range(30)])
    relay = Relay(app, install_signals=False, poll_interval=0.05, retention_s=0.0,
                  purge_interval=0.01)

    async def main() -> None:
        task = asyncio.create_task(relay.run_async())
        # published rows older than the retention (0 s) go at the next purge
        for _ in range(1200):
            await asyncio.sleep(0.05)
            assert not task.done(), "the relay stopped early"
            if scalar(conn, "select count(*) from jobs.outbox") == 0:
                break
        relay.stop()
        assert await task == 0

    asyncio.run(main())
    assert scalar(conn, "select count(*) from jobs.outbox") == 0
    assert scalar(conn, "select count(*) from jobs.job") == 30


def test_a_drain_publishes_the_batch_held(app: App, conn: psycopg.Connection[Any]) -> None:
    """Phase one of the drain: the batch claimed by the last step is published."""
    note = app.job_handle("roles.note")
    note.stage_many([({"text": str(i)}, f"d{i}") for i in range(10)])
    relay = Relay(app, install_signals=False, batch=10)

    async def main() -> int:
        relay._loop = asyncio.get_running_loop()
        relay.stop()  # stop before the first step: a stopped relay claims nothing
        return await relay.run_async()

    assert asyncio.run(main()) == 0
    assert scalar(conn, "select count(*) from jobs.job") == 0

    async def one_step_then_drain() -> int:
        task = asyncio.create_task(relay.run_async())
        while relay.held == 0 and relay.counts["published"] == 0:
            await asyncio.sleep(0.01)
        relay.stop()
        return await task

    relay = Relay(app, install_signals=False, batch=10)
    assert asyncio.run(one_step_then_drain()) == 0
    assert scalar(conn, "select count(*) from jobs.job") == 10
    assert scalar(conn, "select count(*) from jobs.outbox where published_at is null") == 0


def test_the_relay_wakes_on_notify_without_polling(app: App, conn: psycopg.Connection[Any],
                                                   db_dsn: str) -> None:
    """With a poll interval far longer than the wait, only the NOTIFY sent by the
    staging transaction's commit can wake the relay."""
    relay = Relay(app, install_signals=False, poll_interval=300.0)
    note = app.job_handle("roles.note")

    # Steps that began once the relay was LISTENing: after one of them is over, the
    # relay has caught up (the listener wakes it on connect) and waits 300 s.
    listening_steps = 0
    real_step = relay.step

    async def counted_step(batch: int | None = None) -> int:
        nonlocal listening_steps
        began_listening = relay.listening
        published = await real_step(batch)
        listening_steps += began_listening
        return published

    relay.step = counted_step  # type: ignore[method-assign]

    async def main() -> None:
        task = asyncio.create_task(relay.run_async())
        for _ in range(1500):  # 30 s
            if listening_steps:
                break
            assert not task.done()
            await asyncio.sleep(0.02)
        assert listening_steps, "the relay never stepped while listening"
        with psycopg.connect(db_dsn) as caller:
            note.stage({"text": "wake"}, key="woken", conn=caller)
            caller.commit()
        for _ in range(500):
            if relay.counts["published"]:
                break
            await asyncio.sleep(0.02)
        relay.stop()
        assert await task == 0

    asyncio.run(main())
    assert relay.counts["published"] == 1
    assert scalar(conn, "select count(*) from jobs.job where key = 'woken'") == 1
