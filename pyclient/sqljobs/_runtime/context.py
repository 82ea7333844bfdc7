"""`JobContext`: what a handler gets as `ctx`.

    @app.job(queue="mail")
    async def send(ctx: JobContext, payload: Mail) -> dict[str, str]:
        ctx.logger.info("sending", extra={"to": payload.to})
        await ctx.progress_async({"step": "render"})
        ...

`ctx.cancelled` is set when the run must stop: its lease was lost or the job was
cancelled, its timeout passed, or a drain cut-off came. An async handler is also
cancelled (`asyncio.CancelledError` at its next await); a sync handler runs in a thread,
which Python cannot interrupt, so it should check `ctx.cancelled` (or call
`ctx.raise_if_cancelled()`) in its loops. Whatever a stopped run returns is discarded.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from sqljobs._client.queries import Call
from sqljobs._runtime.steps import Steps
from sqljobs._runtime.stopping import RunCancelled, StopReason

T = TypeVar("T")

_MAKING = threading.Lock()  # guards the lazy `cancelled` event against `_stop`


class JobContext:
    """The running job, as its handler sees it."""

    def __init__(
        self,
        *,
        job_id: int,
        name: str,
        queue: str,
        tenant: str | None,
        key: str,
        attempt: int,
        max_attempts: int,
        claim: int,
        worker_id: str,
        logger: logging.LoggerAdapter[logging.Logger] | None = None,
        loop: asyncio.AbstractEventLoop,
        report_progress: Callable[[Any], Coroutine[Any, Any, bool]],
        saved_progress: Any = None,
        make_logger: Callable[[], logging.LoggerAdapter[logging.Logger]] | None = None,
        make_steps: Callable[[JobContext], Steps] | None = None,
        run_call: Callable[[Call[Any]], Awaitable[Any]] | None = None,
        actor: Any = None,
    ) -> None:
        self.job_id = job_id
        self.name = name
        self.queue = queue
        self.tenant = tenant
        self.key = key
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.claim = claim  # the claim token: a fencing token for resources the job guards
        self.worker_id = worker_id
        # Who asked for the job (`handle.as_(actor)`, `enqueue(..., actor=...)`): a
        # string or a JSON object, None when nobody said. The caller's word, not
        # authentication. What this run enqueues, stages, emits or invokes inherits it.
        self.actor = actor
        # The progress stored when this attempt was claimed (e.g. where a previous,
        # interrupted run got to); `progress()` writes a new value.
        self.saved_progress = saved_progress
        # The logger, the cancelled flag and the steps are made when first used: most
        # runs touch none of them, and making them cost more than the rest of a no-op run.
        self._logger = logger
        self._make_logger = make_logger
        self._cancelled: threading.Event | None = None
        self._stopped = False
        self.cancel_reason: StopReason | None = None
        self._loop = loop
        self._report_progress = report_progress
        self._make_steps = make_steps
        self._steps: Steps | None = None  # sqljobs._runtime.steps, made by make_steps
        self._run_call = run_call

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose records carry the job's fields (job_id, job_name, queue, ...)."""
        if self._logger is None:
            self._logger = (self._make_logger() if self._make_logger is not None
                            else logging.LoggerAdapter(logging.getLogger("sqljobs.job"), {}))
        return self._logger

    @property
    def cancelled(self) -> threading.Event:
        """Set once the run must stop: its lease was lost or the job was cancelled, its
        timeout passed, or a drain cut it off. A sync handler checks it in its loops."""
        if self._cancelled is None:
            with _MAKING:  # a sync handler's thread and the loop may both get here first
                if self._cancelled is None:
                    event = threading.Event()
                    if self._stopped:
                        event.set()
                    self._cancelled = event
        return self._cancelled

    @property
    def step(self) -> Steps:
        """Durable steps: `await ctx.step.run_async("name", fn)` in an async handler,
        `ctx.step.run("name", fn)` in a sync one (`sqljobs.Steps`)."""
        if self._steps is None:
            if self._make_steps is None:
                raise RuntimeError("durable steps are only available in a worker's run")
            self._steps = self._make_steps(self)
        return self._steps

    async def patched_async(self, patch_id: str) -> bool:
        """Whether this run takes the patched branch of a deployed change: True on a
        first run or a replay that reaches this point for the first time, False on a
        replay whose history went past it before the patch (`Steps.patched_async`;
        docs/howto-deploying.md)."""
        return await self.step.patched_async(patch_id)

    def patched(self, patch_id: str) -> bool:
        """`patched_async`, blocking, for sync handlers."""
        return self.step.patched(patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """The cleanup release of patch `patch_id`: raises ReplayDiverged for a job whose
        history took the branch before the patch (`Steps.deprecate_patch`)."""
        self.step.deprecate_patch(patch_id)

    @property
    def has_engine(self) -> bool:
        """Whether `engine_call` runs on the worker's pool here (a worker's run; a
        context made by hand, in a test, has none)."""
        return self._run_call is not None

    async def engine_call(self, call: Call[T]) -> T:
        """Run one engine call (`sqljobs.queries`) on the worker's own pool: how the
        factories make their fenced calls (`jobs.webhook_attempt_put` under this run's
        claim) without a connection of their own."""
        if self._run_call is None:
            raise RuntimeError("this JobContext has no engine pool (has_engine is False)")
        result: T = await self._run_call(call)
        return result

    @property
    def made_steps(self) -> Steps | None:
        """The run's steps if anything made them yet (a step, or stored steps at claim)."""
        return self._steps

    @property
    def id(self) -> int:
        return self.job_id

    @property
    def is_final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def raise_if_cancelled(self) -> None:
        """Raise RunCancelled when the worker has told this run to stop."""
        if self._stopped:
            raise RunCancelled(f"job {self.job_id} run stopped: {self.cancel_reason}")

    async def progress_async(self, value: Any) -> bool:
        """Record progress (any JSON value) on the job, fenced by this run's claim.

        Answers False, writing nothing, once the run was told to stop or lost its lease.
        """
        if self._stopped:
            return False
        return await self._report_progress(value)

    def progress(self, value: Any) -> bool:
        """`progress_async` for sync handlers (call it from the handler's thread)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("on the event loop, use `await ctx.progress_async(value)`")
        if self._stopped:
            return False
        future = asyncio.run_coroutine_threadsafe(self._report_progress(value), self._loop)
        return bool(future.result())

    def _stop(self, reason: StopReason) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        with _MAKING:
            self._stopped = True
            if self._cancelled is not None:
                self._cancelled.set()

    def __repr__(self) -> str:
        return (f"JobContext(job_id={self.job_id}, name={self.name!r}, queue={self.queue!r}, "
                f"attempt={self.attempt}/{self.max_attempts})")
