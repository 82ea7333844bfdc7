"""`perform(handle, payload)`: run one handler now, with a real context, enqueueing nothing.

The payload goes through what an enqueue and a claim would do to it (validated as the
declared model, stored as JSON, read back), so a handler sees exactly what a worker
would give it; what it returns comes back as a worker would store it (JSON). What it
raises, perform raises. A sync handler runs in a thread of its own, as in a worker, so
`ctx.progress(...)` works from it.

There is no job row behind the run: durable steps need one (their results are written
to it), so `ctx.step` raises StepsNeedAJob. Enqueue the job and `drain(app)` instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from sqljobs._client.encoding import json_result
from sqljobs._client.errors import SqljobsError
from sqljobs._declare.jobs import JobHandle
from sqljobs._declare.redaction import payload_json
from sqljobs._runtime.context import JobContext
from sqljobs._runtime.steps import Steps

_logger = logging.getLogger("sqljobs.job")


class StepsNeedAJob(SqljobsError, RuntimeError):
    """`perform` runs a handler without a job row, so it has no durable steps."""


async def perform_async(handle: JobHandle[Any], payload: Any, *, attempt: int = 1,
                        progress: list[Any] | None = None, actor: Any = None) -> Any:
    """Run `handle`'s handler on `payload` in this process and answer what it returned
    (as JSON, the way a worker stores it). `attempt` is what `ctx.attempt` says, `actor`
    what `ctx.actor` says; progress the handler reports is appended to `progress` when
    given."""
    definition = handle.definition
    # validated, stored as JSON and read back: what a claimed job's handler gets
    stored = json.loads(json.dumps(payload_json(definition.parse_payload(payload))))
    model = definition.parse_payload(stored)
    recorded = progress if progress is not None else []

    async def report(value: Any) -> bool:
        recorded.append(_as_stored(value))
        return True

    def no_steps(ctx: JobContext) -> Steps:
        raise StepsNeedAJob(
            f"job {handle.name!r} uses durable steps, which perform() cannot give it (no "
            f"job row stores them): enqueue it and run it with drain(app)")

    max_attempts = definition.retry.max_attempts or attempt
    ctx = JobContext(
        job_id=0, name=handle.name, queue=definition.queue or "default", tenant=None,
        key="sqljobs-testing-perform", attempt=attempt, max_attempts=max_attempts, claim=0,
        worker_id="sqljobs-testing-perform", logger=logging.LoggerAdapter(_logger, {}),
        loop=asyncio.get_running_loop(), report_progress=report, make_steps=no_steps,
        actor=None if actor is None else json.loads(json.dumps(actor)))
    if definition.is_async:
        returned = await definition.fn(ctx, model)
    else:
        returned = await asyncio.to_thread(definition.fn, ctx, model)
    return _as_stored(returned)


def _as_stored(value: Any) -> Any:
    """The value as jsonb would store and give it back (ResultNotJSON when it cannot)."""
    return None if value is None else json.loads(json.dumps(json_result(value)))


def perform(handle: JobHandle[Any], payload: Any, *, attempt: int = 1,
            progress: list[Any] | None = None, actor: Any = None) -> Any:
    """`perform_async` for sync tests (see its docstring)."""
    return asyncio.run(perform_async(handle, payload, attempt=attempt, progress=progress,
                                     actor=actor))


__all__ = ["StepsNeedAJob", "perform", "perform_async"]
