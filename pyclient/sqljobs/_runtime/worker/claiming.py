"""Claiming: when the worker asks `jobs.claim` for jobs, and how many.

Claims come in batches sized to the free slots plus the prefetch (fixed, or sized to
the work: prefetching.py), filtered to the job names the app declares (a job only
newer code knows waits for a worker that knows it).
Claimed jobs beyond the free slots wait in the local queue (`Slots.waiting`), their
leases renewed like running ones, and start as slots free: a slot that frees starts
the next job at once while the next claim is in flight.

A claim is made when asked for (`want()`: a NOTIFY on `jobs_wake` named one of our
queues, a slot freed after a full claim, or, when the app declares limits, a batch of
this worker's settles committed: they free what the limits count, and waiting for the
wake-up their trigger sends left the runners idle), and at least every `poll_interval`
seconds regardless. Only that periodic claim recovers lapsed leases and wakes due
parked jobs: it is most of a claim's cost, and once per poll keeps recovery within
lease TTL + one poll. A poll that finds no room to claim into (every slot and the
local queue full) calls `jobs.recover` instead, so that recovery never waits for a
worker with free capacity. With jobs still waiting locally the loop waits until half
the room is free (fewer, larger claims); with every slot and the local queue full it
waits for a slot to free, or for the next poll.

Claims take a claim cursor per queue (`jobs.claim`'s options.after): the place in line
(priority, run_at) of the last job the worker claimed from that queue, CURSOR_SLACK_S
earlier. A scan from the queue's head steps over the index entry of every job claimed
since the oldest snapshot still open in the database (a report, a session idle in
transaction: vacuum may remove none of them), and that walk grew with the snapshot's
age; the cursor starts past them. The slack is for commit order: a job is in line by
its run_at, usually its producing transaction's start, and commits later. A job made
claimable behind a cursor (a job handed back or interrupted, a lapsed lease another
worker recovered, a limit's waiter freed, an enqueue with an older run_at) is found by
`jobs.claimable_behind`, which each poll asks on a connection of its own, beside the
claims: that queue is read from its head again, and the job waits at most about one
`poll_interval`. A claim that recovers a job itself reads the heads (sql/30_claim.sql).
A worker whose app declares limits keeps no cursor: a limited claim ignores it (every
freed waiter is behind it), and checking one cost 4-10% of a limited drain.

A claimed row whose jsonb Python cannot decode (`ClaimedJob.undecodable`: a payload
nested deeper than its recursion limit, say) never joins the local queue: it goes to
`undecodable`, which fails it at once (worker.py), and the rest of its claim runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.records import ClaimedJob
from sqljobs._runtime.lifecycle import Backoff, failed
from sqljobs._runtime.observing import RunObserver
from sqljobs._runtime.worker.runs import Slots

logger = logging.getLogger("sqljobs.worker")

MAX_CLAIM = 1000  # jobs.claim's limit
# How far behind the last claimed job's run_at a claim cursor starts: a job that
# commits up to this long after its run_at is still found between polls.
CURSOR_SLACK_S = 5.0


class ClaimLoop:
    """Claims for `slots` until `stopping()`; hands each claim's jobs to `claimed`."""

    def __init__(self, *, client: AsyncClient, slots: Slots, worker_id: str,
                 queues: Sequence[str], names: Sequence[str], version: str | None,
                 lease_s: float,
                 poll_interval: float, wake: asyncio.Event,
                 claimed: Callable[[list[ClaimedJob], float], None],
                 undecodable: Callable[[ClaimedJob, float], None],
                 stopping: Callable[[], bool], sleep: Callable[[float], Awaitable[None]],
                 log_extra: Mapping[str, Any], observer: RunObserver,
                 cursor: bool = True) -> None:
        self._client = client
        self._slots = slots
        self._worker_id = worker_id
        self._queues = list(queues)
        self._names = list(names)
        self._version = version  # code-version routing (None: none)
        self._lease_s = lease_s
        self._poll_interval = poll_interval
        self._wake = wake
        self._claimed = claimed
        self._undecodable = undecodable
        self._stopping = stopping
        self._sleep = sleep
        self._log_extra = dict(log_extra)
        self._observer = observer
        self._wanted = True
        # per queue: the place in line (priority, run_at) of the last job claimed from it;
        # none kept when the app declares limits (a limited claim ignores a cursor)
        self._keeps_cursor = cursor
        self._cursor: dict[str, tuple[int, datetime]] = {}
        self._probe: asyncio.Task[None] | None = None  # the poll's jobs.claimable_behind

    def want(self) -> None:
        """Claim as soon as there is room (a NOTIFY came, or a full claim left more)."""
        self._wanted = True
        self._wake.set()

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            if self._probe is not None:
                self._probe.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._probe

    async def _loop(self) -> None:
        slots = self._slots
        next_poll = time.monotonic()
        backoff = Backoff(cap=max(self._poll_interval, 1.0))
        while not self._stopping():
            now = time.monotonic()
            polling = now >= next_poll
            if polling:
                self._wanted = True
                if self._cursor and (self._probe is None or self._probe.done()):
                    self._probe = asyncio.create_task(self._look_behind(self._cursor))
            free = slots.claimable()
            worth = free > 0 and (not slots.waiting or free >= slots.room // 2)
            if polling and not worth:
                next_poll = now + self._poll_interval
                await self._recover()
            if worth and self._wanted:
                self._wanted = False
                if polling:
                    next_poll = now + self._poll_interval
                sent = time.monotonic()
                try:
                    jobs = await self._client.run(queries.claim(
                        self._queues, self._worker_id, min(free, MAX_CLAIM), self._lease_s,
                        self._names, recover=polling, version=self._version,
                        after=self._after(self._cursor)))
                except Exception as error:
                    pause = backoff.next()
                    failed(logger, "claim", error, pause, self._log_extra)
                    self._wanted = True
                    await self._sleep(pause)
                    continue
                backoff.reset()
                took = time.monotonic() - sent
                slots.prefetch.claimed(took)
                self._observer.claimed(len(jobs), took)
                if jobs:
                    if self._keeps_cursor:
                        self._advance(jobs)
                    self._hand_over(jobs, sent)
                if len(jobs) == min(free, MAX_CLAIM):
                    self._wanted = True  # maybe more waiting: claim again when a slot frees
                if self._wanted and slots.claimable() > 0 and not slots.waiting:
                    continue
            self._wake.clear()
            # Until a slot frees (it sets the wake event) or the next poll is due.
            timeout = max(0.0, next_poll - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    @staticmethod
    def _after(cursor: Mapping[str, tuple[int, datetime]]) -> dict[str, tuple[int, datetime]]:
        """The claim cursors to send: each queue's, CURSOR_SLACK_S back (a copy, taken
        now: the claim loop moves them meanwhile)."""
        slack = timedelta(seconds=CURSOR_SLACK_S)
        return {queue: (priority, run_at - slack)
                for queue, (priority, run_at) in cursor.items()}

    def _advance(self, jobs: list[ClaimedJob]) -> None:
        """Each queue this claim took jobs from: its cursor to the last of them. A claim
        takes a queue's first jobs in line from its cursor (or the head) and those of
        better priority first, so every claimable job before that place was taken or is
        one a cursor misses anyway; a queue it took nothing from keeps its cursor."""
        last: dict[str, tuple[int, datetime]] = {}
        for job in jobs:
            if job.run_at is not None:
                place = (job.priority, job.run_at)
                if job.queue not in last or place > last[job.queue]:
                    last[job.queue] = place
        self._cursor.update(last)

    async def _look_behind(self, cursor: dict[str, tuple[int, datetime]]) -> None:
        """The poll's check for jobs behind the cursors: their queues are read from the
        head by the next claim. A failure is tried again at the next poll."""
        try:
            behind = await self._client.run(queries.claimable_behind(
                self._queues, self._after(cursor), self._names, self._version))
        except Exception as error:
            failed(logger, "claim cursor check", error, self._poll_interval, self._log_extra)
            return
        for queue in behind:
            # a cursor a claim moved since is past the job too
            self._cursor.pop(queue, None)
        if behind:
            self.want()

    async def _recover(self) -> None:
        """The poll's recovery when there is no room to claim into (jobs.recover); a
        failure is tried again at the next poll."""
        try:
            await self._client.run(queries.recover(self._queues))
        except Exception as error:
            failed(logger, "recovery", error, self._poll_interval, self._log_extra)

    def _hand_over(self, jobs: list[ClaimedJob], sent: float) -> None:
        """The claim's jobs to run, each undecodable one apart (to be failed)."""
        runnable = [job for job in jobs if job.undecodable is None]
        if len(runnable) < len(jobs):
            for job in jobs:
                if job.undecodable is not None:
                    self._undecodable(job, sent)
        if runnable:
            self._claimed(runnable, sent)


__all__ = ["MAX_CLAIM", "ClaimLoop"]
