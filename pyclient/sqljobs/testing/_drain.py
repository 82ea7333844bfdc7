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

`until_empty=False` makes one pass instead: the drain reads which jobs are due when it
is called (after `cron` fired and `with_scheduled` promoted) and ends once each of
them has had one run. What those runs enqueue, the retries they schedule and the jobs
that come due meanwhile are not waited for: they are left for the next drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import (
    ConfigurationError,
    JobFinished,
    JobNotFound,
    JobRunning,
    SqljobsError,
)
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
    def __init__(self, passing: Sequence[int] | None = None) -> None:
        self.outcomes: list[Outcome] = []
        self.unstarted = None if passing is None else set(passing)  # a one pass drain's
        self.last_started: Callable[[], None] | None = None

    def run_begins(self, job: ClaimedJob) -> RunWatch:
        if self.unstarted:
            self.unstarted.discard(job.id)
            if not self.unstarted and self.last_started is not None:
                self.last_started()  # in the worker's loop: it claims nothing more
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
                      until_empty: bool = True, concurrency: int = 1,
                      timeout: float = 60.0) -> Drained:
    """Run the app's due jobs (in `queues`, default: every queue its jobs use) until
    none is left; answers each run's outcome. `concurrency` 1 (the default) runs one
    job at a time, oldest first among equal priorities. Raises DrainTimeout when
    `timeout` seconds pass first (a safety net: it says what is left).

    `until_empty=False`: one pass. The jobs due at the call (by `jobs.now()`, after
    `cron` fired and `with_scheduled` promoted what waits) each run once, then the
    drain ends; jobs their runs enqueue, their retries and jobs that come due meanwhile
    stay as they are. A pass runs one job at a time (`concurrency` must be 1), in the
    engine's claim order (priority, due time, id), and stops claiming once the last of
    its jobs starts; so a job enqueued during the pass with a more urgent priority than
    those left in it still runs in it (at equal priorities one never does)."""
    drained = Drained()
    if cron:
        drained.fired = await fire_due_async(app)
    passing: list[int] | None = None  # a one pass drain's jobs
    if not until_empty:
        if concurrency != 1:
            raise ConfigurationError("a one pass drain (until_empty=False) runs one job "
                                     "at a time: concurrency must be 1")
        passing = await _due_now(app, queues, with_scheduled)
        if not passing:
            return drained
    collect = _Collect(passing)
    drained.outcomes = collect.outcomes
    worker = Worker(app, queues, concurrency, poll_interval=0.05, listen=False,
                    install_signals=False, drain_timeout=timeout, observers=[collect],
                    prefetch=None if passing is None else 0,  # one pass: claim no extra
                    worker_id=f"sqljobs-testing:{secrets.token_hex(3)}")
    collect.last_started = worker.stop
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    running = asyncio.create_task(worker.run_async(), name="sqljobs-testing-drain")
    finished = False
    try:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            client = AsyncClient(conn)
            # Its queues are final once it claims. A pass of quick jobs can start them
            # all, and so stop the worker (claiming is then false again), before this
            # loop looks a second time: the pass's jobs all started says it started.
            while not worker.claiming and (passing is None or collect.unstarted):
                await _look(running, deadline, loop, "the worker did not start")
            while passing is not None:
                ran = {o.job_id for o in collect.outcomes}
                left = [job_id for job_id in passing if job_id not in ran]
                if not left or (running.done() and not collect.unstarted):
                    break  # each ran (the worker stops once the last one started)
                if not await client.run(queries.jobs_left(left, worker.queues)):
                    break  # the rest left its queues' due jobs (cancelled, another ran it)
                await _look(running, deadline, loop, (
                    f"{len(left)} of the pass's {len(passing)} job(s) not run yet "
                    f"in queues {', '.join(worker.queues)}"))
            while passing is None:
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
          cron: bool = False, until_empty: bool = True, concurrency: int = 1,
          timeout: float = 60.0) -> Drained:
    """`drain_async` for sync tests (see its docstring)."""
    return asyncio.run(drain_async(app, queues=queues, with_scheduled=with_scheduled,
                                   cron=cron, until_empty=until_empty,
                                   concurrency=concurrency, timeout=timeout))


async def _due_now(app: Deployed, queues: Sequence[str] | None,
                   with_scheduled: bool) -> list[int]:
    """A one pass drain's jobs: the app's jobs due now (in `queues`, None: any), those
    due later promoted first with `with_scheduled`."""
    names = sorted(app.jobs)
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
        client = AsyncClient(conn)
        if with_scheduled:
            await _promote(client, (await client.run(queries.due_jobs(names, queues)))["later"])
        return await client.run(queries.due_job_ids(names, queues))


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
