"""Redacting: a run's outcome loses its payload's sensitive values before it is written.

The handler got the real values; what it raised may quote them (`ValueError(f"card
{number} declined")`), and so may pydantic's validation errors. Every error record a
run produces passes through `redacted_settlement` before it reaches last_error, the
worker's log line or an observer (metrics, spans): message, detail and traceback keep
their shape, each sensitive value of the payload becomes "[redacted]"
(sqljobs._declare.redaction). The result is stored as returned (a caller awaits it);
the views redact it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqljobs._declare.jobs import JobDefinition
from sqljobs._declare.redaction import redact
from sqljobs._runtime.worker.settling import Settlement


def redacted_settlement(definition: JobDefinition[Any], payload: Any,
                        settlement: Settlement | None) -> Settlement | None:
    """`settlement` with its error record redacted by `payload`'s sensitive values."""
    if settlement is None or settlement.error is None or not definition.redaction.sensitive:
        return settlement
    return replace(settlement, error=redact(definition, settlement.error, payload=payload))


__all__ = ["redacted_settlement"]
