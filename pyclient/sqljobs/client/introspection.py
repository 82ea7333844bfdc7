"""Statements of the redacting read side and the job-type registry (sql/92_introspection.sql).

    job_type_put / job_type_remove / job_types    the registry (what each name hides)
    list_jobs(filter, after_id, limit)            a page of jobs, newest first, redacted
    job_detail(id)                                one job with steps, children, waits
    personal_data()                               job types holding personal data
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, LiteralString

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict

from sqljobs.client.queries import Call
from sqljobs.client.records import JobRecord
from sqljobs.client.redaction import Redaction


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

    @property
    def redaction(self) -> Redaction:
        return Redaction(sensitive=tuple(self.sensitive_paths),
                         personal=tuple(self.personal_paths))

    def definition(self) -> dict[str, Any]:
        """The jobs.job_type_put definition this row holds."""
        return {"queue": self.queue, "sensitive": self.sensitive_paths,
                "personal": self.personal_paths, "payload_schema": self.payload_schema,
                "retry": self.retry, "timeout_s": self.timeout_s, "origin": self.origin}


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


def job_type_put(name: str, definition: Mapping[str, Any]) -> Call[bool]:
    """Register or replace a job type; True when it is new (see jobs.job_type_put)."""
    return Call("select jobs.job_type_put(%s, %s) as created", (name, Jsonb(dict(definition))),
                lambda rows: bool(rows[0]["created"]))


def job_type_remove(name: str) -> Call[None]:
    return Call("select jobs.job_type_remove(%s)", (name,), lambda rows: None)


def job_types() -> Call[list[JobTypeRecord]]:
    return Call(
        "select name, queue, sensitive_paths, personal_paths, payload_schema, retry, timeout_s, "
        "origin, updated_at from jobs.job_types()",
        (),
        lambda rows: [JobTypeRecord.model_validate(row) for row in rows],
    )


_LISTED_COLUMNS: LiteralString = (
    "id, name, queue, tenant, key, state::text as state, priority, "
    "nullif(run_at, 'infinity') as run_at, attempt, "
    "max_attempts, retry_base_s, retry_cap_s, retry_jitter, dead_letter, timeout_s, claim, "
    "lease_expires_at, worker, progress, last_error, result, traceparent, created_at, "
    "started_at, finished_at, payload, parent_id, parent_step"
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
    """One job as JSON, redacted: {job, steps, children, waits}; None when missing."""
    return Call("select jobs.job_detail(%s) as detail", (job_id,),
                lambda rows: rows[0]["detail"] if rows else None)


def personal_data() -> Call[list[PersonalDataRecord]]:
    return Call("select name, personal_paths, jobs from jobs.personal_data()", (),
                lambda rows: [PersonalDataRecord.model_validate(row) for row in rows])


__all__ = ["JobTypeRecord", "ListedJob", "PersonalDataRecord", "job_detail", "job_type_put",
           "job_type_remove", "job_types", "list_jobs", "personal_data"]
