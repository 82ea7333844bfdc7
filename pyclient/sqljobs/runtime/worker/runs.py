"""The jobs a worker holds, and the slots they take.

A job claimed by this worker is a `Run` from the claim until its outcome is written.
`Slots` keeps every run in one of three places, in the order a job moves through them:

    waiting   claimed ahead (prefetch), in claim order; its lease renewed, not started
    running   started: its handler (or the thread of a sync handler) has not finished
    settling  its handler finished; its outcome waits for the settler

`concurrency` bounds the running ones; `concurrency + prefetch` bounds what a claim may
take, and also how many outcomes may wait for the settler before no new job starts.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import MutableMapping
from concurrent.futures import Future
from typing import Any

from sqljobs.client.records import ClaimedJob
from sqljobs.runtime.context import JobContext
from sqljobs.runtime.observing import NO_WATCH, RunWatch
from sqljobs.runtime.stopping import StopReason


class JobLog(logging.LoggerAdapter[logging.Logger]):
    """Adds the job's fields to every record, merged with the caller's own `extra`."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any],
                ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


class Run:
    """One claimed job while this worker holds it."""

    def __init__(self, job: ClaimedJob, lease_deadline: float) -> None:
        self.job = job
        self.lease_deadline = lease_deadline  # monotonic: past it, assume the lease lost
        self.ctx: JobContext | None = None
        self.stop_reason: StopReason | None = None
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.settling = False  # an outcome was handed to the settler
        self.settled = asyncio.Event()  # the outcome is written (or nothing will be)
        self.thread: Future[Any] | None = None
        self.task: asyncio.Task[None] | None = None
        self.holds_slot = False  # started, and its handler (or thread) not yet finished
        self.started = time.monotonic()
        self.watch: RunWatch = NO_WATCH  # what observers see of it (sqljobs.runtime.observing)
        self.ended: str | None = None  # the outcome observers were told (once per run)

    def stop(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.ctx is not None:
            self.ctx._stop(reason)
        if not self.stopped.done():
            self.stopped.set_result(None)

    @property
    def log_fields(self) -> dict[str, Any]:
        j = self.job
        return {"job_id": j.id, "job_name": j.name, "queue": j.queue, "attempt": j.attempt,
                "claim": j.claim}


class Slots:
    """Every run this worker holds: waiting, running or settling (see the module doc)."""

    def __init__(self, concurrency: int, prefetch: int) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.runs: dict[int, Run] = {}  # every job held, by id
        self.waiting: collections.deque[Run] = collections.deque()
        self.busy = 0  # slots taken: runs started whose handler has not finished

    @property
    def room(self) -> int:
        """Jobs the worker may hold at once: running plus waiting."""
        return self.concurrency + self.prefetch

    def settling(self) -> int:
        """Runs whose handler finished and whose outcome is not yet written."""
        return len(self.runs) - self.busy - len(self.waiting)

    def claimable(self) -> int:
        """How many jobs a claim may take now: room in the slots and the local queue;
        none while `concurrency + prefetch` outcomes wait to be written."""
        if self.settling() >= self.room:
            return 0
        return self.room - self.busy - len(self.waiting)

    def hold(self, run: Run) -> None:
        """A claimed job: it waits for a slot."""
        self.runs[run.job.id] = run
        self.waiting.append(run)

    def startable(self) -> tuple[list[Run], int]:
        """The waiting runs that may start now, each now taking a slot, and how many
        waiting runs were dropped on the way because they were lost while waiting
        (cancelled, lease lapsed). Stops when no slot is free or the settler is behind."""
        started: list[Run] = []
        dropped = 0
        while self.waiting and self.busy < self.concurrency:
            if self.settling() >= self.room:
                break  # the settler is behind: start more when it writes
            run = self.waiting.popleft()
            if run.stop_reason is None and time.monotonic() > run.lease_deadline:
                run.stop("lease_lost")  # it waited past its lease (a stall): not ours now
            if run.stop_reason is not None:
                dropped += 1
                run.settled.set()
                self.runs.pop(run.job.id, None)
                continue
            self.busy += 1
            run.holds_slot = True
            run.started = time.monotonic()
            started.append(run)
        return started, dropped

    def free(self, run: Run) -> bool:
        """The run's handler finished: its slot is free. False when it held none."""
        if not run.holds_slot:
            return False
        run.holds_slot = False
        self.busy -= 1
        return True

    def release(self, run: Run) -> None:
        """The run is over: its outcome is written, or nothing will be."""
        self.free(run)
        self.runs.pop(run.job.id, None)

    def take_waiting(self) -> list[Run]:
        """Every waiting run, removed from the local queue (a drain hands them back)."""
        runs, self.waiting = list(self.waiting), collections.deque()
        return runs


__all__ = ["JobLog", "Run", "Slots"]
