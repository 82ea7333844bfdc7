"""`drain(app)`: run every job that is due, in the test's process, until none is left.

The jobs run through the real worker (sqljobs._runtime.worker): the real claim, the
handler with its real context, durable steps, retries, children, sagas and the group
committed settle, all against the test's database. A drain ends when, by the database,
no job the app declares is running and none is due (`jobs.now()`, the test clock's
time); it answers each run's outcome. Jobs due later (a retry's backoff, a delay, a
durable sleep) wait for `clock.advance(...)`, or run at once with `with_scheduled=True`
(each such job is promoted through `jobs.promote`, as an operator would).

`cron=True` first fires what the app's declared tasks have due (fire_due): the real
scheduler's round, on the database clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import JobFinished, JobNotFound, JobRunning, SqljobsError
from sqljobs._client.records import ClaimedJob
from sqljobs._runtime.observing import RunObserver, RunWatch
from sqljobs._runtime.scheduler import Scheduler
from sqljobs._runtime.worker import Worker

if TYPE_CHECKING:
    from sqljobs._declare.protocols import Deployed

_LOOK_S = 0.02  # how often the drain looks at the jobs while the worker runs them


class DrainTimeout(SqljobsError, TimeoutError):
    """A drain did not empty its queues in time: a job keeps running, or a limit or a
    paused queue keeps a due job from being claimed."""


@dataclass(frozen=True)
class Outcome:
    """One run a drain made: the job, its attempt, and how the run ended (succeeded,
    retried, snoozed, failed, dead, parked, compensated, interrupted or lost), with the
    error record written to `last_error`, if any."""

    job_id: int
    name: str
    queue: str
    attempt: int
    outcome: str
    error: Mapping[str, Any] | None = None


@dataclass
class Drained:
    """What a drain ran, in the order the runs ended."""

    outcomes: list[Outcome] = field(default_factory=list)
    fired: int = 0  # occurrences the declared tasks fired first (cron=True)

    @property
    def counts(self) -> dict[str, int]:
        """How many runs ended each way: {"succeeded": 2, "retried": 1}."""
        return dict(Counter(o.outcome for o in self.outcomes))

    def of(self, job: Any) -> list[Outcome]:
        """The runs of one job type (a handle or its name), or of one job id."""
        if isinstance(job, int):
            return [o for o in self.outcomes if o.job_id == job]
        name = getattr(job, "name", job)
        return [o for o in self.outcomes if o.name == name]


class _Watch(RunWatch):
    def __init__(self, job: ClaimedJob, into: list[Outcome]) -> None:
        self._job = job
        self._into = into

    def ended(self, label: str, error: Mapping[str, Any] | None, duration_s: float) -> None:
        job = self._job
        self._into.append(Outcome(job.id, job.name, job.queue, job.attempt, label, error))


class _Collect(RunObserver):
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def run_begins(self, job: ClaimedJob) -> RunWatch:
        return _Watch(job, self.outcomes)


async def fire_due_async(app: Deployed) -> int:
    """Write the app's declared tasks (keeping stored watermarks) and fire what they
    have due by the database clock, as one scheduler round; answers how many
    occurrences became jobs (deduped ones not counted)."""
    scheduler = Scheduler(app, install_signals=False, purge_every=None,
                          scheduler_id=f"sqljobs-testing:{secrets.token_hex(3)}")
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
        client = scheduler._client = AsyncClient(conn)
        try:
            await scheduler._start(client, app.dsn, [])
            if await scheduler.acquire():
                await scheduler.dispatch_round()
        finally:
            await scheduler._finish(client)  # releases the lease
            scheduler._client = None
    return scheduler.counts["fired"]


def fire_due(app: Deployed) -> int:
    """`fire_due_async` for sync tests."""
    return asyncio.run(fire_due_async(app))


async def drain_async(app: Deployed, *, queues: Sequence[str] | None = None,
                      with_scheduled: bool = False, cron: bool = False,
                      concurrency: int = 1, timeout: float = 60.0) -> Drained:
    """Run the app's due jobs (in `queues`, default: every queue its jobs use) until
    none is left; answers each run's outcome. `concurrency` 1 (the default) runs one
    job at a time, oldest first among equal priorities. Raises DrainTimeout when
    `timeout` seconds pass first (a safety net: it says what is left)."""
    drained = Drained()
    if cron:
        drained.fired = await fire_due_async(app)
    collect = _Collect()
    drained.outcomes = collect.outcomes
    worker = Worker(app, queues, concurrency, poll_interval=0.05, listen=False,
                    install_signals=False, drain_timeout=timeout, observers=[collect],
                    worker_id=f"sqljobs-testing:{secrets.token_hex(3)}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    running = asyncio.create_task(worker.run_async(), name="sqljobs-testing-drain")
    finished = False
    try:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            client = AsyncClient(conn)
            while not worker.claiming:  # its queues are final once it claims
                await _look(running, deadline, loop, "the worker did not start")
            while True:
                state = await client.run(queries.due_jobs(worker.names, worker.queues))
                if with_scheduled and state["later"]:
                    await _promote(client, state["later"])
                elif state["running"] == 0 and state["due"] == 0:
                    break
                await _look(running, deadline, loop, (
                    f"{state['running']} job(s) still running and {state['due']} due in "
                    f"queues {', '.join(worker.queues)}"))
        finished = True
    finally:
        if finished:
            worker.stop()  # nothing runs: a graceful stop
        else:
            worker.stop_now()  # a failed drain: what runs goes back at once
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(running), timeout)
    running.result()  # a worker that failed (e.g. SchemaError) fails the drain
    return drained


def drain(app: Deployed, *, queues: Sequence[str] | None = None, with_scheduled: bool = False,
          cron: bool = False, concurrency: int = 1, timeout: float = 60.0) -> Drained:
    """`drain_async` for sync tests (see its docstring)."""
    return asyncio.run(drain_async(app, queues=queues, with_scheduled=with_scheduled,
                                   cron=cron, concurrency=concurrency, timeout=timeout))


async def _look(running: asyncio.Task[int], deadline: float,
                loop: asyncio.AbstractEventLoop, left: str) -> None:
    if running.done():
        running.result()  # raises what stopped the worker
        raise DrainTimeout(f"the drain's worker stopped early: {left}")
    if loop.time() > deadline:
        raise DrainTimeout(f"the drain did not finish in time: {left}")
    await asyncio.sleep(_LOOK_S)


async def _promote(client: AsyncClient, ids: Sequence[int]) -> None:
    for job_id in ids:
        # it may have been claimed or finished since it was read
        with contextlib.suppress(JobNotFound, JobRunning, JobFinished):
            await client.run(queries.promote(job_id))


__all__ = ["DrainTimeout", "Drained", "Outcome", "drain", "drain_async", "fire_due",
           "fire_due_async"]
