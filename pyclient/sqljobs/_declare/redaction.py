"""Sensitive and personal fields of a payload model, read off its type annotations.

    class Card(BaseModel):
        number: Annotated[str, Sensitive]
        holder: Annotated[str, PersonalData]

    class Charge(BaseModel):
        card: Card
        password: SecretStr                     # SecretStr / SecretBytes are sensitive
        items: list[Item]                       # Item's marked fields: items[].<field>

`redaction_of(model)` answers the paths (sqljobs._client.redaction says how a path is
written and how it is applied). Sensitive values are hidden in every view, log line and
error text; personal data is listed (`sqljobs describe --personal-data`) so a
data-subject export or erase can find it, and is shown. The handler gets the real
values: `payload_json` writes a SecretStr's value into the payload, where pydantic's
own dump writes "**********".
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Protocol, Union, get_args, get_origin

from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic.types import Secret

from sqljobs._client.redaction import NO_REDACTION, Redaction


class Redacts(Protocol):
    """What knows its payload's redaction: a job's definition (`handle.definition`)."""

    @property
    def redaction(self) -> Redaction: ...


class Marker:
    """A field marker for `Annotated[...]`: `Sensitive` or `PersonalData`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return "Sensitive" if self.kind == "sensitive" else "PersonalData"


Sensitive = Marker("sensitive")
PersonalData = Marker("personal")

_SECRET_TYPES = (SecretStr, SecretBytes, Secret)
_SEQUENCES = (list, tuple, set, frozenset, typing.Sequence, typing.MutableSequence,
              typing.AbstractSet, typing.Iterable)
_MAPPINGS = (dict, typing.Mapping, typing.MutableMapping)


def _marks(metadata: Any) -> set[str]:
    return {m.kind for m in metadata if isinstance(m, Marker)}


def _is_secret(tp: Any) -> bool:
    base = get_origin(tp) or tp
    return isinstance(base, type) and issubclass(base, _SECRET_TYPES)


def _child(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _walk(tp: Any, prefix: str, marks: set[str], found: dict[str, set[str]],
          stack: tuple[type, ...]) -> None:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *metadata = get_args(tp)
        _walk(base, prefix, marks | _marks(metadata), found, stack)
        return
    if _is_secret(tp):
        marks = marks | {"sensitive"}
    if marks and prefix:
        for kind in marks:
            found[kind].add(prefix)
        if marks >= {"sensitive", "personal"}:
            return  # the whole subtree is covered either way
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in stack:
            return  # a recursive model: its fields were walked once above
        for name, info in tp.model_fields.items():
            _walk(info.annotation, _child(prefix, name), marks | _marks(info.metadata),
                  found, (*stack, tp))
        return
    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            if arg is not type(None):
                _walk(arg, prefix, marks, found, stack)
        return
    if origin in _SEQUENCES:
        for arg in get_args(tp):
            if arg is not Ellipsis:
                _walk(arg, prefix + "[]", marks, found, stack)
        return
    if origin in _MAPPINGS:
        args = get_args(tp)
        if len(args) == 2:
            _walk(args[1], _child(prefix, "*"), marks, found, stack)


def _outermost(paths: set[str]) -> tuple[str, ...]:
    """Sorted paths without those inside another (card covers card.number)."""
    def inside(path: str, other: str) -> bool:
        return path != other and (path.startswith(other + ".") or path.startswith(other + "["))
    return tuple(sorted(p for p in paths if not any(inside(p, o) for o in paths)))


@functools.lru_cache(maxsize=1024)  # read on every enqueue (payload_json): walk once
def redaction_of(model: type[BaseModel]) -> Redaction:
    """The sensitive and personal paths of a payload model."""
    found: dict[str, set[str]] = {"sensitive": set(), "personal": set()}
    _walk(model, "", set(), found, ())
    if not found["sensitive"] and not found["personal"]:
        return NO_REDACTION
    return Redaction(sensitive=_outermost(found["sensitive"]),
                     personal=_outermost(found["personal"]))


def _reveal(python: Any, dumped: Any) -> Any:
    """`dumped` (the JSON dump) with each masked secret put back from `python` (the
    Python dump, where secrets are still Secret objects), walking both together."""
    if isinstance(python, _SECRET_TYPES):
        value = python.get_secret_value()
        return value.decode() if isinstance(value, bytes) else value
    if isinstance(python, Mapping) and isinstance(dumped, dict):
        return {k: _reveal(python[k], v) if k in python else v for k, v in dumped.items()}
    if isinstance(python, (list, tuple)) and isinstance(dumped, list) \
            and len(python) == len(dumped):
        return [_reveal(p, d) for p, d in zip(python, dumped, strict=True)]
    return dumped


def payload_json(model: BaseModel) -> Any:
    """The payload as stored: pydantic's JSON dump, with the real value of every
    SecretStr / SecretBytes (the handler must get them back)."""
    dumped = model.model_dump(mode="json")
    if not redaction_of(type(model)).sensitive:
        return dumped
    return _reveal(model.model_dump(), dumped)


def redact(job: Redacts | Redaction, value: Any, *, payload: Any = None) -> Any:
    """A payload, or a text or JSON value, with its job's sensitive values hidden: the
    one call sqljobs itself redacts with, for your own logs and exports.

    `redact(definition, payload)`: the payload with its sensitive fields "[redacted]".
    `redact(definition, text_or_json, payload=payload)`: an error text, log message,
    error record or result with every sensitive value of that payload replaced.
    `job` is a job's definition (`app.job_handle(name).definition`).
    """
    redaction = job if isinstance(job, Redaction) else job.redaction
    if payload is None:
        return redaction.payload(value)
    if isinstance(value, str):
        return redaction.text(value, payload)
    return redaction.value(value, payload)


__all__ = ["Marker", "PersonalData", "Redacts", "Sensitive", "payload_json", "redact",
           "redaction_of"]
