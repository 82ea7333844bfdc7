"""The catalog of what an app declares, and the job-type rows that make it travel.

`job_type_definition(definition)` is the `jobs.job_type_put` JSON of one declared job:
its queue, payload JSON schema, retry, timeout, and the sensitive and personal paths
of its model. Workers write the missing or changed ones when they start
(`declared_job_type_writes`, as they write declared limits), so `jobs.job_view`,
`jobs.list_jobs` and `jobs.job_detail` redact a job without its Python model.

`catalog(app)` is what `sqljobs describe` prints: jobs, tasks and limits.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import PydanticUserError

from sqljobs._client.introspection import JobTypeRecord, job_type_declare
from sqljobs._client.queries import Call
from sqljobs._declare.jobs import JobDefinition

if TYPE_CHECKING:
    from sqljobs._declare.protocols import Declared


def _retry(definition: JobDefinition[Any]) -> dict[str, Any] | None:
    fields = {f.name: getattr(definition.retry, f.name)
              for f in dataclasses.fields(definition.retry)
              if getattr(definition.retry, f.name) is not None}
    return fields or None


def payload_schema(definition: JobDefinition[Any]) -> dict[str, Any] | None:
    """The payload model's JSON schema; None for a model pydantic cannot describe (an
    arbitrary type): a worker must start all the same."""
    try:
        schema: dict[str, Any] = definition.payload_model.model_json_schema()
        return schema
    except PydanticUserError:
        return None


def stored_factory(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A factory's kind and settings as the job-type registry stores them (JSON values;
    a URL without its user, password and query, which every reader of the registry sees)."""
    found: dict[str, Any] = json.loads(json.dumps(dict(settings), default=str))
    for name, value in found.items():
        if name == "url" and isinstance(value, str) and value:
            parts = urlsplit(value)
            found[name] = urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1],
                                      parts.path, "", "")) if parts.scheme \
                else value.split("?", 1)[0]
    return found


def job_type_definition(definition: JobDefinition[Any],
                        factory: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The job type JSON of a declared job (origin "declared"; jobs.job_type_declare),
    with the data factory that declared it when one did (`App.factories`)."""
    redaction = definition.redaction
    declared = {"queue": definition.queue, "sensitive": list(redaction.sensitive),
                "personal": list(redaction.personal),
                "payload_schema": payload_schema(definition),
                "retry": _retry(definition), "timeout_s": definition.timeout_s,
                "origin": "declared"}
    if definition.tenant_policy is not None:
        declared["tenant"] = definition.tenant_policy
    if factory is not None:
        declared["factory"] = stored_factory(factory)
    return declared


def _covered(declared: dict[str, Any], record: JobTypeRecord) -> bool:
    """Whether the stored type already holds what the declaration adds: its hidden and
    personal paths (a stored type may hide more), schema, retry policy, timeout and the
    data factory that declared it."""
    stored = record.definition()
    if "tenant" in declared:  # not in jobs.job_types(): written at every start
        return False
    return all(stored[k] == declared[k] for k in ("payload_schema", "retry", "timeout_s")) \
        and stored["factory"] == declared.get("factory") \
        and set(declared["sensitive"]) <= set(stored["sensitive"]) \
        and set(declared["personal"]) <= set(stored["personal"])


def declared_job_type_writes(definitions: Iterable[JobDefinition[Any]],
                             stored: list[JobTypeRecord],
                             factories: Mapping[str, Mapping[str, Any]] | None = None,
                             ) -> list[Call[bool]]:
    """The `jobs.job_type_declare` calls that bring the registry up to the declared jobs:
    each one missing, or whose stored type lacks a path, a schema, a policy it declares.
    They only add: a stored type that hides more, or names another queue, keeps it (an
    operator's `jobs.job_type_put` narrows or moves one); a type no longer declared stays
    (another service may declare it, and its stored jobs still need their redaction)."""
    by_name = {record.name: record for record in stored}
    writes = []
    for definition in definitions:
        declared = job_type_definition(definition, (factories or {}).get(definition.name))
        record = by_name.get(definition.name)
        if record is None or not _covered(declared, record):
            writes.append(job_type_declare(definition.name, declared))
    return writes


def _applies(limit: dict[str, Any], job: str, queue: str | None) -> bool:
    """Whether a declared limit holds jobs of this name (a queue left None is the
    engine's default queue, "default")."""
    scope, target = limit["scope"], limit.get("target")
    if scope in ("name", "key"):
        return bool(target == job)
    if scope == "queue":
        return bool(target == (queue or "default"))
    return True  # global, and tenant (each tenant on its own)


def catalog(app: Declared) -> dict[str, Any]:
    """Every declared job, task and limit, as JSON (`sqljobs describe --json`)."""
    limits = {name: limit.definition("declared") for name, limit in
              sorted(app.declared_limits.items())}
    jobs = []
    for name, handle in sorted(app.jobs.items()):
        d = handle.definition
        body = job_type_definition(d)
        jobs.append({
            "name": name, "queue": d.queue, "priority": d.priority,
            "retry": body["retry"], "timeout_s": d.timeout_s,
            "terminal": [f"{t.__module__}.{t.__qualname__}" for t in d.terminal],
            "limits": sorted(n for n, limit in limits.items()
                             if _applies(limit, name, d.queue)),
            "sensitive": body["sensitive"], "personal": body["personal"],
            "payload_model": f"{d.payload_model.__module__}.{d.payload_model.__qualname__}",
            "payload_schema": body["payload_schema"],
            "cron": None,
        })
    by_name = {job["name"]: job for job in jobs}
    tasks = []
    for name, task in sorted(app.tasks.items()):
        schedule = {"cron": task.cron.expression, "timezone": task.cron.timezone,
                    "catch_up": task.catch_up}
        if task.job in by_name:
            by_name[task.job]["cron"] = schedule
        tasks.append({"name": name, "job": task.job, **schedule})
    return {"jobs": jobs, "tasks": tasks, "limits": [{"name": n, **body} for n, body in
                                                     limits.items()]}


def personal_data(app: Declared) -> list[dict[str, Any]]:
    """The declared jobs whose payload holds personal data, with its paths."""
    return [{"name": name, "personal": list(handle.definition.redaction.personal),
             "sensitive": list(handle.definition.redaction.sensitive)}
            for name, handle in sorted(app.jobs.items())
            if handle.definition.redaction.personal]


__all__ = ["catalog", "declared_job_type_writes", "job_type_definition", "personal_data",
           "stored_factory"]
