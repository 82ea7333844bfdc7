"""Settling: writing each finished run's outcome, many per statement.

A finished run hands its `Settlement` to the `Settler` (`submit`, with what to call
once it is written) and frees its slot at once. The settler writes every outcome
waiting when a write starts in one `jobs.ack_many` / `jobs.nack_many` statement (group
commit): nothing waits on a timer, and under load one round trip settles a whole batch.
A worker may cap a write (`most`): under declared limits it writes in halves (worker.py,
`_write_most`), the rest going into the next write at once.
What a crash can lose or repeat: a written outcome is never lost; an outcome not yet
committed is lost with the process, so that job's lease lapses and another worker runs
it again (at-least-once). A job whose row another transaction holds locked past the
batch's short wait answers "busy" (ok None): the rest are written at once, and the busy
ones go into the next write after a short pause, their settle keys held meanwhile so that
lease recovery leaves them (`sqljobs._runtime.worker.settle_keys`).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import TRANSIENT_ERRORS, DatabaseError
from sqljobs._client.records import JobState, NackMode, Settled
from sqljobs._runtime.lifecycle import Backoff, failed
from sqljobs._runtime.worker.runs import Run
from sqljobs._runtime.worker.settle_keys import BUSY_RETRY_S, SettleKeys

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
            # a saga wrote a failure that was not final (sqljobs._runtime.worker.running)
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


ACK = Settlement(ack=True)  # a handler that returned None (most do): one shared record

# Called once an outcome is written: with the state the job is in now, or None when the
# fence refused it (the job was no longer ours) or the worker gave up writing it.
Written = Callable[[Run, Settlement, "JobState | None"], None]
_Pending = tuple[Run, Settlement, Written]


class Settler:
    """Writes outcomes in batches: every outcome waiting when a write starts goes into it
    (at most `most()` of them, when that says a number).

    Each outcome's `written` callback is called once it is committed, with the state the
    job is in now, or once the fence refused it (None: the job was no longer ours).
    Transient database errors are retried with backoff until the worker gives up at a
    forced exit.
    """

    def __init__(self, client: AsyncClient, worker_id: str, keys: SettleKeys,
                 after_write: Callable[[], None] = lambda: None,
                 most: Callable[[], int | None] = lambda: None) -> None:
        self._client = client
        self._worker_id = worker_id
        self._keys = keys  # held for outcomes waiting for busy rows
        self._after_write = after_write  # once a batch is committed
        self._most = most  # how many outcomes one write may take now (None: all)
        self._pending: list[_Pending] = []
        self._ready = asyncio.Event()
        self._busy: list[_Pending] = []  # outcomes of busy rows, written again after a pause
        self._again: asyncio.Task[None] | None = None
        self.batches = 0

    def submit(self, run: Run, settlement: Settlement, written: Written) -> None:
        """Write this outcome with the next batch; then call `written`."""
        self._pending.append((run, settlement, written))
        self._ready.set()

    def _later(self, busy: list[_Pending]) -> None:
        """Outcomes of busy rows: into a write after a short pause (their lock may be
        held for long; the rest of the worker's outcomes must not wait for them), their
        settle keys held meanwhile."""
        for run, _, _ in busy:
            self._keys.hold(run.job.id, run.job.claim, "outcome")
        self._busy.extend(busy)
        if self._again is None or self._again.done():
            self._again = asyncio.get_running_loop().create_task(self._write_again())

    async def _write_again(self) -> None:
        await asyncio.sleep(BUSY_RETRY_S)
        self._pending.extend(self._busy)
        self._busy = []
        self._ready.set()

    async def serve(self) -> None:
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                most = self._most()
                if most is None or len(self._pending) <= most:
                    batch, self._pending = self._pending, []
                else:  # the rest go into the next write, which follows at once
                    batch, self._pending = self._pending[:most], self._pending[most:]
                    self._ready.set()
                if batch:
                    try:
                        await self._write(batch)
                    except asyncio.CancelledError:
                        self._give_up(batch)
                        raise
                    except Exception:
                        # Not a connection problem: a bug or a refused argument. Never let
                        # the settler die; these jobs' leases lapse and they run again.
                        logger.exception("settling %d job(s) failed; their leases will "
                                         "lapse", len(batch), extra={"worker_id": self._worker_id})
                        self._give_up(batch)
        finally:  # the worker stops: what is still unwritten is given up, and told so
            if self._again is not None:
                self._again.cancel()
            unwritten, self._pending, self._busy = self._pending + self._busy, [], []
            self._give_up(unwritten)

    def _give_up(self, batch: list[_Pending]) -> None:
        for pending in batch:
            self._answer(pending, None)

    def _answer(self, pending: _Pending, state: JobState | None) -> None:
        run, settlement, written = pending
        self._keys.release(run.job.id, "outcome")
        if run.is_settled:
            return  # answered already: acked before a retried partial batch
        try:
            written(run, settlement, state)
        except Exception:  # never let the settler die of what a callback does
            logger.exception("job %s: after its settle", run.job.id,
                             extra={"worker_id": self._worker_id})

    async def _write(self, batch: list[_Pending]) -> None:
        acks = [p for p in batch if p[1].ack]
        nacks = [p for p in batch if not p[1].ack]
        backoff = Backoff(first=0.1)
        while acks or nacks:
            try:
                if acks:
                    self._later_if_any(await self._acks(acks))
                    acks = []
                if nacks:
                    self._later_if_any(await self._nacks(nacks))
                    nacks = []
            except TRANSIENT_ERRORS as error:
                pause = backoff.next()
                failed(logger, f"settling {len(acks) + len(nacks)} job(s)", error, pause,
                       {"worker_id": self._worker_id})
                await asyncio.sleep(pause)
        self._after_write()

    def _later_if_any(self, busy: list[_Pending]) -> None:
        if busy:
            self._later(busy)

    async def _acks(self, acks: list[_Pending]) -> list[_Pending]:
        """Write the acks; answers those whose row was busy. Transient errors propagate
        and the caller retries."""
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
                busy = []
                for pending in acks:
                    busy += await self._acks([pending])
                return busy
            run, _, written = acks[0]
            retry = Settlement(ack=False, error=error_record("result_not_json", error))
            return await self._nacks([(run, retry, written)])
        self.batches += 1
        busy = []
        for pending, answer in zip(acks, answers, strict=True):
            if answer.busy:
                busy.append(pending)
            else:
                self._answer(pending, JobState.SUCCEEDED if answer.ok else None)
        return busy

    async def _nacks(self, nacks: list[_Pending]) -> list[_Pending]:
        """Write the nacks; answers those whose row was busy."""
        answers: list[Settled] = await self._client.run(queries.nack_many(
            [p[0].job.id for p in nacks], [p[0].job.claim for p in nacks],
            [p[1].error for p in nacks], [p[1].mode for p in nacks],
            [p[1].delay_s for p in nacks]))
        self.batches += 1
        busy = []
        for pending, answer in zip(nacks, answers, strict=True):
            if answer.busy:
                busy.append(pending)
            else:
                self._answer(pending, answer.state if answer.ok else None)
        return busy


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


__all__ = ["ACK", "Settlement", "Settler", "Written", "clean_text", "error_record"]
