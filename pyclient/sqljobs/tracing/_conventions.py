"""Span names and attribute keys: the OpenTelemetry messaging conventions where they
have a name for it (messaging.*), `sqljobs.*` for the rest.

No attribute ever holds a payload value: spans carry ids, names, queues, counts and
outcomes, and the actor (who asked for the job: a user or service id); an error is its
record's kind, type and (redacted) message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqljobs._client.records import JobSpec

MESSAGING_SYSTEM = "sqljobs"
DEFAULT_QUEUE = "default"  # jobs.job.queue's default: a spec without a queue lands there
TRACER_NAME = "sqljobs"

# messaging conventions (semantic-conventions, messaging spans)
SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"  # send | process
OPERATION_NAME = "messaging.operation.name"  # enqueue | stage | invoke | process
DESTINATION = "messaging.destination.name"  # the queue
MESSAGE_ID = "messaging.message.id"  # the job id, as text
BATCH_COUNT = "messaging.batch.message_count"
ERROR_TYPE = "error.type"

# sqljobs' own
JOB_ID = "sqljobs.job.id"
JOB_NAME = "sqljobs.job.name"
ATTEMPT = "sqljobs.job.attempt"
MAX_ATTEMPTS = "sqljobs.job.max_attempts"
CLAIM = "sqljobs.job.claim"
OUTCOME = "sqljobs.run.outcome"
ERROR_KIND = "sqljobs.error.kind"
STEP_NAME = "sqljobs.step.name"
STEP_KIND = "sqljobs.step.kind"
ACTOR = "sqljobs.actor"  # a string actor as is, an object as compact JSON

# Run outcomes (RunWatch.ended's labels) that are failures of the run: the span's
# status is ERROR. succeeded, snoozed, interrupted and parked are not.
FAILED_OUTCOMES = frozenset({"retried", "failed", "dead", "compensated", "lost"})


def queue_of(spec: JobSpec) -> str:
    return spec.queue or DEFAULT_QUEUE


def actor_attribute(actor: Any) -> str | None:
    """An actor as a span attribute: a string as is, an object as compact JSON with
    its keys sorted (None: no actor)."""
    if actor is None:
        return None
    if isinstance(actor, str):
        return actor
    return json.dumps(actor, separators=(",", ":"), sort_keys=True, default=str)


def specs_actor(specs: Sequence[JobSpec]) -> str | None:
    """The actor of a write's specs when they share one (None: none, or several)."""
    actors = {actor_attribute(spec.actor) for spec in specs}
    return next(iter(actors)) if len(actors) == 1 else None


def step_span_name(kind: str, name: str) -> str:
    """`step charge`, `sleep cool-off`, `wait paid`, `invoke children`, ..."""
    return f"{'step' if kind == 'run' else kind} {name}"


def event_attributes(attributes: Mapping[str, Any] | None,
                     ) -> dict[str, str | int | float | bool | list[str]]:
    """A RunWatch event's attributes as span-event attributes, under `sqljobs.`."""
    if not attributes:
        return {}
    out: dict[str, str | int | float | bool | list[str]] = {}
    for key, value in attributes.items():
        if isinstance(value, str | int | float | bool):
            out[f"sqljobs.{key}"] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[f"sqljobs.{key}"] = list(value)
    return out
