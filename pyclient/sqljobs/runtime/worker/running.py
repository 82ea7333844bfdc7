"""Running: one claimed job's handler, from its payload to the outcome to write.

`Runner.outcome(run)` validates the payload, builds the `JobContext` (with its durable
steps), runs the handler (async: a task on the loop; sync: a daemon thread), bounds it
by the job's timeout and by `run.stopped` (lost lease, drain cut-off), and answers a
`Settlement`, or None when nothing may be written (the lease is lost):

    handler returned, JSON-encodable         ack (the value is the job's result)
    handler returned a non-JSON value        retry by policy, kind "result_not_json"
    payload no longer validates              fail, kind "invalid_payload"
    exception of a declared `terminal` type  fail, kind "terminal"
    sqljobs.Retry(in_=s)                     retry after s seconds, kind "retry"
    sqljobs.Snooze(s)                        shed (not an attempt) for s seconds
    timeout_s passed                         run cancelled, retry by policy, kind "timeout"
    a durable step parked the job            nothing more to write (written)
    any other exception                      retry by policy (backoff in SQL), kind "error"

A sync handler cannot be interrupted: once its run is stopped its `ctx.cancelled` is
set, its outcome is written (or not) at once and whatever it returns later is dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqljobs.client import queries
from sqljobs.client.connection import AsyncClient
from sqljobs.client.encoding import ResultNotJSON, json_result
from sqljobs.client.errors import InvalidPayload, LeaseLost
from sqljobs.client.records import JobState
from sqljobs.declare.control import Retry, Snooze
from sqljobs.declare.jobs import JobDefinition, RetryPolicy
from sqljobs.runtime.context import JobContext
from sqljobs.runtime.observing import RunObserver
from sqljobs.runtime.steps import Steps, Suspended
from sqljobs.runtime.stopping import RunCancelled
from sqljobs.runtime.threads import DaemonThreadPool
from sqljobs.runtime.worker.redacting import redacted_settlement
from sqljobs.runtime.worker.runs import JobLog, Run
from sqljobs.runtime.worker.settling import Settlement, clean_text, error_record

job_logger = logging.getLogger("sqljobs.job")

SAGA_RETRY_S = 5.0  # a failed compensation: the unwind is tried again after this


class Runner:
    """Runs handlers of the jobs an app declares (one `outcome` call per run)."""

    def __init__(self, *, definitions: Mapping[str, JobDefinition[Any]], client: AsyncClient,
                 threads: DaemonThreadPool, worker_id: str, lease_s: float,
                 log_extra: Mapping[str, Any], observer: RunObserver) -> None:
        self._definitions = definitions
        self._client = client
        self._threads = threads
        self._worker_id = worker_id
        self._lease_s = lease_s
        self._log_extra = dict(log_extra)
        self._observer = observer

    async def outcome(self, run: Run) -> Settlement | None:
        """Run the handler; answers what to write, or None when nothing may be written.
        Its error record holds no sensitive value of the payload (redacting.py)."""
        return redacted_settlement(self._definitions[run.job.name], run.job.payload,
                                   await self._outcome(run))

    async def _outcome(self, run: Run) -> Settlement | None:
        job = run.job
        definition = self._definitions[job.name]
        run.watch = self._observer.run_begins(job)
        try:
            payload = definition.parse_payload(job.payload)
        except InvalidPayload as error:
            record = error_record("invalid_payload", error)
            if error.detail:
                record["detail"] = clean_text(error.detail)
            record.pop("traceback", None)
            return Settlement(ack=False, error=record, mode="fail")

        ctx = self._context(run)
        handler: asyncio.Future[Any]
        with run.watch.active():  # the handler's context sees what the observers set
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
            await _cancel(handler)
            if run.stop_reason == "lease_lost":
                return None
            if run.stop_reason == "timeout":
                return Settlement(ack=False, error=error_record(
                    "timeout", message=f"the run exceeded its timeout of {timeout:g} s"))
            return Settlement(ack=False, mode="interrupt", error=error_record(
                "interrupted", message="the worker stopped (drain cut-off); not an attempt"))
        return _classify(definition, handler)

    def _context(self, run: Run) -> JobContext:
        job = run.job
        ctx = JobContext(
            job_id=job.id, name=job.name, queue=job.queue, tenant=job.tenant, key=job.key,
            attempt=job.attempt, max_attempts=job.max_attempts, claim=job.claim,
            worker_id=self._worker_id,
            logger=JobLog(job_logger, {**self._log_extra, **run.log_fields}),
            loop=asyncio.get_running_loop(),
            report_progress=lambda value: self._progress(run, value),
            saved_progress=job.progress,
        )
        ctx._steps = Steps(
            job_id=job.id, claim=job.claim, stored=job.steps, started_at=job.started_at,
            lease_s=self._lease_s, run=self._client.run_again_once, cancelled=ctx.cancelled,
            lost=lambda: run.stop("lease_lost"), lease_deadline=lambda: run.lease_deadline,
            loop=ctx._loop, watch=run.watch,
            job_retry=RetryPolicy(job.max_attempts, job.retry_base_s, job.retry_cap_s,
                                  job.retry_jitter))
        run.ctx = ctx
        if run.stop_reason is not None:
            ctx._stop(run.stop_reason)
        return ctx

    async def _progress(self, run: Run, value: Any) -> bool:
        if run.stop_reason is not None or run.settling:
            return False
        ok: bool | None = await self._client.run(
            queries.progress(run.job.id, run.job.claim, value))
        return bool(ok)

    # -- sagas ------------------------------------------------------------------------

    async def saga(self, run: Run, settlement: Settlement) -> Settlement | None:
        """Sagas (sqljobs.runtime.steps, docs/design/sagas.md). A run that reached
        compensable steps and did not succeed settles at once, not through the group
        settler: the engine decides whether that failure is final (jobs.retry_state) and,
        if so, starts the unwind and answers `running`; this run then runs the
        compensations in reverse order and settles the job in its recorded final state.
        A job claimed already unwinding (cancelled, or resumed after a crash) goes
        straight to its compensations."""
        steps = run.ctx._steps if run.ctx is not None else None
        if steps is None or not (steps.unwinding or steps.has_compensations):
            return settlement
        if run.stop_reason in ("lease_lost", "interrupt"):
            return settlement
        if not steps.unwinding:
            if settlement.ack:
                return settlement
            job = run.job
            answer = (await self._client.run(queries.nack_many(
                [job.id], [job.claim], [settlement.error], [settlement.mode],
                [settlement.delay_s])))[0]
            if not answer.ok:
                return None  # the lease was lost meanwhile
            if answer.state is not JobState.RUNNING:
                return replace(settlement, written=True)  # not final: retried as settled
            steps.began_unwinding()
        if run.stop_reason == "timeout":
            steps.reopen()  # the handler was stopped; its compensations must still run
        try:
            await steps.unwind()
        except (LeaseLost, RunCancelled):
            if run.stop_reason == "interrupt":
                return Settlement(ack=False, mode="interrupt", error=error_record(
                    "interrupted", message="the worker stopped during a saga's unwind"))
            return None
        except Exception as error:
            # A compensation failed: the job stays compensating; try the unwind again
            # later (not an attempt). Compensations must be retryable.
            return redacted_settlement(
                self._definitions[run.job.name], run.job.payload,
                Settlement(ack=False, mode="shed", delay_s=SAGA_RETRY_S,
                           error=error_record("compensation_failed", error)))
        return Settlement(ack=False, mode="fail", written=True, compensated=True)


async def _cancel(handler: asyncio.Future[Any]) -> None:
    # What a stopped handler raises (now or, from a thread, later) is not wanted: read
    # it, so that asyncio does not log it as never retrieved.
    handler.add_done_callback(_discard_outcome)
    if handler.done():
        return
    handler.cancel()  # an async handler gets CancelledError; a thread cannot be stopped
    if isinstance(handler, asyncio.Task):
        await asyncio.wait({handler}, timeout=1.0)


def _discard_outcome(handler: asyncio.Future[Any]) -> None:
    if not handler.cancelled():
        handler.exception()


def _classify(definition: JobDefinition[Any], handler: asyncio.Future[Any]) -> Settlement:
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


__all__ = ["SAGA_RETRY_S", "Runner"]
