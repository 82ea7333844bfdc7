"""Settle keys: what keeps lease recovery off a job whose row another transaction holds.

A batch settle or renewal answers "busy" for a job whose row another transaction holds
locked (an operator's open transaction, a report's SELECT ... FOR UPDATE): nothing is
written for it, and the worker sends it again after a short pause until the lock is
released. Meanwhile the job's lease is not renewed (heartbeats stop once a run has
finished, and a busy heartbeat renews nothing), so a lock held longer than the lease
lets it lapse, and the moment the lock is released a recovery could take the job and
run it again. The busy answer therefore also makes the job's settle key
(sql/40_settle.sql, "Busy rows"; one per job and claim), and `SettleKeys` holds those
keys with `jobs.settle_hold`, in one READ COMMITTED transaction on one pool connection,
while any is wanted: `jobs.recover` leaves a job whose settle key under its claim
another transaction holds.

Who wants a key (`Owner`): the settler for an outcome it sends again, a saga's failure
sent again, the lease keeper for a run whose heartbeat is busy. A key is let go when
none of them wants it. The lease keeper's runs go on past their leases on the strength
of their keys, `COVER_S` after each hold the database answered (`covered`); see
sqljobs._runtime.worker.leases for what that promises.

The transaction locks the key rows only, never a job's. It holds every key it took until
it ends (a key of a job no longer running under that claim keeps nothing from
recovery), and it ends once no key is wanted; overlapping busy episodes keep it open
from the first to the last, and while it is open it holds back vacuum, as the
transactions holding the rows do. A key it could not hold (the job is no longer this
claim's, or no busy answer made its key) is asked for again at every change and every
PING_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.records import Settled
from sqljobs._runtime.lifecycle import Backoff, failed

logger = logging.getLogger("sqljobs.worker")

BUSY_RETRY_S = 0.2  # a busy row's outcome is sent again after this pause
# jobs.settle_hold is sent again at least this often while keys are wanted: it keeps the
# keys' transaction from being ended as idle (the function sets 10 s, which is what lets
# a vanished worker's keys go) and holds what a busy answer keyed since.
PING_S = 2.0
# How long after a hold was sent the worker counts on the keys it held. Shorter than the
# 10 s after which the server ends an idle holder: a worker cut off from the database
# stops its covered runs before their keys can go.
COVER_S = 2 * PING_S
HOLD_TIMEOUT_S = COVER_S  # a hold not answered by then is given up (the connection hangs)

Owner = Literal["outcome", "failure", "renewal"]
Covered = Callable[[float], None]  # told until when (monotonic) a held key may be counted on


class SettleKeys:
    """Holds the settle keys this worker's busy jobs need."""

    def __init__(self, client: AsyncClient, log_extra: Mapping[str, Any]) -> None:
        self._client = client
        self._log_extra = dict(log_extra)
        self._wanted: dict[int, tuple[int, set[Owner]]] = {}  # job id -> (claim, owners)
        self._covered: dict[int, Covered] = {}  # the lease keeper's runs, by job id
        self._changed = asyncio.Event()

    def hold(self, job_id: int, claim: int, owner: Owner,
             covered: Covered | None = None) -> None:
        """Hold the job's settle key under this claim until `owner` releases it;
        `covered` is told, after each hold that held it, until when it may be counted on."""
        wanted = self._wanted.get(job_id)
        if wanted is None or wanted[0] != claim:
            self._wanted[job_id] = (claim, {owner})
            self._changed.set()
        else:
            wanted[1].add(owner)  # (asked for already: the next hold takes it too)
        if covered is not None:
            self._covered[job_id] = covered

    def release(self, job_id: int, owner: Owner) -> None:
        """`owner` no longer needs the job's key; it goes once nobody does (when the keys'
        transaction ends)."""
        if owner == "renewal":
            self._covered.pop(job_id, None)
        wanted = self._wanted.get(job_id)
        if wanted is not None:
            wanted[1].discard(owner)
            if not wanted[1]:
                del self._wanted[job_id]
                self._changed.set()

    async def resend(self, job_id: int, claim: int, owner: Owner,
                     write: Callable[[], Awaitable[Settled]]) -> Settled:
        """Send one outcome until its row is not busy, its key held meanwhile."""
        try:
            while True:
                answer = await write()
                if not answer.busy:
                    return answer
                self.hold(job_id, claim, owner)
                await asyncio.sleep(BUSY_RETRY_S)
        finally:
            self.release(job_id, owner)

    async def serve(self) -> None:
        backoff = Backoff(first=0.1)
        while True:
            await self._changed.wait()
            if not self._wanted:
                self._changed.clear()
                continue
            try:
                await self._hold_while_wanted(backoff)
            except Exception as error:  # never let the worker lose this task
                for covered in list(self._covered.values()):
                    covered(0.0)  # nothing is held now: no run goes on on its key
                pause = backoff.next()
                failed(logger, "holding settle keys", error, pause, self._log_extra)
                await asyncio.sleep(pause)
                self._changed.set()  # try again for what is still wanted

    async def _hold_while_wanted(self, backoff: Backoff) -> None:
        """One transaction: hold every wanted key, again at each change and every
        PING_S, and end once none is wanted (the keys go with it)."""
        async with self._client.transaction(read_committed=True) as held:
            while self._wanted:
                self._changed.clear()
                pairs = {job_id: claim for job_id, (claim, _) in self._wanted.items()}
                sent = time.monotonic()
                ids = await asyncio.wait_for(
                    held.run(queries.settle_hold(list(pairs), list(pairs.values()))),
                    HOLD_TIMEOUT_S)
                backoff.reset()
                for job_id in ids:
                    covered = self._covered.get(job_id)
                    if covered is not None:
                        covered(sent + COVER_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), PING_S)


__all__ = ["BUSY_RETRY_S", "COVER_S", "SettleKeys"]
