"""What a test asserts about enqueued jobs: `enqueued`, `assert_enqueued`, `refute_enqueued`.

    job = assert_enqueued(send_email, payload={"to": "a@example.com"}, queue="mail")

A job matches when each criterion given matches: the job type (a handle or its name),
`queue`, `tenant`, `key`, `actor` (who asked for it: `handle.as_(actor)`, compared
whole), and `payload`, a subset of the stored payload's top-level fields (a pydantic
model is compared whole, as the job would store it). When nothing
matches, the failure lists what WAS enqueued, closest match first, each with how it
differs, so a wrong field reads off the message.

The database is the one the test's app uses: `dsn=`, else $SQLJOBS_DSN (which the
`sqljobs_db` fixture sets for each test).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs._client.database import resolve_dsn
from sqljobs._client.records import JobRecord, JobState
from sqljobs._declare.jobs import JobHandle
from sqljobs._declare.redaction import payload_json

_SHOWN = 10  # a failure lists at most this many jobs


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()  # a criterion left out


class EnqueuedJob(JobRecord):
    """A job as the testing kit reads it: `jobs.job_view`'s row and its payload, not
    redacted (a test may assert on a sensitive field)."""

    payload: Any


def _states(state: JobState | str | Sequence[JobState | str]) -> list[str]:
    given = [state] if isinstance(state, str) else list(state)
    return [JobState(s).value for s in given]


def _name(job: JobHandle[Any] | str | None) -> str | None:
    return job.name if isinstance(job, JobHandle) else job


def _expected_payload(payload: Any) -> Any:
    if payload is ANY:
        return ANY
    if isinstance(payload, BaseModel):
        return payload_json(payload)
    return to_jsonable_python(payload)


def enqueued(job: JobHandle[Any] | str | None = None, *, payload: Any = ANY,
             queue: str | None = ANY, tenant: str | None = ANY, key: str = ANY,
             actor: str | Mapping[str, Any] | None = ANY,
             state: JobState | str | Sequence[JobState | str] = "ready",
             dsn: str | None = None) -> list[EnqueuedJob]:
    """The jobs that match, oldest first (the criteria are `assert_enqueued`'s)."""
    compared = _compare(job, payload, queue, tenant, key, actor, state, dsn)
    return [found for found, differs in compared if not differs]


def assert_enqueued(job: JobHandle[Any] | str | None = None, *, payload: Any = ANY,
                    queue: str | None = ANY, tenant: str | None = ANY, key: str = ANY,
                    actor: str | Mapping[str, Any] | None = ANY,
                    state: JobState | str | Sequence[JobState | str] = "ready",
                    dsn: str | None = None) -> EnqueuedJob:
    """Fail unless a job matches; answers it (the oldest, when several do). The
    failure lists what was enqueued, closest match first, with how each differs.

    Each criterion given must match: `job` (a handle or a job name), `queue`,
    `tenant`, `key`, `actor` (who asked for the job, as `handle.as_(actor)` or the
    `actor=` option stored it: a string or a JSON object, compared whole; None: no
    actor), and `payload`: a mapping matches when each field it gives equals
    the stored payload's, a pydantic model when the whole payload equals it. `state`:
    the states that count as enqueued, by default ready (jobs due later included).
    The database: `dsn`, else $SQLJOBS_DSN (the `sqljobs_db` fixture sets it)."""
    __tracebackhide__ = True  # pytest shows the test's line, not the kit's
    compared = _compare(job, payload, queue, tenant, key, actor, state, dsn)
    for found, differs in compared:
        if not differs:
            return found
    wanted = _criteria(job, payload, queue, tenant, key, actor)
    if not compared:
        raise AssertionError(f"expected a job {wanted}, but no job is "
                             f"{'/'.join(_states(state))}")
    closest = sorted(compared, key=lambda pair: (len(pair[1]), pair[0].id))
    lines = [f"expected a job {wanted}; none of the {len(compared)} "
             f"{'/'.join(_states(state))} job(s) matches (closest first):"]
    for found, differs in closest[:_SHOWN]:
        lines.append(f"  {_describe(found)}")
        lines.append(f"      differs: {'; '.join(differs)}")
    if len(closest) > _SHOWN:
        lines.append(f"  ... and {len(closest) - _SHOWN} more")
    raise AssertionError("\n".join(lines))


def refute_enqueued(job: JobHandle[Any] | str | None = None, *, payload: Any = ANY,
                    queue: str | None = ANY, tenant: str | None = ANY, key: str = ANY,
                    actor: str | Mapping[str, Any] | None = ANY,
                    state: JobState | str | Sequence[JobState | str] = "ready",
                    dsn: str | None = None) -> None:
    """Fail if a job matches (the criteria are `assert_enqueued`'s); the failure
    lists the ones that do."""
    __tracebackhide__ = True
    matched = enqueued(job, payload=payload, queue=queue, tenant=tenant, key=key,
                       actor=actor, state=state, dsn=dsn)
    if matched:
        shown = "\n".join(f"  {_describe(found)}" for found in matched[:_SHOWN])
        raise AssertionError(
            f"expected no job {_criteria(job, payload, queue, tenant, key, actor)}, "
            f"found {len(matched)}:\n{shown}")


def _compare(job: JobHandle[Any] | str | None, payload: Any, queue: Any, tenant: Any,
             key: Any, actor: Any, state: JobState | str | Sequence[JobState | str],
             dsn: str | None) -> list[tuple[EnqueuedJob, list[str]]]:
    """Every job in `state`, oldest first, with how it differs from the criteria."""
    with psycopg.connect(resolve_dsn(dsn), autocommit=True) as conn:
        rows = Client(conn).run(queries.jobs_with_payloads(_states(state)))
    name, expected = _name(job), _expected_payload(payload)
    compared = []
    for row in rows:
        found = EnqueuedJob.model_validate(row)
        differs = [f"{field} is {actual!r}, not {wanted!r}"
                   for field, wanted, actual in (("name", name, found.name),
                                                 ("queue", queue, found.queue),
                                                 ("tenant", tenant, found.tenant),
                                                 ("key", key, found.key),
                                                 ("actor", _expected_actor(actor),
                                                  found.actor))
                   if wanted is not ANY and not (field == "name" and wanted is None)
                   and wanted != actual]
        differs += _payload_differs(expected, found.payload)
        compared.append((found, differs))
    return compared


def _expected_actor(actor: Any) -> Any:
    return actor if actor is ANY else to_jsonable_python(actor)  # as stored, in JSON


def _payload_differs(expected: Any, actual: Any) -> list[str]:
    if expected is ANY:
        return []
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return [f"payload[{field!r}] is {actual[field]!r}, not {value!r}"
                if field in actual else f"payload has no {field!r}"
                for field, value in expected.items()
                if field not in actual or actual[field] != value]
    return [] if expected == actual else [f"payload is {actual!r}, not {expected!r}"]


def _criteria(job: JobHandle[Any] | str | None, payload: Any, queue: Any, tenant: Any,
              key: Any, actor: Any) -> str:
    parts = [repr(_name(job))] if _name(job) is not None else []
    parts += [f"{field}={value!r}" for field, value in (
        ("queue", queue), ("tenant", tenant), ("key", key), ("actor", _expected_actor(actor)),
        ("payload", _expected_payload(payload))) if value is not ANY]
    return " ".join(parts) if parts else "of any kind"


def _describe(job: EnqueuedJob) -> str:
    return (f"#{job.id} {job.name} queue={job.queue!r} tenant={job.tenant!r} "
            f"key={job.key!r} actor={job.actor!r} payload={job.payload!r}")


__all__ = ["ANY", "EnqueuedJob", "assert_enqueued", "enqueued", "refute_enqueued"]


def assert_subject_coverage(app: Any) -> None:
    """Fail when a declared job type has PersonalData fields and no subject mapping
    (`app.subject_of(...)`): a data-subject export or erase would miss its jobs."""
    missing = app.subject_coverage()
    if missing:
        raise AssertionError(
            f"{len(missing)} job type(s) hold personal data and map no subject: "
            f"{', '.join(missing)} (declare app.subject_of(job, '<payload path>'))")
