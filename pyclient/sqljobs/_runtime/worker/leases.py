"""Lease renewal: every held job's lease is renewed on a timer, in one statement.

Every `heartbeat_s` the worker renews the lease of each job it holds (waiting and
running) with one `jobs.heartbeat_many`, and refreshes its own row in the workers
registry. A job whose heartbeat answers false (its lease lapsed and was taken over, or
an operator cancelled it) is stopped and writes nothing more; so is any run whose lease
this worker could not renew before it ran out on this process's clock (the database
was unreachable): past its deadline another worker may already hold it. A job whose
row another transaction holds locked answers "busy": it is not renewed that time, the
next beat tries again, and meanwhile the worker holds the job's settle key
(`settle_keys.py`), which keeps lease recovery off it. While the key is held the run
goes on past its lease: each hold the database answered covers it for COVER_S (4 s)
from when the hold was sent, and a timer stops the run once neither its lease nor a
cover is left, whatever the heartbeats are doing. So a row locked for longer than the
lease neither stops the run nor lets another worker run it. What it does not promise:
if the keys' session ends early (terminated by an operator, a failover) the keys go at
once, and until the worker's next hold fails and withdraws the cover (at most PING_S,
2 s, later) a recovery may start the job elsewhere while this run still goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import TRANSIENT_ERRORS
from sqljobs._runtime.worker.runs import Run, Slots
from sqljobs._runtime.worker.settle_keys import SettleKeys

logger = logging.getLogger("sqljobs.worker")


class LeaseKeeper:
    """Renews the leases of the runs in `slots`, and the worker's registration."""

    def __init__(self, *, client: AsyncClient, slots: Slots, lease_s: float,
                 heartbeat_s: float, register: Callable[[], Awaitable[None]],
                 keys: SettleKeys, log_extra: Mapping[str, Any]) -> None:
        self._client = client
        self._keys = keys  # held for runs whose rows are busy
        self._busy: set[int] = set()  # job ids whose keys this asked for
        self._slots = slots
        self._lease_s = lease_s
        self._heartbeat_s = heartbeat_s
        self._register = register
        self._log_extra = dict(log_extra)
        self._now = asyncio.Event()  # renew at once (a cancel was heard)

    def beat_now(self) -> None:
        """Renew before the next heartbeat is due: a job this worker runs was cancelled
        (jobs_wake carried this worker's token), and the renewal's answer stops its run."""
        self._now.set()

    async def serve(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), self._heartbeat_s)
            self._now.clear()
            try:
                await self.renew()
            except Exception:
                logger.exception("heartbeat failed", extra=self._log_extra)

    def _unbusy(self, job_id: int) -> None:
        if job_id in self._busy:
            self._busy.discard(job_id)
            self._keys.release(job_id, "renewal")

    def _stop_if_late(self, run: Run) -> bool:
        """Stop a run past its lease and its key's cover: another worker may hold it."""
        if run.settling or run.stop_reason is not None or time.monotonic() <= run.deadline:
            return False
        logger.warning("job %s: lease could not be renewed in time; stopping the run",
                       run.job.id, extra={**self._log_extra, **run.log_fields})
        run.stop("lease_lost")
        self._unbusy(run.job.id)
        return True

    def _covered(self, run: Run, until: float) -> None:
        """Its key is held until `until` (0: no longer): checked again then."""
        run.covered_until = until
        if not self._stop_if_late(run):
            loop = asyncio.get_running_loop()
            loop.call_at(loop.time() + max(0.0, run.deadline - time.monotonic()) + 0.01,
                         self._stop_if_late, run)

    async def renew(self) -> None:
        held: list[Run] = []
        for job_id in list(self._busy):
            gone = self._slots.runs.get(job_id)
            if gone is None or gone.stop_reason is not None:
                self._unbusy(job_id)  # the run is over or stopped
        for run in list(self._slots.runs.values()):
            if run.settling or run.stop_reason is not None:
                continue  # (a settling run's key, if any, is the settler's)
            if not self._stop_if_late(run):
                held.append(run)
        if held:
            sent = time.monotonic()
            try:
                answers = await self._client.run(queries.heartbeat_many(
                    [r.job.id for r in held], [r.job.claim for r in held], self._lease_s))
            except TRANSIENT_ERRORS as error:
                logger.warning("lease renewal failed: %s", error, extra=self._log_extra)
            else:
                for run, answer in zip(held, answers, strict=True):
                    if answer.ok:
                        run.lease_deadline = sent + self._lease_s
                        self._unbusy(run.job.id)
                    elif answer.busy:
                        # another transaction holds the row locked: not renewed this
                        # time, still ours; the next beat tries again, and its settle
                        # key, held meanwhile, stands for the lease (the run stops if
                        # neither covers it, above)
                        logger.debug("job %s: its row is busy; lease not renewed this "
                                     "time", run.job.id,
                                     extra={**self._log_extra, **run.log_fields})
                        self._busy.add(run.job.id)
                        self._keys.hold(run.job.id, run.job.claim, "renewal",
                                        covered=functools.partial(self._covered, run))
                    elif not run.settling:
                        logger.warning("job %s is no longer held (cancelled, or its lease "
                                       "lapsed); stopping the run", run.job.id,
                                       extra={**self._log_extra, **run.log_fields})
                        run.stop("lease_lost")
                        self._unbusy(run.job.id)
        try:
            await self._register()
        except TRANSIENT_ERRORS as error:
            logger.warning("worker heartbeat failed: %s", error, extra=self._log_extra)


__all__ = ["LeaseKeeper"]
