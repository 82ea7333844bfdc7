"""The worker: claims jobs, runs their handlers, settles them in batches.

    worker = Worker(app, queues=["mail", "default"], concurrency=20)
    exit_code = worker.run_sync()          # or: await worker.run(); app.run_worker(...)
    $ sqljobs worker myapp.jobs:app --queue mail --queue default --concurrency 20

One asyncio loop and a handful of connections (a small pool for claim, settle,
heartbeat and progress, plus one LISTEN connection), never one connection per job.

Claim: in batches sized to the free slots plus `prefetch` (default: `concurrency`),
filtered to the job names this app declares (a job only newer code knows waits for a
worker that knows it). Claimed jobs beyond the free slots wait in a local queue, in
claim order, their leases renewed like running ones, and start as slots free; so a
slot that frees starts the next job at once while the next claim is in flight. A claim
is made when a NOTIFY on `jobs_wake` names one of our queues, when the last claim was
full and a slot frees, and at least every `poll_interval` seconds regardless (that poll
also recovers lapsed leases and wakes delayed jobs). If the LISTEN connection dies the
worker keeps polling and reconnects in the background. `prefetch=0` claims only for
free slots (a fleet of workers then shares a short queue most evenly).

Run: async handlers as tasks on the loop, sync handlers in a pool of `concurrency`
daemon threads; at most `concurrency` runs at once. Each handler gets a `JobContext`.
Stopping a run (timeout, lost lease, drain cut-off) cancels an async handler's task; a
sync handler cannot be interrupted, so its `ctx.cancelled` is set, its outcome is
written (or not) at once, whatever it returns later is discarded, and its slot stays
taken until its thread returns.

Settle (what a crash can lose or repeat): a finished run frees its slot at once and
hands its outcome to the settler, which writes every outcome waiting when a write
starts in one ack_many / nack_many statement (group commit), so nothing waits on a
timer, and a drain or stop waits until every outcome is written. At most
`concurrency + prefetch` outcomes wait at a time: past that, no new job starts. A crash
therefore loses no written outcome; what it can repeat is a run that finished but whose
settle had not committed: that job's lease lapses and another worker runs it again
(at-least-once). Jobs still waiting in the local queue when the worker stops go back
`interrupted` (not an attempt); after a crash their leases lapse like any other.

Leases are renewed every `heartbeat_s` with one heartbeat_many per tick; a job whose
heartbeat answers false (lease lapsed and taken over, or cancelled by an operator) is
stopped and writes nothing more, and so is any run whose lease this worker could not
renew in time (e.g. the database was unreachable).

Errors (stored in last_error as {kind, type, message, traceback}):
    handler returned, JSON-encodable         ack (the value is the job's result)
    handler returned a non-JSON value        retry by policy, kind "result_not_json"
    payload no longer validates              fail, kind "invalid_payload"
    exception of a declared `terminal` type  fail, kind "terminal"
    sqljobs.Retry(in_=s)                     retry after s seconds, kind "retry"
    sqljobs.Snooze(s)                        shed (not an attempt) for s seconds
    timeout_s passed                         run cancelled, retry by policy, kind "timeout"
    any other exception                      retry by policy (backoff in SQL), kind "error"

Shutdown: the first SIGTERM (or SIGINT, as Celery does) drains: stop claiming, let
running jobs finish until `drain_timeout`, then stop the rest and send them back
`interrupted` (not an attempt); exit code 0. A second signal of either kind stops at
once: every run is sent back `interrupted` right away; exit code 1. A job the worker
could not send back (database unreachable) is recovered by its lease lapsing.

The worker registers in `jobs.worker` (sql/45_workers.sql) and refreshes that row with
each heartbeat tick; a clean exit removes it. `sqljobs workers` lists live workers.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import json
import logging
import os
import secrets
import signal
import socket
import time
import traceback
from collections.abc import MutableMapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from sqljobs import queries
from sqljobs._role import Role
from sqljobs._threads import DaemonThreadPool
from sqljobs.app import check_schema_version
from sqljobs.client import AsyncClient
from sqljobs.context import JobContext, RunCancelled, StopReason
from sqljobs.control import Retry, Snooze
from sqljobs.errors import ConfigurationError, DatabaseError, InvalidPayload, LeaseLost
from sqljobs.models import ClaimedJob, NackMode, Settled
from sqljobs.steps import Steps, Suspended

if TYPE_CHECKING:
    from sqljobs.app import App
    from sqljobs.jobs import JobDefinition

logger = logging.getLogger("sqljobs.worker")
job_logger = logging.getLogger("sqljobs.job")

WAKE_CHANNEL = "jobs_wake"
SAGA_RETRY_S = 5.0  # a failed compensation: the unwind is tried again after this
MAX_CLAIM = 1000  # jobs.claim's limit
_MESSAGE_LIMIT = 2_000
_TRACEBACK_LIMIT = 16_000
# Errors that mean "the database is unreachable right now": retry, don't crash.
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError, OSError)


class ResultNotJSON(TypeError):
    """A handler returned a value PostgreSQL's jsonb cannot hold."""


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to write for one finished run: an ack with its result, or a nack."""

    ack: bool
    result: Any = None
    error: dict[str, Any] | None = None
    mode: NackMode = "retry"
    delay_s: float | None = None
    written: bool = False  # already written: a durable step parked it, or a saga settled it

    @property
    def label(self) -> str:
        if self.written:
            return "parked" if self.mode == "park" else "compensated"
        return "succeeded" if self.ack else f"nack:{self.mode}"


class _JobLog(logging.LoggerAdapter[logging.Logger]):
    """Adds the job's fields to every record, merged with the caller's own `extra`."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any],
                ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


class _Run:
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


_Pending = tuple[_Run, Settlement, "asyncio.Future[bool]"]


class _Settler:
    """Writes outcomes in batches: every outcome waiting when a write starts goes into it.

    `settle()` returns once the outcome is committed (True) or the fence refused it
    (False: the job was no longer ours). Transient database errors are retried with
    backoff until the worker gives up at a forced exit.
    """

    def __init__(self, client: AsyncClient, worker_id: str) -> None:
        self._client = client
        self._worker_id = worker_id
        self._pending: list[_Pending] = []
        self._ready = asyncio.Event()
        self.batches = 0

    async def settle(self, run: _Run, settlement: Settlement) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
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
                future.set_result(False)

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
            except _TRANSIENT as error:
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
        except _TRANSIENT:
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
                future.set_result(answer.ok)
        return []

    async def _nacks(self, nacks: list[_Pending]) -> None:
        answers: list[Settled] = await self._client.run(queries.nack_many(
            [p[0].job.id for p in nacks], [p[0].job.claim for p in nacks],
            [p[1].error for p in nacks], [p[1].mode for p in nacks],
            [p[1].delay_s for p in nacks]))
        self.batches += 1
        for (_, _, future), answer in zip(nacks, answers, strict=True):
            if not future.done():
                future.set_result(answer.ok)


def _clean(text: str, limit: int) -> str:
    text = text.replace("\x00", "\\0")  # jsonb cannot hold NUL
    return text if len(text) <= limit else text[: limit - 15] + "... (truncated)"


def error_record(kind: str, error: BaseException | None = None, message: str | None = None,
                 ) -> dict[str, Any]:
    """The jsonb stored in last_error: {kind, type, message, traceback}."""
    record: dict[str, Any] = {"kind": kind}
    if error is not None:
        kind_type = type(error)
        record["type"] = f"{kind_type.__module__}.{kind_type.__qualname__}"
        record["message"] = _clean(message or str(error) or kind_type.__name__, _MESSAGE_LIMIT)
        record["traceback"] = _clean(
            "".join(traceback.format_exception(error)), _TRACEBACK_LIMIT)
    else:
        record["message"] = _clean(message or kind, _MESSAGE_LIMIT)
    return record


def json_result(value: Any) -> Any:
    """The value as jsonb will store it; raises ResultNotJSON with the reason."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ResultNotJSON(
            f"the handler returned a value JSON cannot hold ({type(value).__name__}): {error}; "
            f"return JSON types (dict, list, str, int, float, bool, None) or a pydantic model"
        ) from error
    if "\\u0000" in text:
        raise ResultNotJSON("the handler returned a string holding NUL (\\u0000), "
                            "which PostgreSQL jsonb cannot store")
    return value


class Worker(Role):
    """Runs the jobs an `App` declares. See the module docstring for the guarantees."""

    def __init__(
        self,
        app: App,
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        *,
        lease_s: float = 30.0,
        heartbeat_s: float | None = None,
        poll_interval: float = 1.0,
        prefetch: int | None = None,
        drain_timeout: float = 30.0,
        listen: bool = True,
        listen_retry_s: float = 1.0,
        install_signals: bool = True,
        worker_id: str | None = None,
    ) -> None:
        Role.__init__(self)
        definitions = {name: handle.definition for name, handle in app.jobs.items()}
        if not definitions:
            raise ConfigurationError("the app declares no jobs: a worker would run nothing")
        if concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if prefetch is not None and prefetch < 0:
            raise ConfigurationError("prefetch must be zero or more")
        if lease_s <= 0 or poll_interval <= 0 or drain_timeout < 0:
            raise ConfigurationError("lease_s and poll_interval must be positive, "
                                     "drain_timeout zero or more")
        self.app = app
        self.queues = list(dict.fromkeys(queues or sorted({d.queue for d in definitions.values()})))
        if not self.queues:
            raise ConfigurationError("a worker needs at least one queue")
        self.names = sorted(definitions)
        self.concurrency = concurrency
        self.prefetch = concurrency if prefetch is None else prefetch
        # Outcomes that may wait for the settler before no new job starts.
        self._settle_cap = concurrency + self.prefetch
        self.lease_s = float(lease_s)
        self.heartbeat_s = float(heartbeat_s) if heartbeat_s else self.lease_s / 3
        if self.heartbeat_s >= self.lease_s:
            raise ConfigurationError("heartbeat_s must be shorter than lease_s")
        self.poll_interval = float(poll_interval)
        self.drain_timeout = float(drain_timeout)
        self.listen = listen
        self.listen_retry_s = float(listen_retry_s)
        self.install_signals = install_signals
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = worker_id or f"{self.host}:{self.pid}:{secrets.token_hex(3)}"
        self._definitions: dict[str, JobDefinition[Any]] = definitions
        self._queue_set = frozenset(self.queues)
        self._runs: dict[int, _Run] = {}  # every job held: waiting, running or settling
        self._waiting: collections.deque[_Run] = collections.deque()  # claimed, not started
        self._busy = 0  # slots taken: runs started whose handler has not finished
        self._want_claim = True
        self._stop_requested: asyncio.Event | None = None
        self._force_requested: asyncio.Event | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        self._client: AsyncClient | None = None
        self._settler: _Settler | None = None
        self._threads = DaemonThreadPool(concurrency, name=f"sqljobs-{self.pid}")
        self.listening = False
        self.counts: dict[str, int] = {}
        self._log_extra = {"worker_id": self.id}

    # -- public control ---------------------------------------------------------------

    def _on_stop_requested(self) -> None:
        logger.info("draining: no new claims; %d running job(s) get %.0f s to finish",
                    len(self._runs), self.drain_timeout, extra=self._log_extra)

    def _on_force_requested(self) -> None:
        logger.warning("stopping at once: %d running job(s) go back as interrupted",
                       len(self._runs), extra=self._log_extra)

    def _request_stop(self) -> None:
        super()._request_stop()
        if self._stop_requested is not None:
            self._stop_requested.set()

    def _request_force(self) -> None:
        super()._request_force()
        if self._force_requested is not None:
            self._force_requested.set()

    # -- lifecycle --------------------------------------------------------------------

    def run_sync(self) -> int:
        """Run until stopped; answers the exit code (0 after a drain, 1 after a forced stop)."""
        return asyncio.run(self.run())

    async def run(self) -> int:
        """Run until stopped; answers the exit code (0 after a drain, 1 after a forced stop)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop_requested = asyncio.Event()
        self._force_requested = asyncio.Event()
        if self._stopping:
            self._stop_requested.set()
        dsn = self.app.dsn
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, min_size=2, max_size=4, open=False, timeout=10.0,
            kwargs={"autocommit": True, "prepare_threshold": 0,
                    "application_name": f"sqljobs-worker {self.id}"[:63]},
            name="sqljobs-worker",
        )
        await pool.open(wait=True, timeout=30.0)
        self._pool = pool
        client = self._client = AsyncClient(pool)
        background: list[asyncio.Task[None]] = []
        signals: list[signal.Signals] = []
        try:
            check_schema_version(await client.run(queries.schema_version()))
            await self._register()
            self._settler = _Settler(client, self.id)
            background.append(asyncio.create_task(self._settler.serve(), name="settler"))
            background.append(asyncio.create_task(self._heartbeats(), name="heartbeats"))
            if self.listen:
                background.append(asyncio.create_task(self._listen(dsn), name="listen"))
            signals = self._install_signals(loop)
            logger.info(
                "sqljobs worker %s started: queues=%s concurrency=%d prefetch=%d jobs=%d "
                "lease=%gs poll=%gs listen=%s", self.id, ",".join(self.queues),
                self.concurrency, self.prefetch, len(self.names), self.lease_s,
                self.poll_interval,
                "on" if self.listen else "off",
                extra={**self._log_extra, "queues": self.queues, "concurrency": self.concurrency,
                       "names": self.names},
            )
            await self._claim_loop()
            await self._drain()
        finally:
            self._remove_signals(loop, signals)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            for run in list(self._runs.values()):
                if run.task is not None and not run.task.done():
                    run.task.cancel()
            try:
                await asyncio.wait_for(client.run(queries.worker_stop(self.id)), 5.0)
            except Exception as error:  # the row expires on its own
                logger.warning("could not deregister: %s", error, extra=self._log_extra)
            self._threads.shutdown()
            await pool.close()
            self._pool = None
        code = 1 if self._forced else 0
        logger.info("sqljobs worker %s stopped (exit %d): %s", self.id, code,
                    ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items())) or "no jobs",
                    extra={**self._log_extra, "counts": dict(self.counts)})
        return code

    async def _register(self) -> None:
        assert self._client is not None
        await self._client.run(queries.worker_heartbeat(
            self.id, self.queues, self.names, self.concurrency,
            ttl_s=max(3 * self.heartbeat_s, 5.0), host=self.host, pid=self.pid,
            info={"lease_s": self.lease_s, "poll_interval": self.poll_interval}))

    # -- claim ------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        assert self._client is not None
        next_poll = time.monotonic()
        failures = 0
        while not self._stopping:
            now = time.monotonic()
            # The periodic claim also recovers lapsed leases and wakes due parked jobs;
            # claims made as slots free skip that work (it is most of a claim's cost).
            polling = now >= next_poll
            if polling:
                self._want_claim = True
            free = self._claimable()
            # Claim in batches: with jobs still waiting locally, wait until half the
            # room is free (fewer, larger claims); with none waiting, claim at once.
            worth = free > 0 and (not self._waiting
                                  or free >= (self.concurrency + self.prefetch) // 2)
            if worth and self._want_claim:
                self._want_claim = False
                if polling:
                    next_poll = now + self.poll_interval
                sent = time.monotonic()
                try:
                    jobs = await self._client.run(queries.claim(
                        self.queues, self.id, min(free, MAX_CLAIM), self.lease_s, self.names,
                        recover=polling))
                except Exception as error:
                    failures += 1
                    pause = min(0.2 * 2 ** min(failures, 5), max(self.poll_interval, 1.0), 5.0)
                    if isinstance(error, _TRANSIENT):
                        logger.warning("claim failed (%s); retrying in %.1f s", error, pause,
                                       extra=self._log_extra)
                    else:
                        logger.exception("claim failed; retrying in %.1f s", pause,
                                         extra=self._log_extra)
                    self._want_claim = True
                    await self._sleep(pause)
                    continue
                failures = 0
                for job in jobs:
                    self._start(job, sent)
                if len(jobs) == min(free, MAX_CLAIM):
                    self._want_claim = True  # maybe more waiting: claim again when a slot frees
                if self._want_claim and self._claimable() > 0 and not self._waiting:
                    continue
            self._wake.clear()
            # With every slot and the local queue full nothing can be claimed, poll due
            # or not: wait for a slot to free (it sets _wake) instead of spinning.
            timeout = (None if self._claimable() <= 0
                       else max(0.0, next_poll - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _sleep(self, seconds: float) -> None:
        assert self._stop_requested is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), seconds)

    def _claimable(self) -> int:
        """How many jobs a claim may take now: room in the slots and the local queue;
        none while `concurrency + prefetch` outcomes wait to be written."""
        if self._settling() >= self._settle_cap:
            return 0
        return self.concurrency + self.prefetch - self._busy - len(self._waiting)

    def _settling(self) -> int:
        """Runs whose handler finished and whose outcome is not yet written."""
        return len(self._runs) - self._busy - len(self._waiting)

    def _start(self, job: ClaimedJob, sent: float) -> None:
        run = _Run(job, lease_deadline=sent + self.lease_s)
        self._runs[job.id] = run
        self._waiting.append(run)
        self._start_waiting()

    def _start_waiting(self) -> None:
        """Start waiting runs while slots are free and the settler keeps up."""
        while self._waiting and self._busy < self.concurrency and not self._stopping:
            if self._settling() >= self._settle_cap:
                return  # the settler is behind: start more when it writes
            run = self._waiting.popleft()
            if run.stop_reason is not None:  # lost (cancelled, lease lapsed) while waiting
                self._count("lost")
                run.settled.set()
                self._runs.pop(run.job.id, None)
                continue
            self._busy += 1
            run.holds_slot = True
            run.started = time.monotonic()
            run.task = asyncio.create_task(self._execute(run), name=f"job-{run.job.id}")

    def _free_slot(self, run: _Run) -> None:
        if run.holds_slot:
            run.holds_slot = False
            self._busy -= 1
            self._start_waiting()
            self._wake.set()

    def _finished(self, run: _Run) -> None:
        self._free_slot(run)
        self._runs.pop(run.job.id, None)
        self._start_waiting()
        self._wake.set()

    # -- run --------------------------------------------------------------------------

    async def _execute(self, run: _Run) -> None:
        job = run.job
        fields = {**self._log_extra, **run.log_fields}
        try:
            settlement = await self._outcome(run)
            if settlement is not None and not settlement.written:
                settlement = await self._saga(run, settlement)
            if settlement is None:
                self._count("lost")
                logger.warning("job %s stopped: no longer held by this worker (%s); "
                               "nothing written", job.id, run.stop_reason,
                               extra={**fields, "outcome": "lost"})
                return
            run.settling = True
            if run.thread is None or run.thread.done():
                self._free_slot(run)  # the slot is free; the outcome waits for the settler
            if settlement.written:  # a durable step parked the job, or a saga settled it
                self._count(settlement.label)
                logger.info("job %s %s %s", job.id, job.name, settlement.label,
                            extra={**fields, "outcome": settlement.label})
                return
            assert self._settler is not None
            ok = await self._settler.settle(run, settlement)
            duration_ms = round((time.monotonic() - run.started) * 1000, 1)
            if ok:
                self._count(settlement.label)
                level = logging.INFO if settlement.ack or settlement.mode in (
                    "shed", "interrupt") else logging.WARNING
                error = settlement.error or {}
                reason = f" ({error.get('kind')}: {error.get('message')})" if error else ""
                logger.log(level, "job %s %s %s%s", job.id, job.name, settlement.label, reason,
                           extra={**fields, "outcome": settlement.label,
                                  "duration_ms": duration_ms,
                                  "error_kind": error.get("kind")})
            else:
                self._count("lost")
                logger.warning("job %s %s: settle refused, the lease was lost (another "
                               "worker may run it again)", job.id, settlement.label,
                               extra={**fields, "outcome": "lost"})
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("job %s: worker error", job.id, extra=fields)
        finally:
            run.settled.set()
            if run.thread is not None and not run.thread.done():
                # A sync handler Python cannot interrupt: its slot stays taken until
                # its thread returns (its outcome is already written or discarded).
                await asyncio.wrap_future(run.thread)
            self._finished(run)

    async def _saga(self, run: _Run, settlement: Settlement) -> Settlement | None:
        """Sagas (sqljobs.steps, docs/design/sagas.md): a job that fails for good with
        completed compensable steps, or that is already unwinding (cancelled, or resumed
        after a crash), runs its compensations in reverse order and settles itself."""
        steps = run.ctx._steps if run.ctx is not None else None
        if steps is None or not (steps.unwinding or steps.has_compensations):
            return settlement
        if run.stop_reason in ("lease_lost", "interrupt"):
            return settlement
        job = run.job
        final = settlement.mode == "fail" or (
            settlement.mode == "retry" and job.attempt >= job.max_attempts)
        if not steps.unwinding and (settlement.ack or not final):
            return settlement
        if run.stop_reason == "timeout":
            steps.reopen()  # the handler was stopped; its compensations must still run
        try:
            await steps.unwind("fail" if settlement.mode == "fail" else "retry",
                               settlement.error)
        except (LeaseLost, RunCancelled):
            if run.stop_reason == "interrupt":
                return Settlement(ack=False, mode="interrupt", error=error_record(
                    "interrupted", message="the worker stopped during a saga's unwind"))
            return None
        except Exception as error:
            # A compensation failed: the job stays compensating; try the unwind again
            # later (not an attempt). Compensations must be retryable.
            return Settlement(ack=False, mode="shed", delay_s=SAGA_RETRY_S,
                              error=error_record("compensation_failed", error))
        return Settlement(ack=False, mode="fail", written=True)

    def _count(self, label: str) -> None:
        self.counts[label] = self.counts.get(label, 0) + 1

    async def _outcome(self, run: _Run) -> Settlement | None:
        """Run the handler; answers what to write, or None when nothing may be written."""
        job = run.job
        definition = self._definitions[job.name]
        try:
            payload = definition.parse_payload(job.payload)
        except InvalidPayload as error:
            record = error_record("invalid_payload", error)
            if error.detail:
                record["detail"] = _clean(error.detail, _MESSAGE_LIMIT)
            record.pop("traceback", None)
            return Settlement(ack=False, error=record, mode="fail")

        ctx = JobContext(
            job_id=job.id, name=job.name, queue=job.queue, tenant=job.tenant, key=job.key,
            attempt=job.attempt, max_attempts=job.max_attempts, claim=job.claim,
            worker_id=self.id,
            logger=_JobLog(job_logger, {**self._log_extra, **run.log_fields}),
            loop=asyncio.get_running_loop(),
            report_progress=lambda value: self._progress(run, value),
            saved_progress=job.progress,
        )
        assert self._client is not None
        ctx._steps = Steps(
            job_id=job.id, claim=job.claim, stored=job.steps, started_at=job.started_at,
            lease_s=self.lease_s, run=self._client.run, cancelled=ctx.cancelled,
            lost=lambda: run.stop("lease_lost"), loop=ctx._loop)
        run.ctx = ctx
        if run.stop_reason is not None:
            ctx._stop(run.stop_reason)

        handler: asyncio.Future[Any]
        if definition.is_async:
            handler = asyncio.ensure_future(definition.fn(ctx, payload))
        else:
            copy = contextvars.copy_context()
            run.thread = self._threads.submit(copy.run, definition.fn, ctx, payload)
            handler = asyncio.wrap_future(run.thread)
        timeout = job.timeout_s
        done, _ = await asyncio.wait({handler, run.stopped}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)

        if handler in done and not handler.cancelled() \
                and isinstance(handler.exception(), Suspended):
            return Settlement(ack=False, mode="park", written=True)
        if handler in done and not handler.cancelled() and handler.exception() is None \
                and run.stop_reason != "lease_lost":
            try:
                return Settlement(ack=True, result=json_result(handler.result()))
            except ResultNotJSON as error:
                return Settlement(ack=False, error=error_record("result_not_json", error))
        if run.stop_reason is None and handler not in done:
            run.stop("timeout")
        if run.stop_reason is not None:
            await self._cancel_handler(handler)
            if run.stop_reason == "lease_lost":
                return None
            if run.stop_reason == "timeout":
                return Settlement(ack=False, error=error_record(
                    "timeout", message=f"the run exceeded its timeout of {timeout:g} s"))
            return Settlement(ack=False, mode="interrupt", error=error_record(
                "interrupted", message="the worker stopped (drain cut-off); not an attempt"))
        return self._classify(definition, handler)

    async def _cancel_handler(self, handler: asyncio.Future[Any]) -> None:
        if handler.done():
            return
        handler.cancel()  # an async handler gets CancelledError; a thread cannot be stopped
        if isinstance(handler, asyncio.Task):
            await asyncio.wait({handler}, timeout=1.0)

    def _classify(self, definition: JobDefinition[Any], handler: asyncio.Future[Any],
                  ) -> Settlement:
        if handler.cancelled():
            error: BaseException = asyncio.CancelledError("the handler was cancelled")
            return Settlement(ack=False, error=error_record("error", error))
        exc = handler.exception()
        assert exc is not None
        if isinstance(exc, Snooze):
            return Settlement(ack=False, mode="shed", delay_s=exc.delay_s)
        if isinstance(exc, Retry):
            return Settlement(ack=False, mode="retry", delay_s=exc.delay_s,
                              error=error_record("retry", exc))
        if definition.terminal and isinstance(exc, definition.terminal):
            return Settlement(ack=False, mode="fail", error=error_record("terminal", exc))
        return Settlement(ack=False, error=error_record("error", exc))

    async def _progress(self, run: _Run, value: Any) -> bool:
        assert self._client is not None
        if run.stop_reason is not None or run.settling:
            return False
        ok: bool | None = await self._client.run(
            queries.progress(run.job.id, run.job.claim, value))
        return bool(ok)

    # -- drain ------------------------------------------------------------------------

    async def _drain(self) -> None:
        assert self._force_requested is not None
        await self._hand_back_waiting()
        waiting = [r.settled.wait() for r in self._runs.values()]
        if waiting and not self._forced:
            gather: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*waiting))
            force: asyncio.Future[Any] = asyncio.ensure_future(self._force_requested.wait())
            await asyncio.wait({gather, force}, timeout=self.drain_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
            force.cancel()
            gather.cancel()
        left = [r for r in self._runs.values() if not r.settled.is_set()]
        if left:
            logger.warning("drain cut-off: %d job(s) go back as interrupted", len(left),
                           extra={**self._log_extra, "job_ids": [r.job.id for r in left]})
            for run in left:
                run.stop("interrupt")
            _, pending = await asyncio.wait(
                [asyncio.ensure_future(r.settled.wait()) for r in left],
                timeout=3.0 if self._forced else 30.0)
            for task in pending:
                task.cancel()
            if pending:
                logger.error("%d job(s) could not be sent back; their leases will lapse "
                             "and another worker will run them", len(pending),
                             extra=self._log_extra)

    async def _hand_back_waiting(self) -> None:
        """Jobs claimed but never started go back `interrupted` (not an attempt)."""
        runs, self._waiting = list(self._waiting), collections.deque()
        if not runs:
            return
        settler = self._settler
        assert settler is not None
        back = Settlement(ack=False, mode="interrupt", error=error_record(
            "interrupted", message="the worker stopped before the job started; not an attempt"))

        async def hand_back(run: _Run) -> None:
            run.settling = True
            try:
                await settler.settle(run, back)
            finally:
                run.settled.set()
                self._runs.pop(run.job.id, None)

        await asyncio.wait([asyncio.ensure_future(hand_back(r)) for r in runs],
                           timeout=3.0 if self._forced else 30.0)

    # -- heartbeats -------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self._heartbeat_once()
            except Exception:
                logger.exception("heartbeat failed", extra=self._log_extra)

    async def _heartbeat_once(self) -> None:
        assert self._client is not None
        now = time.monotonic()
        held: list[_Run] = []
        for run in list(self._runs.values()):
            if run.settling or run.stop_reason is not None:
                continue
            if now > run.lease_deadline:
                logger.warning("job %s: lease could not be renewed in time; stopping the "
                               "run", run.job.id, extra={**self._log_extra, **run.log_fields})
                run.stop("lease_lost")
            else:
                held.append(run)
        if held:
            sent = time.monotonic()
            try:
                answers = await self._client.run(queries.heartbeat_many(
                    [r.job.id for r in held], [r.job.claim for r in held], self.lease_s))
            except _TRANSIENT as error:
                logger.warning("lease renewal failed: %s", error, extra=self._log_extra)
            else:
                for run, answer in zip(held, answers, strict=True):
                    if answer.ok:
                        run.lease_deadline = sent + self.lease_s
                    elif not run.settling:
                        logger.warning("job %s is no longer held (cancelled, or its lease "
                                       "lapsed); stopping the run", run.job.id,
                                       extra={**self._log_extra, **run.log_fields})
                        run.stop("lease_lost")
        try:
            await self._register()
        except _TRANSIENT as error:
            logger.warning("worker heartbeat failed: %s", error, extra=self._log_extra)

    # -- LISTEN -----------------------------------------------------------------------

    async def _listen(self, dsn: str) -> None:
        """Hold a LISTEN connection; when it fails, reconnect after listen_retry_s,
        doubling up to 30 s (the claim loop keeps polling meanwhile)."""
        delay = self.listen_retry_s
        lost = False
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    dsn, autocommit=True,
                    application_name=f"sqljobs-listen {self.id}"[:63])
                async with conn:
                    await conn.execute("listen " + WAKE_CHANNEL)
                    self.listening = True
                    if lost:
                        logger.info("LISTEN %s reconnected", WAKE_CHANNEL, extra=self._log_extra)
                    delay = self.listen_retry_s
                    self._want_claim = True  # catch up with anything missed meanwhile
                    self._wake.set()
                    async for notify in conn.notifies():
                        if notify.payload in self._queue_set:
                            self._want_claim = True
                            self._wake.set()
            except asyncio.CancelledError:
                self.listening = False
                raise
            except Exception as error:
                logger.warning("LISTEN connection lost (%s); polling every %g s until it "
                               "reconnects", error, self.poll_interval, extra=self._log_extra)
            self.listening = False
            lost = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, max(30.0, self.listen_retry_s))


def run_worker(app: App, queues: Sequence[str] | None = None, concurrency: int = 10,
               **options: Any) -> int:
    """Run a worker for `app` until SIGTERM/SIGINT; answers the exit code."""
    return Worker(app, queues, concurrency, **options).run_sync()


async def run_worker_async(app: App, queues: Sequence[str] | None = None,
                           concurrency: int = 10, **options: Any) -> int:
    return await Worker(app, queues, concurrency, **options).run()


__all__ = ["ResultNotJSON", "Settlement", "Worker", "error_record", "json_result", "run_worker",
           "run_worker_async"]
