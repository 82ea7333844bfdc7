"""The producer hook: how an enqueue gets a trace context without the client knowing
OpenTelemetry (or any tracer).

Every enqueue path (`JobHandle.enqueue`, `enqueue_many`, `stage`, `stage_many`, their
async forms, a step's `invoke`) writes inside

    with producing("enqueue", specs) as sending:
        answer = ... send sending.specs ...
        sending.enqueued(ids)

With no hook installed (the default) that is one global read and the specs as given.
`sqljobs.tracing.instrument()` installs a hook that opens a producer span around the
write and gives each spec without a `traceparent` that span's context, which the job
stores (jobs.job.traceparent) and the worker continues.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Literal, Protocol

from sqljobs._client.records import JobSpec

Operation = Literal["enqueue", "stage", "invoke"]


class Sending:
    """One enqueue as a hook sees it: the specs to write (as given, here), and the ids
    the write answered. A hook subclasses it to open and close its span."""

    __slots__ = ("operation", "specs")

    def __init__(self, operation: Operation, specs: Sequence[JobSpec]) -> None:
        self.operation = operation
        self.specs = specs

    def __enter__(self) -> Sending:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def enqueued(self, ids: Sequence[int]) -> None:
        """The write answered these job ids, in the order of `specs`."""


class ProducerHook(Protocol):
    def sending(self, operation: Operation, specs: Sequence[JobSpec]) -> Sending: ...


_hook: ProducerHook | None = None


def install(hook: ProducerHook | None) -> ProducerHook | None:
    """Make `hook` see every enqueue of this process (None: none); answers the previous."""
    global _hook
    previous, _hook = _hook, hook
    return previous


def installed() -> ProducerHook | None:
    return _hook


def producing(operation: Operation, specs: Sequence[JobSpec]) -> Sending:
    """Around one enqueue write: the installed hook's view of it, or the specs as given."""
    hook = _hook
    if hook is None:
        return Sending(operation, specs)
    return hook.sending(operation, specs)


__all__ = ["Operation", "ProducerHook", "Sending", "install", "installed", "producing"]
