"""Settle keys: what keeps lease recovery off a job whose outcome waits for a busy row.

A batch settle answers "busy" for a job whose row another transaction holds locked (an
operator's open transaction, a report's SELECT ... FOR UPDATE): nothing is written, and
the outcome is sent again after a short pause until the lock is released. Heartbeats
stop once a run has finished, so a lock held longer than the lease lets the lease
lapse, and the moment the lock is released a recovery could take the job and run it
again. The busy answer therefore also makes the job's settle key (sql/40_settle.sql,
"Busy rows"), and `SettleKeys` holds those keys with `jobs.settle_hold`, in one
transaction kept open on a pool connection, until every such outcome is written or
given up: `jobs.recover` leaves a job whose settle key another transaction holds.

That transaction locks the key rows only, never a job's; it ends as soon as no outcome
waits, and while it lasts it holds back vacuum, as the transaction holding the row does.
A key it could not hold (the job is no longer this claim's, or its key was swept) is not
asked for again: that outcome is sent again all the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._runtime.lifecycle import Backoff, failed

logger = logging.getLogger("sqljobs.worker")


class SettleKeys:
    """Holds the settle keys of this worker's outcomes that wait for busy rows."""

    def __init__(self, client: AsyncClient, log_extra: Mapping[str, Any]) -> None:
        self._client = client
        self._log_extra = dict(log_extra)
        self._waiting: dict[int, int] = {}  # job id -> claim: outcomes waiting for a busy row
        self._changed = asyncio.Event()

    def hold(self, jobs: Iterable[tuple[int, int]]) -> None:
        """Hold these jobs' (id, claim) settle keys until `release`."""
        for job_id, claim in jobs:
            self._waiting[job_id] = claim
        self._changed.set()

    def release(self, job_id: int) -> None:
        """The job's outcome is written (or given up): its key may go."""
        if self._waiting.pop(job_id, None) is not None:
            self._changed.set()

    async def serve(self) -> None:
        backoff = Backoff(first=0.1)
        while True:
            await self._changed.wait()
            self._changed.clear()
            if not self._waiting:
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
        """One transaction: hold each waiting job's key as it comes, end once none waits."""
        asked: set[int] = set()
        async with self._client.transaction() as held:
            while self._waiting:
                new = {i: c for i, c in self._waiting.items() if i not in asked}
                if new:
                    await held.run(queries.settle_hold(list(new), list(new.values())))
                    asked.update(new)
                self._changed.clear()
                if self._waiting.keys() - asked:
                    continue  # more came while that statement ran
                await self._changed.wait()


__all__ = ["SettleKeys"]
