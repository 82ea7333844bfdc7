"""Limits at run time: set, remove, list, stats (`app.limits`); the declared ones are
`sqljobs._declare.limits`."""

from __future__ import annotations

from collections.abc import Sequence

from sqljobs._client import queries
from sqljobs._client.records import LimitRecord, LimitUse
from sqljobs._declare.limits import Limit, Rate, RateArg, declared_writes
from sqljobs._declare.protocols import Deployed


class Limits:
    """The limits of an app's database (runs on the app's pool)."""

    def __init__(self, app: Deployed) -> None:
        self.app = app

    def set(self, name: str, *, scope: str, target: str | None = None,
            key: str | Sequence[str] | None = None, concurrency: int | None = None,
            rate: Rate | RateArg | None = None, when_busy: str = "wait") -> bool:
        """Define the limit `name` (or replace it) at run time; True when it is new.
        Raises ConfigurationError, or InvalidArgument for what the engine refuses."""
        limit = Limit.build(name, scope=scope, target=target, key=key,
                            concurrency=concurrency, rate=rate, when_busy=when_busy)
        return bool(self.app.client.run(queries.limit_put(name, limit.definition("api"))))

    def remove(self, name: str) -> None:
        """Delete `name` (raises LimitNotFound); the jobs waiting on it become claimable."""
        self.app.client.run(queries.limit_remove(name))

    def stats(self) -> list[LimitUse]:
        """Each limit group in use: running, waiting, recent starts, deferred."""
        return self.app.client.run(queries.limit_stats())

    def sync_declared(self) -> int:
        """Write the declared limits that are missing or changed (see `declared_writes`);
        answers how many were written."""
        client = self.app.client
        writes = declared_writes(self.app.declared_limits.values(), client.run(queries.limits()))
        client.run_all(writes)
        return len(writes)

    def list(self) -> list[LimitRecord]:  # last: in the class body it shadows `list`
        """Every limit as defined."""
        return self.app.client.run(queries.limits())


__all__ = ["Limits"]
