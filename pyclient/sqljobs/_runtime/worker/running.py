"""Running: one claimed job's handler, from its payload to the outcome to write.

`Runner.outcome(run)` validates the payload, builds the `JobContext` (its logger,
cancelled flag and durable steps made when first used), runs the handler, bounds it by
the job's timeout and by `run.stop` (lost lease, drain cut-off), and answers a
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

An async handler runs in the calling task (one of the worker's runner tasks), in a
context of its own: no task is made per job, and a handler that never suspends never
waits for the event loop. A stop cancels that task while it awaits the handler, so the
handler gets CancelledError at its next await; the stop's cancellation is then taken
back, and the runner goes on. (A handler that swallows it holds its slot, and delays
its outcome, until it returns.) A sync handler runs in a daemon thread: it cannot be
interrupted, so once its run is stopped its `ctx.cancelled` is set, its outcome is
written (or not) at once and whatever it returns later is dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Generator, Mapping
from dataclasses import replace
from typing import Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.encoding import ResultNotJSON, json_result
from sqljobs._client.errors import InvalidPayload
from sqljobs._client.records import JobState, Settled
from sqljobs._client.transactions import RUN_FENCE, RunFence
from sqljobs._declare.control import Retry, Snooze
from sqljobs._declare.jobs import JobDefinition, RetryPolicy
from sqljobs._runtime.context import JobContext
from sqljobs._runtime.observing import NO_WATCH, RunObserver
from sqljobs._runtime.steps import Steps, Suspended
from sqljobs._runtime.stopping import RunCancelled
from sqljobs._runtime.threads import DaemonThreadPool
from sqljobs._runtime.worker.progressing import ProgressThrottle
from sqljobs._runtime.worker.redacting import redacted_settlement
from sqljobs._runtime.worker.runs import JobLog, Run
from sqljobs._runtime.worker.settle_keys import SettleKeys
from sqljobs._runtime.worker.settling import (
    ACK,
    Settlement,
    clean_text,
    error_record,
)

job_logger = logging.getLogger("sqljobs.job")

SAGA_RETRY_S = 5.0  # a failed compensation: the unwind is tried again after this


class Runner:
    """Runs handlers of the jobs an app declares (one `outcome` call per run), in the
    calling task: the worker's runner tasks call it job after job (worker.py)."""

    def __init__(self, *, definitions: Mapping[str, JobDefinition[Any]], client: AsyncClient,
                 threads: DaemonThreadPool, worker_id: str, lease_s: float,
                 log_extra: Mapping[str, Any], observer: RunObserver,
                 keys: SettleKeys) -> None:
        self._definitions = definitions
        self._client = client
        self._keys = keys  # held while a saga's failure waits for a busy row
        self._threads = threads
        self._worker_id = worker_id
        self._lease_s = lease_s
        self._log_extra = dict(log_extra)
        self._observer = observer
        self.progress = ProgressThrottle()  # ctx.progress: at most once per interval

    async def outcome(self, run: Run) -> Settlement | None:
        """Run the handler; answers what to write, or None when nothing may be written.
        Its error record holds no sensitive value of the payload (redacting.py)."""
        definition = self._definitions[run.job.name]
        settlement = await self._outcome(run, definition)
        if settlement is None or settlement.error is None:
            return settlement
        return redacted_settlement(definition, run.job.payload, settlement)

    async def _outcome(self, run: Run, definition: JobDefinition[Any]) -> Settlement | None:
        job = run.job
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
        timeout = job.timeout_s
        timer = (asyncio.get_running_loop().call_later(timeout, run.stop, "timeout")
                 if timeout is not None else None)
        try:
            returned, value = await self._handler(run, definition, ctx, payload)
        finally:
            if timer is not None:
                timer.cancel()

        if not returned and isinstance(value, Suspended):
            return Settlement(ack=False, mode="park", written=True)
        if returned and run.stop_reason != "lease_lost":
            if value is None:
                return ACK
            try:
                return Settlement(ack=True, result=json_result(value))
            except ResultNotJSON as error:
                return Settlement(ack=False, error=error_record("result_not_json", error))
        if run.stop_reason == "lease_lost":
            return None
        if run.stop_reason == "timeout":
            return Settlement(ack=False, error=error_record(
                "timeout", message=f"the run exceeded its timeout of {timeout:g} s"))
        if run.stop_reason is not None:
            return Settlement(ack=False, mode="interrupt", error=error_record(
                "interrupted", message="the worker stopped (drain cut-off); not an attempt"))
        return _classify(definition, value)

    async def _handler(self, run: Run, definition: JobDefinition[Any], ctx: JobContext,
                       payload: Any) -> tuple[bool, Any]:
        """Await the handler in this task, until it ends or the run is stopped (a stop
        cancels this task while it awaits here: see `Run.stop`). Answers (True, what it
        returned) or (False, what it raised)."""
        watch = run.watch
        if watch is NO_WATCH:
            context = contextvars.copy_context()
        else:
            with watch.active():  # the handler's context holds what the observers set
                context = contextvars.copy_context()
        # what the handler writes through the app (enqueue, emit_event) is fenced on this
        # run: refused with RunCancelled once the run was stopped (transactions.RUN_FENCE)
        job = run.job
        context.run(RUN_FENCE.set, RunFence(job.id, job.claim, lambda: RunCancelled(
            f"job {job.id}: the run was stopped (cancelled, its lease lost, or drained); "
            f"this write was refused"), job.actor))
        task = asyncio.current_task()
        assert task is not None
        run.runner = task
        try:
            if definition.is_async:
                value = await _InContext(definition.fn(ctx, payload), context)
            else:
                run.thread = self._threads.submit(context.run, definition.fn, ctx, payload)
                value = await asyncio.wrap_future(run.thread)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:
            outcome: tuple[bool, Any] = (False, error)
        else:
            outcome = (True, value)
        finally:
            run.runner = None
        if run.runner_cancelled:
            # The stop's cancellation is taken back; one aimed at this task goes on.
            if task.uncancel() > 0:
                raise asyncio.CancelledError()
        elif isinstance(outcome[1], asyncio.CancelledError) and task.cancelling() > 0:
            raise outcome[1]  # the worker's task is being cancelled, not this run
        return outcome

    def _context(self, run: Run) -> JobContext:
        job = run.job
        ctx = JobContext(
            job_id=job.id, name=job.name, queue=job.queue, tenant=job.tenant, key=job.key,
            attempt=job.attempt, max_attempts=job.max_attempts, claim=job.claim,
            worker_id=self._worker_id,
            make_logger=lambda: JobLog(job_logger, {**self._log_extra, **run.log_fields}),
            loop=asyncio.get_running_loop(),
            report_progress=lambda value: self._progress(run, value),
            saved_progress=job.progress,
            make_steps=lambda ctx: self._steps(run, ctx),
            run_call=self._client.run, actor=job.actor,
        )
        run.ctx = ctx
        if job.steps:  # stored steps: the run may be replaying, or unwinding a saga
            ctx.step  # noqa: B018 (made now, so that the saga check sees them)
        if run.stop_reason is not None:
            ctx._stop(run.stop_reason)
        return ctx

    def _steps(self, run: Run, ctx: JobContext) -> Steps:
        job = run.job
        return Steps(
            job_id=job.id, claim=job.claim, stored=job.steps, started_at=job.started_at,
            lease_s=self._lease_s, run=self._client.run_again_once, cancelled=ctx.cancelled,
            lost=lambda: run.stop("lease_lost"), lease_deadline=lambda: run.deadline,
            loop=ctx._loop, watch=run.watch,
            job_retry=RetryPolicy(job.max_attempts, job.retry_base_s, job.retry_cap_s,
                                  job.retry_jitter))

    async def _progress(self, run: Run, value: Any) -> bool:
        if run.stop_reason is not None or run.settling:
            return False
        job = run.job

        async def write(latest: Any) -> bool | None:
            if run.stop_reason is not None:  # stopped since: nothing more is written
                return False
            answer: bool | None = await self._client.run(
                queries.progress(job.id, job.claim, latest))
            return answer

        interval = self._definitions[job.name].progress_every_s
        return await self.progress.report(job.id, value, interval, write)

    # -- sagas ------------------------------------------------------------------------

    async def saga(self, run: Run, settlement: Settlement) -> Settlement | None:
        """The settlement of a run whose steps may be a saga's: `Steps.conclude` decides
        (sqljobs._runtime.steps); this writes what it answers."""
        steps = run.ctx.made_steps if run.ctx is not None else None
        if steps is None:
            return settlement
        job = run.job

        async def fail_attempt() -> JobState | None:
            async def write() -> Settled:
                return (await self._client.run(queries.nack_many(
                    [job.id], [job.claim], [settlement.error], [settlement.mode],
                    [settlement.delay_s])))[0]

            # its row locked elsewhere (busy): sent again, its settle key held meanwhile
            answer = await self._keys.resend(job.id, job.claim, "failure", write)
            return answer.state if answer.ok else None

        end = await steps.conclude(succeeded=settlement.ack, stop_reason=run.stop_reason,
                                   fail_attempt=fail_attempt)
        if end.kind == "settle":
            return settlement
        if end.kind == "settled":
            return replace(settlement, written=True)
        if end.kind == "lost":
            return None
        if end.kind == "interrupted":
            return Settlement(ack=False, mode="interrupt", error=error_record(
                "interrupted", message="the worker stopped during a saga's unwind"))
        if end.kind == "compensation_failed":
            assert end.error is not None
            # the job stays compensating; its unwind is tried again later (not an
            # attempt): compensations must be retryable
            return redacted_settlement(
                self._definitions[job.name], job.payload,
                Settlement(ack=False, mode="shed", delay_s=SAGA_RETRY_S,
                           error=error_record("compensation_failed", end.error)))
        return Settlement(ack=False, mode="fail", written=True, compensated=True)


class _InContext:
    """Awaits a coroutine in the awaiting task, each of its steps run in `context` (as
    a task of its own would run it): what the handler sets in contextvars stays its own,
    `asyncio.current_task()` is the runner task (so `asyncio.timeout` works in a
    handler), and a handler that never suspends costs no trip through the event loop."""

    __slots__ = ("_context", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        self._coro = coro
        self._context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, run = self._coro, self._context.run
        try:
            yielded = run(coro.send, None)
        except StopIteration as stop:
            return stop.value
        while True:  # what `yield from coro` does, each step inside the context
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as error:  # thrown in by the task: a cancellation
                try:
                    yielded = run(coro.throw, error)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = run(coro.send, sent)
                except StopIteration as stop:
                    return stop.value


def _classify(definition: JobDefinition[Any], exc: BaseException) -> Settlement:
    if isinstance(exc, asyncio.CancelledError):
        return Settlement(ack=False, error=error_record(
            "error", asyncio.CancelledError("the handler was cancelled")))
    if isinstance(exc, Snooze):
        return Settlement(ack=False, mode="shed", delay_s=exc.delay_s)
    if isinstance(exc, Retry):
        return Settlement(ack=False, mode="retry", delay_s=exc.delay_s,
                          error=error_record("retry", exc))
    if definition.terminal and isinstance(exc, definition.terminal):
        return Settlement(ack=False, mode="fail", error=error_record("terminal", exc))
    return Settlement(ack=False, error=error_record("error", exc))


__all__ = ["SAGA_RETRY_S", "Runner"]
