"""Redaction by paths: what a job type hides of its payload, and of any text it produced.

A job type's redaction is a list of payload paths (`Redaction.sensitive`). A path names
object keys joined by dots; `[]` steps into every element of an array and `*` into
every value of an object:

    password          the top-level field
    card.number       a field of a nested object
    items[].ssn       a field of every element of an array
    tokens[]          every element of an array
    headers.*         every value of an object

`payload()` replaces the value at each path with "[redacted]". `text()` / `value()`
replace, in a message, traceback, error record or result, every sensitive value the
given payload holds: a handler's `raise ValueError(f"card {number} declined")` keeps
its shape but loses the number. The same rules run in SQL (`jobs.redact`,
sql/92_introspection.sql), so a viewer that never imported the Python model redacts too.

Pure functions on JSON values: no database, no pydantic (sqljobs._declare.redaction
reads the markers off a model).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REDACTED = "[redacted]"

# A value shorter than this is not searched for in text: replacing every "12" of a
# traceback would hide nothing and destroy the rest (docs/howto-redaction.md, limits).
MIN_TEXT_VALUE = 3

_SEGMENT = re.compile(r"^(?:\*|[^.\[\]*]+)(?:\[\])*$")


def path_problem(path: str) -> str | None:
    """Why `path` is not a redaction path (None when it is one)."""
    if not isinstance(path, str) or not path:
        return "a path is a non-empty string"
    for segment in path.split("."):
        if not _SEGMENT.match(segment):
            return f"path {path!r}: segment {segment!r} is not a key, '*', or a key followed by []"
    return None


def path_steps(path: str) -> list[str]:
    """'items[].ssn' -> ['items', '[]', 'ssn']."""
    steps: list[str] = []
    for segment in path.split("."):
        base = segment.replace("[]", "")
        if base:
            steps.append(base)
        steps.extend("[]" for _ in range(segment.count("[]")))
    return steps


def _redact_at(value: Any, steps: Sequence[str]) -> Any:
    if not steps:
        return value if value is None else REDACTED
    head, rest = steps[0], steps[1:]
    if head == "[]":
        return [_redact_at(v, rest) for v in value] if isinstance(value, list) else value
    if not isinstance(value, Mapping):
        return value
    if head == "*":
        return {k: _redact_at(v, rest) for k, v in value.items()}
    if head not in value:
        return value
    return {**value, head: _redact_at(value[head], rest)}


def _leaves_at(value: Any, steps: Sequence[str]) -> Iterator[Any]:
    if not steps:
        if isinstance(value, Mapping):
            for v in value.values():
                yield from _leaves_at(v, ())
        elif isinstance(value, list):
            for v in value:
                yield from _leaves_at(v, ())
        elif value is not None:
            yield value
        return
    head, rest = steps[0], steps[1:]
    if head == "[]":
        if isinstance(value, list):
            for v in value:
                yield from _leaves_at(v, rest)
    elif isinstance(value, Mapping):
        if head == "*":
            for v in value.values():
                yield from _leaves_at(v, rest)
        elif head in value:
            yield from _leaves_at(value[head], rest)


@dataclass(frozen=True)
class Redaction:
    """What one job type hides: its sensitive paths (and, for the personal-data check,
    its personal ones, which views show)."""

    sensitive: tuple[str, ...] = ()
    personal: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for path in (*self.sensitive, *self.personal):
            problem = path_problem(path)
            if problem is not None:
                raise ValueError(problem)

    def payload(self, payload: Any) -> Any:
        """The payload with every sensitive path's value replaced by "[redacted]"."""
        for path in self.sensitive:
            payload = _redact_at(payload, path_steps(path))
        return payload

    def secrets_of(self, payload: Any) -> list[str]:
        """The sensitive values `payload` holds, as text, longest first (so a value
        that contains another is replaced whole)."""
        found = {str(v).lower() if isinstance(v, bool) else str(v)
                 for path in self.sensitive for v in _leaves_at(payload, path_steps(path))}
        return sorted((v for v in found if len(v) >= MIN_TEXT_VALUE), key=len, reverse=True)

    def text(self, text: str, payload: Any) -> str:
        """`text` with every sensitive value of `payload` replaced by "[redacted]"."""
        return redact_text(text, self.secrets_of(payload))

    def value(self, value: Any, payload: Any) -> Any:
        """A JSON value (error record, result, progress, step value) with every
        sensitive value of `payload` replaced inside its strings."""
        secrets = self.secrets_of(payload)
        return redact_strings(value, secrets) if secrets else value


def redact_text(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_strings(value: Any, secrets: Sequence[str]) -> Any:
    """Every string inside `value` (keys too) with the secrets replaced."""
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, Mapping):
        return {redact_text(str(k), secrets): redact_strings(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_strings(v, secrets) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and str(value) in secrets:
        return REDACTED
    return value


NO_REDACTION = Redaction()

__all__ = ["MIN_TEXT_VALUE", "NO_REDACTION", "REDACTED", "Redaction", "path_problem",
           "path_steps", "redact_strings", "redact_text"]
