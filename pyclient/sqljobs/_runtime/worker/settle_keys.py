"""Settle keys: what keeps lease recovery off a job whose outcome waits for a busy row.

A batch settle answers "busy" for a job whose row another transaction holds locked (an
operator's open transaction, a report's SELECT ... FOR UPDATE): nothing is written, and
the outcome is sent again after a short pause until the lock is released. Heartbeats
stop once a run has finished, so a lock held longer than the lease lets the lease
lapse, and the moment the lock is released a recovery could take the job and run it
again. The busy answer therefore also makes the job's settle key (sql/40_settle.sql,
"Busy rows"; one per job and claim), and `SettleKeys` holds those keys with
`jobs.settle_hold`, in one transaction kept open on a pool connection while any such
outcome waits: `jobs.recover` leaves a job whose settle key under its claim another
transaction holds.

That transaction locks the key rows only, never a job's. It holds every key it took
until it ends (a key of a job whose outcome is written keeps nothing from recovery: the
job no longer runs under that claim), it ends as soon as no outcome waits, and while it
lasts it holds back vacuum, as the transaction holding the row does. A key it could not
hold (the job is no longer this claim's, or its key was swept) is asked for again at
every change and every PING_S; the outcome is sent again all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.records import Settled
from sqljobs._runtime.lifecycle import Backoff, failed

logger = logging.getLogger("sqljobs.worker")

BUSY_RETRY_S = 0.2  # a busy row's outcome is sent again after this pause
# jobs.settle_hold is sent again at least this often while outcomes wait: it keeps the
# keys' transaction from being ended as idle (the function sets 10 s), which is what
# lets a vanished worker's keys go, and holds what a busy answer keyed since.
PING_S = 2.0
# How long after a hold was sent the worker counts on its key: a run whose heartbeat
# found its row busy keeps running past its lease that long (sqljobs._runtime.worker.
# leases). Shorter than the 10 s after which the server ends an idle holder, so a worker
# cut off from the database stops such a run before its key goes and a recovery could
# run the job elsewhere.
COVER_S = 2 * PING_S

Covered = Callable[[float], None]  # told the monotonic time a held key covers until


class SettleKeys:
    """Holds the settle keys of this worker's outcomes that wait for busy rows."""

    def __init__(self, client: AsyncClient, log_extra: Mapping[str, Any]) -> None:
        self._client = client
        self._log_extra = dict(log_extra)
        self._waiting: dict[int, int] = {}  # job id -> claim: waiting for a busy row
        self._covered: dict[int, Covered] = {}  # told after each hold that held the key
        self._changed = asyncio.Event()

    def hold(self, jobs: Iterable[tuple[int, int]], covered: Covered | None = None) -> None:
        """Hold these jobs' settle keys, (id, claim), until `release`; `covered` is told,
        after each hold that held a key, until when (monotonic) it may be counted on."""
        for job_id, claim in jobs:
            self._waiting[job_id] = claim
            if covered is not None:
                self._covered[job_id] = covered
        self._changed.set()

    def release(self, job_id: int) -> None:
        """The job's outcome is written (or given up), or its row is no longer busy: it
        no longer needs its key, which goes when the keys' transaction ends (once none
        waits)."""
        self._covered.pop(job_id, None)
        if self._waiting.pop(job_id, None) is not None:
            self._changed.set()

    async def resend(self, job_id: int, claim: int,
                     write: Callable[[], Awaitable[Settled]]) -> Settled:
        """Send one outcome until its row is not busy, its key held meanwhile."""
        try:
            while True:
                answer = await write()
                if not answer.busy:
                    return answer
                self.hold([(job_id, claim)])
                await asyncio.sleep(BUSY_RETRY_S)
        finally:
            self.release(job_id)

    async def serve(self) -> None:
        backoff = Backoff(first=0.1)
        while True:
            await self._changed.wait()
            if not self._waiting:
                self._changed.clear()
                continue
            try:
                await self._hold_while_waiting()
                backoff.reset()
            except Exception as error:  # never let the worker lose this task
                pause = backoff.next()
                failed(logger, "holding settle keys", error, pause, self._log_extra)
                await asyncio.sleep(pause)
                self._changed.set()  # try again for what still waits

    async def _hold_while_waiting(self) -> None:
        """One READ COMMITTED transaction: hold every waiting job's key, again at each
        change and every PING_S, and end once none waits (its keys go with it)."""
        async with self._client.transaction(read_committed=True) as held:
            while self._waiting:
                self._changed.clear()
                pairs = dict(self._waiting)
                sent = time.monotonic()
                for job_id in await held.run(queries.settle_hold(list(pairs),
                                                                 list(pairs.values()))):
                    if job_id in self._covered:
                        self._covered[job_id](sent + COVER_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), PING_S)


__all__ = ["BUSY_RETRY_S", "SettleKeys"]
