"""Progress throttling: `ctx.progress(value)` writes at most once per interval per run.

A handler may report progress in a tight loop; each report is a fenced statement
(`jobs.progress`), so writing every one would cost a round trip each. The first report
of a run is written at once; one made within `interval_s` of the last write is kept
(the last value wins) and written when the interval ends, or just before the run's
outcome is written, whichever comes first. A run told to stop writes nothing more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

_NOTHING = object()


Write = Callable[[Any], Awaitable[bool | None]]  # the run's fenced jobs.progress


@dataclass(slots=True)
class _Pending:
    write: Write
    written_at: float                 # monotonic: the last write
    value: Any = _NOTHING             # a report not written yet (the last one)
    flush: asyncio.Task[None] | None = field(default=None)


class ProgressThrottle:
    """One worker's throttled progress writes, by job id."""

    def __init__(self) -> None:
        self._runs: dict[int, _Pending] = {}

    async def report(self, job_id: int, value: Any, interval_s: float, write: Write) -> bool:
        """Write now, or keep it for the end of the interval (answers True: accepted;
        False: the fence refused the write)."""
        now = time.monotonic()
        pending = self._runs.get(job_id)
        if pending is None or (pending.flush is None and now - pending.written_at >= interval_s):
            self._runs[job_id] = _Pending(write=write, written_at=now)
            return bool(await write(value))
        pending.value = value
        if pending.flush is None:
            pending.flush = asyncio.get_running_loop().create_task(
                self._flush_at(pending, pending.written_at + interval_s))
        return True

    async def _flush_at(self, pending: _Pending, when: float) -> None:
        await asyncio.sleep(max(0.0, when - time.monotonic()))
        pending.flush = None
        await self._flush(pending)

    @staticmethod
    async def _flush(pending: _Pending) -> None:
        value, pending.value = pending.value, _NOTHING
        if value is _NOTHING:
            return
        pending.written_at = time.monotonic()
        await pending.write(value)

    async def settle(self, job_id: int, write: bool) -> None:
        """The run is over: write its last kept report first when `write` (its outcome
        follows), and forget it."""
        pending = self.forget(job_id)
        if pending is not None and write:
            await self._flush(pending)

    def forget(self, job_id: int) -> _Pending | None:
        """Drop the run's kept report (and its timer) without writing it."""
        pending = self._runs.pop(job_id, None)
        if pending is not None and pending.flush is not None:
            pending.flush.cancel()
        return pending
