"""Draining: how a worker stops without losing or repeating work.

The first SIGTERM (or SIGINT, as Celery does) drains: the claim loop stops claiming,
the jobs claimed ahead but never started go back `interrupted` (not an attempt), and
running jobs get `drain_timeout` seconds to finish; what is still running then is
stopped and sent back `interrupted` too (exit code 0). A second signal cuts the wait:
every run is sent back at once (exit code 1). A job that cannot be sent back (the
database is unreachable) is recovered when its lease lapses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from sqljobs._runtime.worker.runs import Run, Slots
from sqljobs._runtime.worker.settling import Settlement, Settler, error_record

logger = logging.getLogger("sqljobs.worker")

# How long sending a job back may take: short once a forced stop was asked for.
_SEND_BACK_S = 30.0
_SEND_BACK_FORCED_S = 3.0


class Drain:
    """The worker's shutdown: hand back what waits, let what runs finish, cut off."""

    def __init__(self, *, slots: Slots, settler: Settler, timeout: float,
                 force_requested: asyncio.Event, log_extra: Mapping[str, Any]) -> None:
        self._slots = slots
        self._settler = settler
        self._timeout = timeout
        self._force_requested = force_requested
        self._log_extra = dict(log_extra)

    @property
    def _forced(self) -> bool:
        return self._force_requested.is_set()

    def _send_back_s(self) -> float:
        return _SEND_BACK_FORCED_S if self._forced else _SEND_BACK_S

    async def run(self) -> None:
        await self.hand_back_waiting()
        waiting = [r.wait_settled() for r in self._slots.runs.values()]
        if waiting and not self._forced:
            gather: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*waiting))
            force: asyncio.Future[Any] = asyncio.ensure_future(self._force_requested.wait())
            await asyncio.wait({gather, force}, timeout=self._timeout,
                               return_when=asyncio.FIRST_COMPLETED)
            force.cancel()
            gather.cancel()
        left = [r for r in self._slots.runs.values() if not r.is_settled]
        if not left:
            return
        logger.warning("drain cut-off: %d job(s) go back as interrupted", len(left),
                       extra={**self._log_extra, "job_ids": [r.job.id for r in left]})
        for run in left:
            run.stop("interrupt")
        _, pending = await asyncio.wait(
            [asyncio.ensure_future(r.wait_settled()) for r in left],
            timeout=self._send_back_s())
        for task in pending:
            task.cancel()
        if pending:
            logger.error("%d job(s) could not be sent back; their leases will lapse "
                         "and another worker will run them", len(pending),
                         extra=self._log_extra)

    async def hand_back_waiting(self) -> None:
        """Jobs claimed but never started go back `interrupted` (not an attempt)."""
        runs = self._slots.take_waiting()
        if not runs:
            return
        back = Settlement(ack=False, mode="interrupt", error=error_record(
            "interrupted", message="the worker stopped before the job started; not an attempt"))

        def handed_back(run: Run, _settlement: Settlement, _state: object) -> None:
            run.mark_settled()
            self._slots.runs.pop(run.job.id, None)

        for run in runs:
            run.settling = True
            self._settler.submit(run, back, handed_back)
        await asyncio.wait([asyncio.ensure_future(r.wait_settled()) for r in runs],
                           timeout=self._send_back_s())


__all__ = ["Drain"]
