"""The jobs a worker holds, and the slots they take.

A job claimed by this worker is a `Run` from the claim until its outcome is written.
`Slots` keeps every run in one of three places, in the order a job moves through them:

    waiting   claimed ahead (prefetch), in claim order; its lease renewed, not started
    running   started: its handler (or the thread of a sync handler) has not finished
    settling  its handler finished; its outcome waits for the settler

`concurrency` bounds the running ones; `concurrency + prefetch` (the room) bounds what a
claim may take. Twice the room bounds how many outcomes may wait for the settler before
no new job starts and nothing more is claimed: a claim may then run while the previous
claim's outcomes are written (two round trips at once, not one after the other).

A `Run` is made for every job, so it holds plain attributes only: the futures and
events a run may need (a waiter on its stop, on its settlement) are made when asked for.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import MutableMapping
from concurrent.futures import Future
from typing import Any

from sqljobs._client.records import ClaimedJob
from sqljobs._runtime.context import JobContext
from sqljobs._runtime.observing import NO_WATCH, RunWatch
from sqljobs._runtime.stopping import StopReason
from sqljobs._runtime.worker.prefetching import Prefetch


class JobLog(logging.LoggerAdapter[logging.Logger]):
    """Adds the job's fields to every record, merged with the caller's own `extra`."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any],
                ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


class Run:
    """One claimed job while this worker holds it."""

    __slots__ = (
        "_settled",
        "_settled_event",
        "_stopped",
        "covered_until",
        "ctx",
        "ended",
        "holds_slot",
        "job",
        "lease_deadline",
        "runner",
        "runner_cancelled",
        "settling",
        "started",
        "stop_reason",
        "thread",
        "watch",
    )

    def __init__(self, job: ClaimedJob, lease_deadline: float) -> None:
        self.job = job
        self.lease_deadline = lease_deadline  # monotonic: past it, assume the lease lost
        self.covered_until = 0.0  # monotonic: its settle key stands for the lease (leases.py)
        self.ctx: JobContext | None = None
        self.stop_reason: StopReason | None = None
        self.settling = False  # an outcome was handed to the settler
        self.thread: Future[Any] | None = None
        self.holds_slot = False  # started, and its handler (or thread) not yet finished
        self.started = 0.0
        self.watch: RunWatch = NO_WATCH  # what observers see of it (sqljobs._runtime.observing)
        self.ended: str | None = None  # the outcome observers were told (once per run)
        # The task awaiting this run's handler, while it awaits it: a stop cancels it there.
        self.runner: asyncio.Task[Any] | None = None
        self.runner_cancelled = False  # a stop cancelled that task (running.py takes it back)
        self._stopped: asyncio.Future[None] | None = None
        self._settled = False
        self._settled_event: asyncio.Event | None = None

    @property
    def deadline(self) -> float:
        """Past this (monotonic), another worker may hold the job: its lease, or the
        cover of its settle key while its row is busy (leases.py)."""
        return max(self.lease_deadline, self.covered_until)

    def stop(self, reason: StopReason) -> None:
        """Tell the run to stop: its ctx.cancelled is set, and an async handler being
        awaited gets CancelledError at its next await (running.py)."""
        first = self.stop_reason is None
        if first:
            self.stop_reason = reason
        if self.ctx is not None:
            self.ctx._stop(reason)
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
        # From inside the handler itself (a step found the lease lost) there is nothing
        # to interrupt: the handler sees ctx.cancelled, or is already raising.
        if first and self.runner is not None and asyncio.current_task() is not self.runner:
            self.runner_cancelled = True
            self.runner.cancel()

    @property
    def stopped(self) -> asyncio.Future[None]:
        """Done once the run was told to stop."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
            if self.stop_reason is not None:
                self._stopped.set_result(None)
        return self._stopped

    # -- settled: the outcome is written, or nothing will be ---------------------------

    @property
    def is_settled(self) -> bool:
        return self._settled

    def mark_settled(self) -> None:
        self._settled = True
        if self._settled_event is not None:
            self._settled_event.set()

    async def wait_settled(self) -> None:
        if self._settled:
            return
        if self._settled_event is None:
            self._settled_event = asyncio.Event()
        await self._settled_event.wait()

    @property
    def log_fields(self) -> dict[str, Any]:
        j = self.job
        return {"job_id": j.id, "job_name": j.name, "queue": j.queue, "attempt": j.attempt,
                "claim": j.claim}


class Slots:
    """Every run this worker holds: waiting, running or settling (see the module doc)."""

    def __init__(self, concurrency: int, prefetch: Prefetch) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch  # fixed, or sized to the work (prefetching.py)
        self.runs: dict[int, Run] = {}  # every job held, by id
        self.waiting: collections.deque[Run] = collections.deque()
        self.busy = 0  # slots taken: runs started whose handler has not finished

    @property
    def room(self) -> int:
        """Jobs the worker may hold at once: running plus waiting."""
        return self.concurrency + self.prefetch.value

    def settling(self) -> int:
        """Runs whose handler finished and whose outcome is not yet written."""
        return len(self.runs) - self.busy - len(self.waiting)

    @property
    def behind(self) -> bool:
        """The settler is behind: twice the room of outcomes wait to be written."""
        return self.settling() >= 2 * self.room

    def claimable(self) -> int:
        """How many jobs a claim may take now: room in the slots and the local queue;
        none while the settler is behind."""
        if self.behind:
            return 0
        return self.room - self.busy - len(self.waiting)

    def hold(self, run: Run) -> None:
        """A claimed job: it waits for a slot."""
        self.runs[run.job.id] = run
        self.waiting.append(run)

    def take(self) -> tuple[Run | None, int]:
        """The next waiting run that may start now, now taking a slot (None: no slot is
        free, the settler is behind, or nothing waits), and how many waiting runs were
        dropped on the way because they were lost while waiting (cancelled, lease lapsed)."""
        dropped = 0
        while self.waiting and self.busy < self.concurrency:
            if self.behind:
                break  # start more when it writes
            run = self.waiting.popleft()
            now = time.monotonic()
            if run.stop_reason is None and now > run.deadline:
                run.stop("lease_lost")  # it waited past its lease (a stall): not ours now
            if run.stop_reason is not None:
                dropped += 1
                run.mark_settled()
                self.runs.pop(run.job.id, None)
                continue
            self.busy += 1
            run.holds_slot = True
            run.started = now
            return run, dropped
        return None, dropped

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
