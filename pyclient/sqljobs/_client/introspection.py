"""Statements of the redacting read side and the job-type registry (sql/92_introspection.sql).

    job_type_put / job_type_remove / job_types    the registry (what each name hides)
    list_jobs(filter, after_id, limit)            a page of jobs, newest first, redacted
    job_detail(id)                                one job with attempts, steps, children, waits
    attempts_of(detail)                           every attempt of a job_detail document
    personal_data()                               job types holding personal data
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, LiteralString

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict

from sqljobs._client.queries import Call
from sqljobs._client.records import JobRecord
from sqljobs._client.redaction import Redaction


class JobTypeRecord(BaseModel):
    """One row of `jobs.job_types()`."""

    model_config = ConfigDict(frozen=True)

    name: str
    queue: str | None
    sensitive_paths: list[str]
    personal_paths: list[str]
    payload_schema: dict[str, Any] | None
    retry: dict[str, Any] | None
    timeout_s: float | None
    origin: str
    updated_at: datetime
    factory: dict[str, Any] | None = None  # the data factory that declared it (kind, ...)

    @property
    def redaction(self) -> Redaction:
        return Redaction(sensitive=tuple(self.sensitive_paths),
                         personal=tuple(self.personal_paths))

    def definition(self) -> dict[str, Any]:
        """The jobs.job_type_put definition this row holds."""
        return {"queue": self.queue, "sensitive": self.sensitive_paths,
                "personal": self.personal_paths, "payload_schema": self.payload_schema,
                "retry": self.retry, "timeout_s": self.timeout_s, "origin": self.origin,
                "factory": self.factory}


class ListedJob(JobRecord):
    """A row of `jobs.list_jobs`: the job_view row, its payload redacted."""

    payload: Any = None
    parent_id: int | None = None
    parent_step: str | None = None


class PersonalDataRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    personal_paths: list[str]
    jobs: int


AttemptOutcome = Literal["retry", "failed", "dead", "interrupted", "lease_expired",
                         "cancelled", "running", "succeeded", "parked"]


class AttemptRecord(BaseModel):
    """One attempt of a job, as `jobs.job_detail` tells it (`attempts_of`): an entry of
    its attempt history (an attempt that ended without success: retry, failed, dead,
    interrupted, lease_expired), or its current or last run read from the job's own
    columns (running, succeeded, cancelled, parked, failed, dead). `error` is that
    attempt's error record, redacted like last_error."""

    model_config = ConfigDict(frozen=True)

    attempt: int
    outcome: AttemptOutcome
    worker: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: Any = None
    claim: int | None = None

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


def job_type_put(name: str, definition: Mapping[str, Any]) -> Call[bool]:
    """Register or replace a job type; True when it is new (see jobs.job_type_put)."""
    return Call("select jobs.job_type_put(%s, %s) as created", (name, Jsonb(dict(definition))),
                lambda rows: bool(rows[0]["created"]))


def job_type_declare(name: str, definition: Mapping[str, Any]) -> Call[bool]:
    """What a worker or the scheduler writes of a job type it serves: new as given, a known
    one only widened (its hidden paths kept); True when new (see jobs.job_type_declare)."""
    return Call("select jobs.job_type_declare(%s, %s) as created",
                (name, Jsonb(dict(definition))), lambda rows: bool(rows[0]["created"]))


def job_type_remove(name: str) -> Call[None]:
    return Call("select jobs.job_type_remove(%s)", (name,), lambda rows: None)


def job_types() -> Call[list[JobTypeRecord]]:
    return Call(
        "select name, queue, sensitive_paths, personal_paths, payload_schema, retry, timeout_s, "
        "origin, updated_at, factory from jobs.job_types()",
        (),
        lambda rows: [JobTypeRecord.model_validate(row) for row in rows],
    )


_LISTED_COLUMNS: LiteralString = (
    "id, name, queue, tenant, key, state::text as state, priority, "
    "nullif(run_at, 'infinity') as run_at, attempt, "
    "max_attempts, retry_base_s, retry_cap_s, retry_jitter, dead_letter, timeout_s, claim, "
    "lease_expires_at, worker, progress, last_error, result, traceparent, created_at, "
    "started_at, finished_at, payload, parent_id, parent_step, actor"
)


def list_jobs(filter: Mapping[str, Any], after_id: int | None = None,
              limit: int = 50) -> Call[list[ListedJob]]:
    """A page of jobs, newest first, redacted (see jobs.list_jobs for the filter)."""
    return Call(
        "select " + _LISTED_COLUMNS + " from jobs.list_jobs(%s, %s, %s)",
        (Jsonb(dict(filter)), after_id, limit),
        lambda rows: [ListedJob.model_validate(row) for row in rows],
    )


def job_detail(job_id: int) -> Call[dict[str, Any] | None]:
    """One job as JSON, redacted: {job, attempts, steps, children, waits}; None when
    missing. `attempts_of(detail)` reads its attempts."""
    return Call("select jobs.job_detail(%s) as detail", (job_id,),
                lambda rows: rows[0]["detail"] if rows else None)


# The outcome of the run a job's own columns describe, by the job's state (a ready or
# interrupted job's last run, when the history lacks it, left no trace to tell).
_RUN_OUTCOME: dict[str, AttemptOutcome] = {
    "running": "running", "succeeded": "succeeded", "cancelled": "cancelled",
    "parked": "parked", "failed": "failed", "dead": "dead"}


def attempts_of(detail: Mapping[str, Any]) -> list[AttemptRecord]:
    """Every attempt a `jobs.job_detail` document tells of, oldest first.

    The history (`attempts`: the last 20 attempts that ended without success) first;
    then the run the job's own columns describe (claim token, worker, started_at),
    unless the history already holds it (same claim): the one running now, the one
    that succeeded, or one that ended otherwise (cancelled, parked; failed or dead
    while unwinding a saga). A parked run is not counted (its attempt was given back),
    so it is shown as the attempt it will run again as."""
    job = detail["job"]
    attempts = [AttemptRecord.model_validate(entry) for entry in detail.get("attempts") or []]
    outcome = _RUN_OUTCOME.get(str(job.get("state")))
    recorded = {a.claim for a in attempts}
    if outcome and job.get("started_at") and job.get("claim") not in recorded:
        final = outcome in ("succeeded", "cancelled", "failed", "dead")
        attempts.append(AttemptRecord(
            attempt=int(job["attempt"]) + (1 if outcome == "parked" else 0),
            outcome=outcome, worker=job.get("worker"), claim=job.get("claim"),
            started_at=job["started_at"], ended_at=job.get("finished_at") if final else None,
            error=job.get("last_error") if outcome in ("failed", "dead") else None))
    return attempts


def personal_data() -> Call[list[PersonalDataRecord]]:
    return Call("select name, personal_paths, jobs from jobs.personal_data()", (),
                lambda rows: [PersonalDataRecord.model_validate(row) for row in rows])


__all__ = ["AttemptOutcome", "AttemptRecord", "JobTypeRecord", "ListedJob", "PersonalDataRecord",
           "attempts_of", "job_detail", "job_type_put", "job_type_remove", "job_types",
           "list_jobs", "personal_data"]
