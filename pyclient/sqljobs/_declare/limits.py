"""Concurrency and rate limits: declared in code, set at run time (`app.limits`).

    @app.job(concurrency=5, rate=(100, 60), limit=key("customer_id", 2))
    def sync_customer(ctx, payload: Sync): ...

    app.limit("stripe-api", scope="global", rate=(25, 1))      # declared on the app
    app.limits.set("mail", scope="queue", target="mail", concurrency=20)  # at run time

Limits live in `jobs.limit` and hold inside `jobs.claim` (sql/35_limits.sql), so every
claimer obeys them, whatever its language. Declared limits are written by each worker
when it starts (`sync_declared`, origin "declared"); a limit set at run time (origin
"api": `app.limits.set`, `sqljobs limits set`, `jobs.limit_put`) is left alone by that
sync until it is removed. docs/howto-limits.md states what each guarantees.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, get_args

from pydantic import BaseModel

from sqljobs._client import queries
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.queries import Call
from sqljobs._client.records import LimitRecord, LimitScope, WhenBusy

Seconds = float | timedelta
RateArg = tuple[int, Seconds]


def seconds(value: Seconds, what: str) -> float:
    """Seconds of a float or a timedelta; ConfigurationError unless positive."""
    total = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not total > 0:
        raise ConfigurationError(f"{what} must be positive seconds, not {value!r}")
    return total


@dataclass(frozen=True)
class Rate:
    """At most `n` starts in any window of `per_s` seconds."""

    n: int
    per_s: float

    @classmethod
    def of(cls, value: Rate | RateArg, what: str = "rate") -> Rate:
        if isinstance(value, Rate):
            return value
        try:
            n, per = value
        except (TypeError, ValueError):
            raise ConfigurationError(f"{what} is (starts, per seconds), not {value!r}") from None
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigurationError(f"{what}: starts must be a whole number of at least 1")
        return cls(n, seconds(per, f"{what}: the interval"))


@dataclass(frozen=True)
class KeyLimit:
    """`key(field, n)`: a job's limit per value of a payload field (see `key`)."""

    path: tuple[str, ...]
    concurrency: int | None = None
    rate: Rate | None = None
    when_busy: WhenBusy = "wait"


def key(field: str | Sequence[str], concurrency: int | None = None, *,
        rate: Rate | RateArg | None = None, when_busy: WhenBusy = "wait") -> KeyLimit:
    """A keyed limit for `@app.job(limit=...)`: at most `concurrency` runs at once, and/or
    `rate` = (n, per seconds) starts, per value of the payload field `field` (a name, or
    a path of names into nested models). `when_busy="wait"` leaves a job whose key is
    full waiting for it; `"fail"` fails it for good (KeyBusy) when another run holds
    the key under a live lease."""
    path = (field,) if isinstance(field, str) else tuple(field)
    if not path or not all(isinstance(p, str) and p for p in path):
        raise ConfigurationError("key(...) names a payload field, or a path of field names")
    if when_busy not in get_args(WhenBusy):
        raise ConfigurationError("when_busy is 'wait' or 'fail'")
    if when_busy == "fail" and concurrency is None:
        raise ConfigurationError("when_busy='fail' needs a concurrency")
    limit = KeyLimit(path, concurrency, None if rate is None else Rate.of(rate), when_busy)
    _check_amounts(limit.concurrency, limit.rate)
    return limit


def _check_amounts(concurrency: int | None, rate: Rate | None) -> None:
    if concurrency is None and rate is None:
        raise ConfigurationError("a limit needs a concurrency, a rate, or both")
    if concurrency is not None and (not isinstance(concurrency, int)
                                    or isinstance(concurrency, bool) or concurrency < 1):
        raise ConfigurationError(f"concurrency must be a whole number of at least 1, "
                                 f"not {concurrency!r}")


@dataclass(frozen=True)
class Limit:
    """One limit as `jobs.limit_put` takes it."""

    name: str
    scope: LimitScope
    target: str | None = None
    key: tuple[str, ...] | None = None
    concurrency: int | None = None
    rate: Rate | None = None
    when_busy: WhenBusy = "wait"

    @classmethod
    def build(cls, name: str, *, scope: str, target: str | None = None,
              key: str | Sequence[str] | None = None, concurrency: int | None = None,
              rate: Rate | RateArg | None = None, when_busy: str = "wait") -> Limit:
        if scope not in get_args(LimitScope):
            raise ConfigurationError(f"scope must be one of {', '.join(get_args(LimitScope))}, "
                                     f"not {scope!r}")
        if when_busy not in get_args(WhenBusy):
            raise ConfigurationError("when_busy is 'wait' or 'fail'")
        path = None if key is None else ((key,) if isinstance(key, str) else tuple(key))
        limit = cls(name, scope, target, path, concurrency,  # type: ignore[arg-type]
                    None if rate is None else Rate.of(rate), when_busy)  # type: ignore[arg-type]
        _check_amounts(limit.concurrency, limit.rate)
        return limit

    def definition(self, origin: str) -> dict[str, Any]:
        """The JSON of `jobs.limit_put` (the engine checks the rest of the rules)."""
        body: dict[str, Any] = {"scope": self.scope, "origin": origin,
                                "when_busy": self.when_busy}
        if self.target is not None:
            body["target"] = self.target
        if self.key is not None:
            body["key"] = list(self.key)
        if self.concurrency is not None:
            body["concurrency"] = self.concurrency
        if self.rate is not None:
            body["rate"] = {"n": self.rate.n, "per_s": self.rate.per_s}
        return body

    def same_as(self, record: LimitRecord) -> bool:
        return (record.scope, record.target, record.key_path and tuple(record.key_path),
                record.concurrency, record.rate_n, record.rate_per_s, record.when_busy) == (
            self.scope, self.target, self.key, self.concurrency,
            self.rate and self.rate.n, self.rate and self.rate.per_s, self.when_busy)


def job_limits(job: str, model: type[BaseModel], concurrency: int | None,
               rate: Rate | RateArg | None,
               limit: KeyLimit | Sequence[KeyLimit] | None) -> list[Limit]:
    """The limits `@app.job(concurrency=, rate=, limit=)` declares: one of scope name
    called `<job>`, one of scope key per key limit called `<job>:<field path>`."""
    found: list[Limit] = []
    if concurrency is not None or rate is not None:
        found.append(Limit.build(job, scope="name", target=job, concurrency=concurrency,
                                 rate=rate))
    keyed = [] if limit is None else [limit] if isinstance(limit, KeyLimit) else list(limit)
    for each in keyed:
        if not isinstance(each, KeyLimit):
            raise ConfigurationError("limit= takes key(...) limits")
        _check_path(job, model, each.path)
        found.append(Limit(f"{job}:{'.'.join(each.path)}", "key", job, each.path,
                           each.concurrency, each.rate, each.when_busy))
    return found


def _check_path(job: str, model: type[BaseModel], path: tuple[str, ...]) -> None:
    """The key names a field of the payload model, through nested models (past a field
    that is not a model, such as a dict, the engine reads whatever the payload holds)."""
    current: Any = model
    for name in path:
        fields = current.model_fields if (isinstance(current, type)
                                          and issubclass(current, BaseModel)) else None
        if fields is None:
            return
        if name not in fields:
            raise ConfigurationError(
                f"job {job!r}: key {'.'.join(path)!r} names no field of "
                f"{current.__name__} (its fields: {', '.join(fields) or 'none'})")
        current = fields[name].annotation


def declared_writes(declared: Iterable[Limit], stored: list[LimitRecord]) -> list[Call[bool]]:
    """The `jobs.limit_put` calls that bring the stored limits in line with the declared
    ones: each declared limit missing or changed, except one set at run time (origin
    "api"), which stays until it is removed. Declared limits no longer declared stay
    too (another service may declare them): `sqljobs limits remove` deletes them."""
    by_name = {record.name: record for record in stored}
    writes = []
    for limit in declared:
        record = by_name.get(limit.name)
        if record is not None and (record.origin == "api" or limit.same_as(record)):
            continue
        writes.append(queries.limit_put(limit.name, limit.definition("declared")))
    return writes


__all__ = ["KeyLimit", "Limit", "Rate", "declared_writes", "job_limits", "key", "seconds"]
