"""What the layers above read of an application, as small protocols.

The runtime (worker, relay, scheduler), `describe` and the run-time managers never
import `App`: they type against these, which `App` satisfies.
"""

from __future__ import annotations

from typing import Any, Protocol

from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle
from sqljobs._declare.limits import Limit
from sqljobs._declare.tasks import TaskDefinition


class Declared(Protocol):
    """What an application declares: its jobs, tasks and limits."""

    @property
    def jobs(self) -> dict[str, JobHandle[Any]]: ...

    @property
    def tasks(self) -> dict[str, TaskDefinition]: ...

    @property
    def declared_limits(self) -> dict[str, Limit]: ...

    def job_handle(self, name: str) -> JobHandle[Any]: ...


class Deployed(Declared, ClientSource, Protocol):
    """An application on its database: its declarations, where it is, where calls run."""

    @property
    def dsn(self) -> str: ...

    @property
    def code_version(self) -> str | None:
        """The release of the handlers' code, for version routing (None: no routing)."""
        ...


__all__ = ["Declared", "Deployed"]
