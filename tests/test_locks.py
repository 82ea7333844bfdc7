"""Fenced locks (`app.lock`, `app.lock_async`, sqljobs._client.locks) on named leases.

In process: one holder at a time, a fencing token that moves with every holder,
LockBusy on a timeout, release on exit, and a lost lease noticed (sync: `check()` and
the block's exit raise LockLost; async: the guarded task is cancelled). As processes
(tests/lock_holder.py): the holder is SIGSTOPped past its TTL, another takes the lock
with a higher token; the first, resumed, stops with LockLost, and no write fenced on its
old token lands after the takeover.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sqljobs import App, ConfigurationError, InvalidArgument, LockBusy, LockLost, queries
from tests.lock_holder import FENCED_WRITE, TABLE
from tests.processes import REPO, scalar, wait_for


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    with App(db_dsn) as application:
        yield application


def take_over(conn: psycopg.Connection[Any], name: str) -> int:
    """Another holder takes the lease at once: as if this one's had lapsed."""
    conn.execute("update jobs.lease set lease_expires_at = now() - interval '1 second' "
                 "where name = %s", (name,))
    token = scalar(conn, "select jobs.lease_acquire(%s, 'thief', 30)", (name,))
    assert token is not None
    return int(token)


def test_one_holder_at_a_time_and_the_token_moves_up(app: App) -> None:
    with app.lock("export", ttl=5) as lock:
        first = lock.token
        with pytest.raises(LockBusy, match="'export' is held by another holder"), \
                app.lock("export", timeout=0.3):
            pass
        lock.check()
    with app.lock("export", ttl=5) as again:  # released on exit: free at once
        # each new holder's token is higher, and unguessable: its low half is random
        assert again.token > first and again.token >> 32 == (first >> 32) + 1
    [lease] = app.client.run(queries.leases())
    assert (lease.name, lease.holder, lease.live) == ("export", None, False)
    assert "token" not in lease.model_dump(), "a token is its holder's proof: never shown"


def test_a_waiting_lock_takes_over_when_the_holder_releases(app: App) -> None:
    first = app.lock("turn", ttl=5).__enter__()
    waiting = threading.Event()  # the second lock's acquire was refused: it waits
    releasing = threading.Event()
    second = app.lock("turn", ttl=5, timeout=60)
    run = second._run

    def observed(call: Any) -> Any:
        answer = run(call)
        if answer is None:  # an acquire the holder refused
            waiting.set()
        return answer

    second._run = observed

    def release_once_it_waits() -> None:
        assert waiting.wait(60), "the second lock never tried"
        releasing.set()
        first.__exit__(None, None, None)

    releaser = threading.Thread(target=release_once_it_waits)
    releaser.start()
    with second:
        assert releasing.is_set() and second.token > first.token
    releaser.join(60)


def test_a_lost_lease_fails_the_next_check_and_the_exit(app: App,
                                                        conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(LockLost, match=r"'report' .* was lost"), \
            app.lock("report", ttl=1.5) as lock:
        take_over(conn, "report")
        wait_for(lambda: lock.lost, "the renewer to notice")
        with pytest.raises(LockLost):
            lock.check()
        # the block finishing without looking does not hide it: the exit raises
    assert scalar(conn, "select holder from jobs.lease where name = 'report'") == "thief", (
        "a deposed holder releases nothing")


def test_async_a_lost_lease_cancels_the_guarded_task(app: App,
                                                     conn: psycopg.Connection[Any]) -> None:
    reached: list[str] = []

    async def guarded() -> None:
        await app.open_async()
        async with app.lock_async("sync-job", ttl=1.5) as lock:
            assert lock.token >> 32 == 1  # the first holder's (its low half is random)
            take_over(conn, "sync-job")
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                reached.append("cancelled")
                raise
            reached.append("slept through")  # never

    async def main() -> None:
        try:
            with pytest.raises(LockLost):
                await guarded()
        finally:
            await app.close_async()

    asyncio.run(main())
    assert reached == ["cancelled"]


def test_bad_arguments_are_refused(app: App, conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(ConfigurationError, match="ttl must be positive"):
        app.lock("x", ttl=0)
    with pytest.raises(ConfigurationError, match="timeout"):
        app.lock("x", timeout=-1)
    with pytest.raises(InvalidArgument, match="a lease needs a name"), app.lock(""):
        pass
    assert scalar(conn, "select count(*) from jobs.lease") == 0


def acquired(log: Path) -> int | None:
    """The fencing token a tests/lock_holder.py process printed, once it has."""
    match = re.search(r"^acquired (\d+)$", log.read_text(), re.MULTILINE)
    return int(match.group(1)) if match else None


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_holder_stopped_past_its_ttl_loses_and_its_fenced_writes_are_refused(
        db_dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, mode: str) -> None:
    conn.execute(TABLE)
    conn.execute("truncate public.fenced_writes")
    ttl = 1.0
    logs = [tmp_path / f"holder{i}.log" for i in (1, 2)]

    opened: list[Any] = []

    def holder(log: Path) -> subprocess.Popen[bytes]:
        opened.append(log.open("w"))
        return subprocess.Popen([sys.executable, "-m", "tests.lock_holder", db_dsn, "ledger",
                                 str(ttl), mode], cwd=REPO, stdout=opened[-1],
                                stderr=subprocess.STDOUT)

    first = holder(logs[0])
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: acquired(logs[0]), "the first holder", timeout=20)
        old = acquired(logs[0])
        assert old is not None and old >> 32 == 1  # the first holder of this lease
        wait_for(lambda: scalar(conn, "select count(*) from public.fenced_writes"),
                 "a fenced write of the first holder")
        first.send_signal(signal.SIGSTOP)
        wait_for(lambda: scalar(conn, "select lease_expires_at < clock_timestamp() "
                                      "from jobs.lease where name = 'ledger'"),
                 "the paused holder's TTL to run out")
        second = holder(logs[1])
        wait_for(lambda: acquired(logs[1]), "the second holder", timeout=20)
        new = acquired(logs[1])
        assert new is not None and new >> 32 == 2 and new > old
        taken_at = scalar(conn, "select acquired_at from jobs.lease where name = 'ledger'")
        # the resource refuses the old token and takes the new one
        assert conn.execute(FENCED_WRITE, (old, os.getpid(), "ledger", old)).rowcount == 0
        assert conn.execute(FENCED_WRITE, (new, os.getpid(), "ledger", new)).rowcount == 1
        first.send_signal(signal.SIGCONT)
        assert first.wait(10) == 3, logs[0].read_text()
        assert "lost" in logs[0].read_text()
        late = scalar(conn, "select count(*) from public.fenced_writes "
                            "where token = %s and at >= %s", (old, taken_at))
        assert late == 0, "a write fenced on the old token landed after the takeover"
        assert scalar(conn, "select count(*) from public.fenced_writes where token = %s",
                      (new,)) > 0
        assert second.poll() is None, "the new holder keeps the lock"
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait(10)
        for log in opened:
            log.close()
