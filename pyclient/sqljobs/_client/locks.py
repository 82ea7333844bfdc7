"""Fenced locks on named leases (sql/35_limits.sql): `app.lock` and `app.lock_async`.

    with app.lock("ledger-export", ttl=30) as lock:
        for batch in batches:
            lock.check()                      # raises LockLost once the lease is gone
            write(batch, fence=lock.token)    # the resource refuses tokens below its highest

A lock is the lease `name` in `jobs.lease`, taken with `jobs.lease_acquire` and renewed
in the background every third of its TTL. The holder also keeps a deadline of its own
(the start of its last successful renewal + TTL, on the monotonic clock), so a holder
that was paused — a stopped process, a long GC, a lost network — knows it may have lost
the lease as soon as it runs again, before any renewal answers: past that deadline
another holder may hold it. Then:

  * sync: `lock.check()` raises LockLost, and leaving the block raises LockLost;
  * async: the task inside `async with` is cancelled, and leaving raises LockLost.

Two holders never both believe they hold it: the lease moves only after it lapsed in
the database, by which time the old holder's own deadline (which started earlier) has
passed too. Writes must still be fenced on `lock.token` (a pause can fall between a
check and a write): in this database, `jobs.lease_holds(name, token)` in the writing
transaction; elsewhere, the resource keeps the highest token it has seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from sqljobs._client import queries
from sqljobs._client.errors import TRANSIENT_ERRORS, ConfigurationError, LockBusy, LockLost
from sqljobs._client.queries import Call

T = TypeVar("T")


def default_holder() -> str:
    """host:pid:random, unique to one lock object."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class _LeaseState:
    """What a holder knows of its lease: the token, its own deadline, whether it is lost."""

    def __init__(self, name: str, ttl_s: float, timeout: float | None,
                 holder: str | None) -> None:
        if not ttl_s > 0:
            raise ConfigurationError("a lock's ttl must be positive seconds")
        if timeout is not None and timeout < 0:
            raise ConfigurationError("a lock's timeout is None (wait) or at least 0 seconds")
        self.name = name
        self.ttl_s = float(ttl_s)
        self.timeout = timeout
        self.holder = holder or default_holder()
        self._token: int | None = None
        self.deadline = 0.0
        self.lost = False

    @property
    def token(self) -> int:
        """The fencing token of this holding (higher than every earlier holder's)."""
        if self._token is None:
            raise LockLost(f"lock {self.name!r} is not held")
        return self._token

    @property
    def renew_every(self) -> float:
        return self.ttl_s / 3

    @property
    def poll_s(self) -> float:
        return min(self.ttl_s / 4, 0.5)

    def acquire_call(self) -> Call[int | None]:
        return queries.lease_acquire(self.name, self.holder, self.ttl_s)

    def took(self, token: int | None, started: float) -> bool:
        if token is None:
            return False
        self._token = token
        self.deadline = started + self.ttl_s
        return True

    def give_up_at(self, started: float) -> float | None:
        return None if self.timeout is None else started + self.timeout

    def busy(self) -> LockBusy:
        return LockBusy(f"lock {self.name!r} is held by another holder "
                        f"(waited {self.timeout:g} s)")

    def renewed(self, held: bool, started: float) -> None:
        if held:
            self.deadline = started + self.ttl_s
        else:
            self.lost = True

    def expired(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.lost = True
        return self.lost

    def lost_error(self) -> LockLost:
        return LockLost(f"lock {self.name!r} (token {self._token}) was lost: its lease "
                        f"lapsed or another holder took it")

    def check(self) -> None:
        """Raise LockLost if the lease may no longer be this holder's."""
        if self.expired():
            raise self.lost_error()


class Lock(_LeaseState):
    """A fenced lock for threads and plain code (`app.lock(...)`); see the module doc."""

    def __init__(self, run: Callable[[Call[Any]], Any], name: str, *, ttl_s: float = 30.0,
                 timeout: float | None = None, holder: str | None = None) -> None:
        super().__init__(name, ttl_s, timeout, holder)
        self._run = run
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> Lock:
        first = time.monotonic()
        give_up = self.give_up_at(first)
        while True:
            started = time.monotonic()
            if self.took(self._run(self.acquire_call()), started):
                break
            if give_up is not None and started >= give_up:
                raise self.busy()
            time.sleep(self.poll_s if give_up is None
                       else max(0.0, min(self.poll_s, give_up - time.monotonic())))
        self._renewer = threading.Thread(target=self._renew, name=f"sqljobs-lock-{self.name}",
                                         daemon=True)
        self._renewer.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_every):
            started = time.monotonic()
            try:
                held = self._run(queries.lease_renew(self.name, self.holder, self.token,
                                                     self.ttl_s))
            except TRANSIENT_ERRORS:
                held = None  # try again; the deadline decides
            if held is not None:
                self.renewed(bool(held), started)
            if self.expired():
                return

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        lost = self.expired()
        if not lost:
            with contextlib.suppress(*TRANSIENT_ERRORS):  # else it lapses at its TTL
                self._run(queries.lease_release(self.name, self.holder, self.token))
        if lost and exc is None:
            raise self.lost_error()


class AsyncLock(_LeaseState):
    """A fenced lock for asyncio code (`app.lock_async(...)`): losing the lease cancels
    the task that entered the block, which then raises LockLost."""

    def __init__(self, run: Callable[[Call[Any]], Awaitable[Any]], name: str, *,
                 ttl_s: float = 30.0, timeout: float | None = None,
                 holder: str | None = None) -> None:
        super().__init__(name, ttl_s, timeout, holder)
        self._run = run
        self._guarded: asyncio.Task[Any] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._cancelled = False

    async def __aenter__(self) -> AsyncLock:
        first = time.monotonic()
        give_up = self.give_up_at(first)
        while True:
            started = time.monotonic()
            if self.took(await self._run(self.acquire_call()), started):
                break
            if give_up is not None and started >= give_up:
                raise self.busy()
            await asyncio.sleep(self.poll_s if give_up is None
                                else max(0.0, min(self.poll_s, give_up - time.monotonic())))
        self._guarded = asyncio.current_task()
        self._renewer = asyncio.create_task(self._renew(), name=f"sqljobs-lock-{self.name}")
        return self

    async def _renew(self) -> None:
        while True:
            # wake at the next renewal, or at the deadline if that comes first
            await asyncio.sleep(max(0.0, min(self.renew_every, self.deadline - time.monotonic())))
            if self.expired():
                break
            started = time.monotonic()
            try:
                held = await self._run(queries.lease_renew(self.name, self.holder, self.token,
                                                           self.ttl_s))
            except TRANSIENT_ERRORS:
                held = None
            if held is not None:
                self.renewed(bool(held), started)
            if self.expired():
                break
        if self._guarded is not None and not self._guarded.done():
            self._cancelled = True
            self._guarded.cancel(f"lock {self.name!r} was lost")

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        lost = self.expired()
        if not lost:
            with contextlib.suppress(*TRANSIENT_ERRORS):
                await self._run(queries.lease_release(self.name, self.holder, self.token))
        if self._cancelled and self._guarded is not None:
            self._guarded.uncancel()
            raise self.lost_error() from exc
        if lost and exc is None:
            raise self.lost_error()


__all__ = ["AsyncLock", "Lock", "default_holder"]
