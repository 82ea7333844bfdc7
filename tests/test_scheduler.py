"""The scheduler in-process against a real database: declared tasks, run-time schedules,
catch-up after an outage, exactly-once fires, and fencing on the leader lease.

Time: rounds take an explicit `now` in the past (a fake clock for the cron side), which
the database accepts since the watermark is never ahead of its own clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

from sqljobs import App, ConfigurationError, JobContext, NotLeader, ScheduleNotFound
from sqljobs._client.connection import AsyncClient
from sqljobs._runtime.scheduler import Scheduler

T = TypeVar("T")
OUTAGE_START = datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC)
AFTER_OUTAGE = datetime(2026, 5, 1, 11, 0, 30, tzinfo=UTC)


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    example = App(db_dsn)
    for policy in ("all", "latest", "none"):
        @example.task(name=f"minutely.{policy}", cron="* * * * *", catch_up=policy,  # type: ignore[arg-type]
                      queue="sched")
        def minutely(ctx: JobContext) -> None: ...
    yield example
    example.close()


def with_scheduler(app: App, body: Callable[[Scheduler], Awaitable[T]], **options: Any) -> T:
    """Run `body` with a scheduler whose client is connected (no loop of its own)."""
    scheduler = Scheduler(app, install_signals=False, **options)

    async def main() -> T:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            scheduler._client = AsyncClient(conn)
            return await body(scheduler)

    return asyncio.run(main())


def keys(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "select key from jobs.job where name = %s order by run_at", (prefix,))]


def test_declared_tasks_are_synced_and_schedules_are_managed_at_run_time(
        app: App, conn: psycopg.Connection[Any]) -> None:
    assert app.schedules.sync_declared() == 3
    assert app.schedules.sync_declared() == 0, "a second sync changes nothing"
    assert app.schedules.add("nightly", job="reports.build", cron="0 2 * * *",
                             timezone="Europe/Paris", payload={"kind": "full"}, queue="reports")
    listed = {s.name: s for s in app.schedules.list()}
    assert set(listed) == {"minutely.all", "minutely.latest", "minutely.none", "nightly"}
    nightly = listed["nightly"]
    assert (nightly.origin, nightly.options, nightly.payload) == ("api", {"queue": "reports"},
                                                                  {"kind": "full"})
    assert nightly.next_fire_at is not None
    assert nightly.next_fire_at.astimezone(UTC).hour in (0, 1)  # 02:00 Paris
    assert listed["minutely.all"].options["queue"] == "sched"
    assert listed["minutely.all"].origin == "declared"

    app.schedules.pause("nightly")
    assert {s.name: s for s in app.schedules.list()}["nightly"].next_fire_at is None
    app.schedules.resume("nightly")
    app.schedules.remove("nightly")
    with pytest.raises(ScheduleNotFound):
        app.schedules.pause("nightly")
    with pytest.raises(ConfigurationError, match="bad cron expression"):
        app.schedules.add("broken", job="x", cron="* * *")
    with pytest.raises(ConfigurationError, match="unknown time zone"):
        app.schedules.add("broken", job="x", cron="* * * * *", timezone="Nowhere/Land")


def test_catch_up_policies_after_a_one_hour_outage(app: App,
                                                   conn: psycopg.Connection[Any]) -> None:
    app.schedules.sync_declared()
    conn.execute("update jobs.schedule set watermark = %s", (OUTAGE_START,))

    async def round_after_outage(scheduler: Scheduler) -> None:
        assert await scheduler.acquire()
        await scheduler.dispatch_round(now=AFTER_OUTAGE)

    with_scheduler(app, round_after_outage, scheduler_id="one")
    every = keys(conn, "minutely.all")
    assert every == [f"minutely.all@2026-05-01T{10 + m // 60}:{m % 60:02d}:00Z"
                     for m in range(1, 61)]
    assert keys(conn, "minutely.latest") == ["minutely.latest@2026-05-01T11:00:00Z"]
    assert keys(conn, "minutely.none") == []
    watermarks = dict(conn.execute("select name, watermark from jobs.schedule").fetchall())
    assert set(watermarks.values()) == {AFTER_OUTAGE}, "every policy moved its watermark"

    # Back to normal: a round two seconds after the next occurrence (11:01) fires it
    # under every policy.
    async def next_round(scheduler: Scheduler) -> None:
        assert await scheduler.acquire()
        await scheduler.dispatch_round(now=datetime(2026, 5, 1, 11, 1, 2, tzinfo=UTC))

    with_scheduler(app, next_round, scheduler_id="one")
    for policy, count in (("all", 61), ("latest", 2), ("none", 1)):
        assert len(keys(conn, f"minutely.{policy}")) == count, policy


def test_a_restarted_or_second_scheduler_never_fires_twice(
        app: App, conn: psycopg.Connection[Any]) -> None:
    app.schedules.sync_declared()
    conn.execute("update jobs.schedule set watermark = %s", (OUTAGE_START,))

    async def two_rounds(scheduler: Scheduler) -> None:
        assert await scheduler.acquire()
        await scheduler.dispatch_round(now=AFTER_OUTAGE)
        await scheduler.dispatch_round(now=AFTER_OUTAGE)

    with_scheduler(app, two_rounds, scheduler_id="first")
    # A scheduler that lost the watermark (e.g. a restore) or whose clock is behind
    # fires the same occurrences again: they answer the same jobs.
    conn.execute("update jobs.schedule set watermark = %s", (OUTAGE_START,))
    conn.execute("update jobs.lease set holder = null")

    async def replay(scheduler: Scheduler) -> None:
        assert await scheduler.acquire()
        await scheduler.dispatch_round(now=AFTER_OUTAGE)
        assert scheduler.counts["fired"] == 0
        assert scheduler.counts["deduped"] == 61

    with_scheduler(app, replay, scheduler_id="second")
    assert conn.execute("select count(*), count(distinct key) from jobs.job").fetchone() == (
        61, 61)


def test_only_the_leader_fires_and_a_deposed_leader_stops_at_once(
        app: App, conn: psycopg.Connection[Any]) -> None:
    app.schedules.sync_declared()
    conn.execute("update jobs.schedule set watermark = %s", (OUTAGE_START,))

    async def contest(first: Scheduler) -> None:
        assert await first.acquire()
        second = Scheduler(app, install_signals=False, scheduler_id="second")
        second._client = first._client
        assert not await second.acquire(), "a live lease keeps the second scheduler out"
        # The first scheduler's lease lapses (it was paused, say); the second takes over.
        conn.execute("update jobs.lease set lease_expires_at = jobs.now() - interval '1 s'")
        assert await second.acquire()
        # the next holder: one more in the token's high half, fresh random bits below
        assert second.token is not None and first.token is not None
        assert (second.token >> 32, second.token > first.token) == ((first.token >> 32) + 1, True)
        assert first.leading, "the first does not know yet ..."
        assert await first.dispatch_round(now=AFTER_OUTAGE) is None
        assert first.token is None and not first.leading, "... until its fire is refused"
        assert first.counts["fired"] == 0
        with pytest.raises(NotLeader):
            assert first._client is not None
            from sqljobs._client import queries
            await first._client.run(queries.schedule_fire(
                "minutely.all", [AFTER_OUTAGE - timedelta(seconds=30)], AFTER_OUTAGE, 1))
        assert not await first.acquire(), "and it cannot take the lease back"

    with_scheduler(app, contest, scheduler_id="first")
    assert conn.execute("select count(*) from jobs.job").fetchone() == (0,)
