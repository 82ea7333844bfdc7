"""Awaiting a job's result: `app.result(job_id, timeout=...)` and `app.result_async(...)`.

The waiter LISTENs on `jobs_settled` and reads its job's token (jobs.watch_token: a
notification carries tokens, never ids, since any session may listen), then reads the
job with jobs.watch_outcome, which also marks it watched: settling a watched job
(ack_many, nack_many, cancel, lease recovery burying it, the end of a saga unwind)
notifies `jobs_settled` once per call with the watched jobs' tokens, and settling
unwatched jobs notifies nothing. A requeue clears the mark (the waiter already heard the
job settle); each read marks it again. It reads again when a notification carries the
token, and otherwise on a bounded exponential poll (0.25 s doubling to 5 s), which also
covers settlements that do not notify (`jobs.notify = off`, a '*' payload it missed). It
never busy-polls.

Answers the job's stored result (its handler's return value as JSON), redacted as every
view shows it (a value the job's model marks sensitive reads "[redacted]"), when it
succeeded; raises `JobFailed`, `JobDead` or `JobCancelled` (each carrying the job's
last_error) when it ended otherwise; `ResultTimeout` when the time is up first (the job
keeps running); `JobNotFound` when no job has that id.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import psycopg

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.errors import DatabaseError, JobNotFound, SqljobsError
from sqljobs._client.records import JobOutcome, JobState

FIRST_POLL_S = 0.25
MAX_POLL_S = 5.0


class JobError(SqljobsError):
    """The awaited job ended without succeeding; `error` is its last_error (a dict)."""

    state: ClassVar[JobState]

    def __init__(self, job_id: int, error: Any) -> None:
        self.job_id = job_id
        self.error: dict[str, Any] = error if isinstance(error, dict) else (
            {} if error is None else {"message": error})
        kind = self.error.get("kind")
        message = self.error.get("message")
        reason = ": ".join(str(part) for part in (kind, message) if part) or "no error recorded"
        super().__init__(f"job {job_id} {self.state.value}: {reason}")

    @property
    def kind(self) -> str | None:
        kind = self.error.get("kind")
        return None if kind is None else str(kind)


class JobFailed(JobError):
    """The job failed for good (a terminal error, an invalid payload, or retries
    exhausted under a policy without dead-letter)."""

    state = JobState.FAILED


class KeyBusy(JobFailed, DatabaseError, sqlstate="SJ012", name="key_busy"):
    """The job failed for good without running: its key limit says `when_busy="fail"`
    and another run held the key under a live lease (last_error kind `key_busy`).

    `app.result` raises it for such a job. No function raises SJ012 itself; a caller
    of `jobs.raise_error('key_busy', ...)` gets it with its message, detail and hint."""

    def __init__(self, job_id: int | str, error: Any = None, *, detail: str | None = None,
                 hint: str | None = None) -> None:
        if isinstance(job_id, int):
            super().__init__(job_id, error)
        else:  # from a raised SQLSTATE (sqljobs._client.errors.translate)
            DatabaseError.__init__(self, job_id, detail=detail, hint=hint)
            self.job_id = None  # type: ignore[assignment]
            self.error = {"kind": self.name, "message": job_id}


class JobDead(JobError):
    """The job's retries are exhausted and it was dead-lettered (`jobs.requeue` redrives it)."""

    state = JobState.DEAD


class JobCancelled(JobError):
    """The job was cancelled before it finished."""

    state = JobState.CANCELLED


class ResultTimeout(SqljobsError, TimeoutError):
    """The job had not finished when the wait ran out (it keeps running)."""

    def __init__(self, job_id: int, timeout: float, state: JobState) -> None:
        self.job_id = job_id
        self.state = state
        super().__init__(f"job {job_id} did not finish within {timeout:g} s (it is {state.value})")


_ERRORS: dict[JobState, type[JobError]] = {
    JobState.FAILED: JobFailed, JobState.DEAD: JobDead, JobState.CANCELLED: JobCancelled}


def settled_value(job_id: int, outcome: JobOutcome | None) -> tuple[bool, Any]:
    """(True, result) when the job succeeded; (False, None) while it is live; raises
    the job's error class when it ended otherwise, JobNotFound when it does not exist."""
    if outcome is None:
        raise JobNotFound(f"no job has id {job_id}")
    if outcome.state is JobState.SUCCEEDED:
        return True, outcome.result
    error = _ERRORS.get(outcome.state)
    if error is JobFailed and isinstance(outcome.last_error, dict) and (
            outcome.last_error.get("kind") == KeyBusy.name):
        error = KeyBusy
    if error is not None:
        raise error(job_id, outcome.last_error)
    return False, None


def _names(payload: str, token: str) -> bool:
    """Whether a jobs_settled payload (tokens, never ids) is about the awaited job."""
    return payload == "*" or token in payload.split(",")


class _Clock:
    def __init__(self, job_id: int, timeout: float | None) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.delay = FIRST_POLL_S

    def next_wait(self, outcome: JobOutcome | None) -> float:
        """Seconds to wait for a notification before reading again; raises ResultTimeout."""
        wait = self.delay
        self.delay = min(self.delay * 2, MAX_POLL_S)
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                assert self.timeout is not None and outcome is not None
                raise ResultTimeout(self.job_id, self.timeout, outcome.state)
            wait = min(wait, left)
        return wait


def wait_result(dsn: str, job_id: int, timeout: float | None = None) -> Any:
    """Block until job `job_id` is final; see the module docstring."""
    clock = _Clock(job_id, timeout)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("listen " + queries.SETTLED_CHANNEL)  # before the first read: no gap
        client = Client(conn)
        token = client.run(queries.watch_token(job_id))
        while True:
            outcome = client.run(queries.watch_outcome(job_id))
            done, value = settled_value(job_id, outcome)
            if done:
                return value
            for notify in conn.notifies(timeout=clock.next_wait(outcome)):
                if _names(notify.payload, token):
                    break


async def wait_result_async(dsn: str, job_id: int, timeout: float | None = None) -> Any:
    """`wait_result` for asyncio code."""
    clock = _Clock(job_id, timeout)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with conn:
        await conn.execute("listen " + queries.SETTLED_CHANNEL)
        client = AsyncClient(conn)
        token = await client.run(queries.watch_token(job_id))
        while True:
            outcome = await client.run(queries.watch_outcome(job_id))
            done, value = settled_value(job_id, outcome)
            if done:
                return value
            async for notify in conn.notifies(timeout=clock.next_wait(outcome)):
                if _names(notify.payload, token):
                    break
