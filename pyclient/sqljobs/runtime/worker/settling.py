"""Settling: writing each finished run's outcome, many per statement.

A finished run hands its `Settlement` to the `Settler` and frees its slot at once. The
settler writes every outcome waiting when a write starts in one `jobs.ack_many` /
`jobs.nack_many` statement (group commit): nothing waits on a timer, and under load one
round trip settles a whole batch. What a crash can lose or repeat: a written outcome is
never lost; an outcome not yet committed is lost with the process, so that job's lease
lapses and another worker runs it again (at-least-once).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from dataclasses import dataclass
from typing import Any

import psycopg

from sqljobs.client import queries
from sqljobs.client.connection import AsyncClient
from sqljobs.client.errors import TRANSIENT_ERRORS, DatabaseError
from sqljobs.client.records import JobState, NackMode, Settled
from sqljobs.runtime.worker.runs import Run

logger = logging.getLogger("sqljobs.worker")

_MESSAGE_LIMIT = 2_000
_TRACEBACK_LIMIT = 16_000


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to write for one finished run: an ack with its result, or a nack."""

    ack: bool
    result: Any = None
    error: dict[str, Any] | None = None
    mode: NackMode = "retry"
    delay_s: float | None = None
    written: bool = False  # already written: a step parked it, or a saga settled it
    compensated: bool = False  # a saga's compensations all ran and it settled

    @property
    def label(self) -> str:
        if self.ack:
            return "succeeded"
        if self.compensated:
            return "compensated"
        if self.written and self.mode == "park":
            return "parked"
        return f"nack:{self.mode}"

    def outcome(self, state: JobState | None) -> str:
        """What became of the run, once written and the job is in `state`: succeeded,
        retried, snoozed, interrupted, failed, dead, parked, compensated (or lost)."""
        if self.ack:
            return "succeeded"
        if self.compensated:
            return "compensated"
        if self.written:
            # a saga wrote a failure that was not final (sqljobs.runtime.worker.running)
            return "parked" if self.mode == "park" else "retried"
        if state is None:
            return "lost"
        if self.mode == "shed":
            return "snoozed"
        if self.mode == "interrupt":
            return "interrupted"
        if state in (JobState.READY, JobState.RUNNING):  # running: a saga's unwind began
            return "retried"
        return state.value


_Pending = tuple[Run, Settlement, "asyncio.Future[JobState | None]"]


class Settler:
    """Writes outcomes in batches: every outcome waiting when a write starts goes into it.

    `settle()` returns once the outcome is committed, with the state the job is in now,
    or once the fence refused it (None: the job was no longer ours). Transient database
    errors are retried with backoff until the worker gives up at a forced exit.
    """

    def __init__(self, client: AsyncClient, worker_id: str) -> None:
        self._client = client
        self._worker_id = worker_id
        self._pending: list[_Pending] = []
        self._ready = asyncio.Event()
        self.batches = 0

    async def settle(self, run: Run, settlement: Settlement) -> JobState | None:
        future: asyncio.Future[JobState | None] = asyncio.get_running_loop().create_future()
        self._pending.append((run, settlement, future))
        self._ready.set()
        return await future

    async def serve(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            if batch:
                try:
                    await self._write(batch)
                except asyncio.CancelledError:
                    self._give_up(batch)
                    raise
                except Exception:
                    # Not a connection problem: a bug or a refused argument. Never let
                    # the settler die; these jobs' leases lapse and they run again.
                    logger.exception("settling %d job(s) failed; their leases will lapse",
                                     len(batch), extra={"worker_id": self._worker_id})
                    self._give_up(batch)

    @staticmethod
    def _give_up(batch: list[_Pending]) -> None:
        for _, _, future in batch:
            if not future.done():
                future.set_result(None)

    async def _write(self, batch: list[_Pending]) -> None:
        acks = [p for p in batch if p[1].ack]
        nacks = [p for p in batch if not p[1].ack]
        delay = 0.1
        while acks or nacks:
            try:
                if acks:
                    acks = await self._acks(acks)
                if nacks:
                    await self._nacks(nacks)
                    nacks = []
            except TRANSIENT_ERRORS as error:
                logger.warning("settling %d job(s) failed, retrying in %.1f s: %s",
                               len(acks) + len(nacks), delay, error,
                               extra={"worker_id": self._worker_id})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _acks(self, acks: list[_Pending]) -> list[_Pending]:
        """Write the acks (answers []); transient errors propagate and the caller retries."""
        try:
            answers = await self._client.run(queries.ack_many(
                [p[0].job.id for p in acks], [p[0].job.claim for p in acks],
                [p[1].result for p in acks]))
        except TRANSIENT_ERRORS:
            raise
        except (psycopg.Error, DatabaseError) as error:
            # The server refused a value: write them one by one, and fail the attempt
            # of a job whose result alone is refused.
            if len(acks) > 1:
                for pending in acks:
                    await self._acks([pending])
                return []
            run, _, future = acks[0]
            retry = Settlement(ack=False, error=error_record("result_not_json", error))
            await self._nacks([(run, retry, future)])
            return []
        self.batches += 1
        for (_, _, future), answer in zip(acks, answers, strict=True):
            if not future.done():  # done: acked before a retried partial batch
                future.set_result(JobState.SUCCEEDED if answer.ok else None)
        return []

    async def _nacks(self, nacks: list[_Pending]) -> None:
        answers: list[Settled] = await self._client.run(queries.nack_many(
            [p[0].job.id for p in nacks], [p[0].job.claim for p in nacks],
            [p[1].error for p in nacks], [p[1].mode for p in nacks],
            [p[1].delay_s for p in nacks]))
        self.batches += 1
        for (_, _, future), answer in zip(nacks, answers, strict=True):
            if not future.done():
                future.set_result(answer.state if answer.ok else None)


def clean_text(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    """Text fit for last_error: no NUL (jsonb cannot hold it), at most `limit` characters."""
    text = text.replace("\x00", "\\0")
    return text if len(text) <= limit else text[: limit - 15] + "... (truncated)"


def error_record(kind: str, error: BaseException | None = None, message: str | None = None,
                 ) -> dict[str, Any]:
    """The jsonb stored in last_error: {kind, type, message, traceback}."""
    record: dict[str, Any] = {"kind": kind}
    if error is not None:
        kind_type = type(error)
        record["type"] = f"{kind_type.__module__}.{kind_type.__qualname__}"
        record["message"] = clean_text(message or str(error) or kind_type.__name__)
        record["traceback"] = clean_text(
            "".join(traceback.format_exception(error)), _TRACEBACK_LIMIT)
    else:
        record["message"] = clean_text(message or kind)
    return record


__all__ = ["Settlement", "Settler", "clean_text", "error_record"]
