"""Job declarations: `@app.job(...)` turns a function into a `JobHandle`.

A handler takes `(ctx, payload)`; the payload is a pydantic model, validated when the
job is enqueued (nothing is written for a bad payload) and again in the worker (a
payload that no longer validates fails the job terminally with a coded reason).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from sqljobs.client import queries
from sqljobs.client.errors import ConfigurationError, InvalidPayload
from sqljobs.client.records import Enqueued, Jitter, JobSpec, Staged
from sqljobs.client.transactions import run_in, run_in_async
from sqljobs.declare.limits import Rate

if TYPE_CHECKING:
    from sqljobs.declare.app import App

P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed attempt is retried: `max_attempts` in all, exponential backoff
    `base_s * 2^(attempt-1)` capped at `cap_s`, with `jitter` none | full | equal.
    Exhausted jobs are dead-lettered (`dead`) unless `dead_letter=False` (`failed`).

    A field left None takes the engine's default, which the job table defines once
    (`select jobs.spec_defaults()`: 25 attempts, base 1 s, cap 3600 s, full jitter,
    dead-letter on); the backoff itself is computed in SQL (`jobs.backoff_s`). As a
    step's `retry=`, a field left None takes the value of the step's job."""

    max_attempts: int | None = None
    base_s: float | None = None
    cap_s: float | None = None
    jitter: Jitter | None = None
    dead_letter: bool | None = None

    def __post_init__(self) -> None:
        # Declaration-time checks, so a bad policy fails where it is written; the
        # engine checks every value again at enqueue (jobs.spec_problem).
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigurationError("retry.max_attempts must be at least 1")
        if self.base_s is not None and self.base_s <= 0:
            raise ConfigurationError("retry.base_s must be positive")
        if self.base_s is not None and self.cap_s is not None and self.cap_s < self.base_s:
            raise ConfigurationError("retry needs base_s <= cap_s")

    def over(self, other: RetryPolicy) -> RetryPolicy:
        """This policy, its unset fields taken from `other`."""
        return dataclasses.replace(other, **{
            f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None})


@dataclass(frozen=True)
class JobDefinition(Generic[P]):
    """Everything declared about one job type."""

    name: str
    fn: Callable[..., Any]
    payload_model: type[P]
    queue: str | None = None  # None: the engine's default queue
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_s: float | None = None
    priority: int | None = None
    terminal: tuple[type[BaseException], ...] = ()

    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def parse_payload(self, payload: Any) -> P:
        """The payload as the declared model; raises InvalidPayload."""
        if isinstance(payload, self.payload_model):
            return payload
        try:
            return self.payload_model.model_validate(payload)
        except ValidationError as error:
            raise InvalidPayload(
                f"payload of job {self.name!r} does not validate as "
                f"{self.payload_model.__name__}: {error.error_count()} error(s)",
                detail=str(error),
            ) from error


def payload_model_of(fn: Callable[..., Any]) -> type[BaseModel]:
    """The pydantic model annotated on the handler's second parameter (the payload)."""
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 2:
        raise ConfigurationError(
            f"job handler {fn.__qualname__} must take (ctx, payload), not {len(params)} arguments"
        )
    hints = typing.get_type_hints(fn)
    model = hints.get(params[1].name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ConfigurationError(
            f"job handler {fn.__qualname__}: annotate the payload parameter "
            f"{params[1].name!r} with a pydantic model, or pass payload=Model"
        )
    return model


def _delay_s(delay: float | timedelta | None) -> float | None:
    if delay is None:
        return None
    return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


class JobHandle(Generic[P]):
    """What `@app.job` returns: call it to run the handler inline, or enqueue it."""

    def __init__(self, app: App, definition: JobDefinition[P]) -> None:
        self.app = app
        self.definition = definition

    @property
    def name(self) -> str:
        return self.definition.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.definition.fn(*args, **kwargs)

    def spec(
        self,
        payload: P | Mapping[str, Any],
        *,
        key: str,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        on_conflict: typing.Literal["return", "error"] | None = None,
        traceparent: str | None = None,
        group: str | None = None,
        singleton: bool | None = None,
        debounce: float | timedelta | None = None,
        throttle: tuple[int, float | timedelta] | None = None,
    ) -> JobSpec:
        """The JobSpec for one enqueue; validates the payload (raises InvalidPayload).

        `group` names the group that `singleton`, `debounce` and `throttle` act on
        (default: every job of this name): `singleton=True` answers the group's live
        singleton job instead of a new one; `debounce=s` collapses enqueues of the
        group within s seconds into one run with the latest payload, s after the last;
        `throttle=(n, s)` starts at most n of the group per s seconds
        (docs/howto-limits.md)."""
        d = self.definition
        model = d.parse_payload(payload)
        rate = None if throttle is None else Rate.of(throttle, "throttle")
        return JobSpec(
            name=d.name, key=key, payload=model.model_dump(mode="json"),
            queue=queue or d.queue, tenant=tenant,
            priority=d.priority if priority is None else priority,
            run_at=run_at, delay_s=_delay_s(delay),
            max_attempts=d.retry.max_attempts, retry_base_s=d.retry.base_s,
            retry_cap_s=d.retry.cap_s, retry_jitter=d.retry.jitter,
            dead_letter=d.retry.dead_letter, timeout_s=d.timeout_s,
            on_conflict=on_conflict, traceparent=traceparent, group_key=group,
            singleton=singleton or None, debounce_s=_delay_s(debounce),
            throttle_n=rate and rate.n, throttle_per_s=rate and rate.per_s,
        )

    def enqueue(self, payload: P | Mapping[str, Any], *, key: str, conn: Any = None,
                **options: Any) -> Enqueued:
        """Enqueue one job. With `conn` (a psycopg connection, or a SQLAlchemy Session
        or Connection) the job is written in that transaction and exists only if it
        commits; without it, on the app's pool in its own transaction."""
        call = queries.enqueue_spec(self.spec(payload, key=key, **options))
        return run_in(self.app, conn, [call])[0]

    def enqueue_many(self, items: Sequence[tuple[P | Mapping[str, Any], str]], *,
                     conn: Any = None, **options: Any) -> list[Enqueued]:
        """Enqueue many `(payload, key)` pairs: all validated first, then written in
        chunks of 1,000 inside one transaction (all or nothing)."""
        specs = [self.spec(payload, key=key, **options) for payload, key in items]
        return [e for chunk in run_in(self.app, conn, queries.enqueue_chunks(specs))
                for e in chunk]

    async def enqueue_async(self, payload: P | Mapping[str, Any], *, key: str,
                            conn: Any = None, **options: Any) -> Enqueued:
        """`enqueue` for asyncio code (an AsyncConnection or AsyncSession as `conn`)."""
        call = queries.enqueue_spec(self.spec(payload, key=key, **options))
        return (await run_in_async(self.app, conn, [call]))[0]

    async def enqueue_many_async(self, items: Sequence[tuple[P | Mapping[str, Any], str]], *,
                                 conn: Any = None, **options: Any) -> list[Enqueued]:
        specs = [self.spec(payload, key=key, **options) for payload, key in items]
        chunks = await run_in_async(self.app, conn, queries.enqueue_chunks(specs))
        return [e for chunk in chunks for e in chunk]

    # -- transactional outbox (sql/70_outbox.sql, sqljobs.relay) ----------------------

    def _staged_spec(self, payload: P | Mapping[str, Any], key: str,
                     ordering_key: str | None, options: dict[str, Any]) -> dict[str, Any]:
        spec = self.spec(payload, key=key, **options).to_sql()
        if ordering_key is not None:
            spec["ordering_key"] = ordering_key
        return spec

    def stage(self, payload: P | Mapping[str, Any], *, key: str, conn: Any = None,
              ordering_key: str | None = None, **options: Any) -> Staged:
        """Stage one job in the outbox: written in `conn`'s transaction (or on the pool),
        published as a job by a relay (`sqljobs relay`) once that transaction commits.

        The answer's id IS the future job's id. A key that already has a job or a staged
        row answers that id as `deduped`. Rows sharing an `ordering_key` are published
        in the order they were staged. Takes enqueue's options but `on_conflict`.
        """
        call = queries.stage_many([self._staged_spec(payload, key, ordering_key, options)])
        return run_in(self.app, conn, [call])[0][0]

    def stage_many(self, items: Sequence[tuple[P | Mapping[str, Any], str]], *,
                   conn: Any = None, ordering_key: str | None = None,
                   **options: Any) -> list[Staged]:
        """Stage many `(payload, key)` pairs in one transaction (all or nothing)."""
        specs = [self._staged_spec(payload, key, ordering_key, options) for payload, key in items]
        return [s for chunk in run_in(self.app, conn, queries.stage_chunks(specs)) for s in chunk]

    async def stage_async(self, payload: P | Mapping[str, Any], *, key: str, conn: Any = None,
                          ordering_key: str | None = None, **options: Any) -> Staged:
        """`stage` for asyncio code (an AsyncConnection or AsyncSession as `conn`)."""
        call = queries.stage_many([self._staged_spec(payload, key, ordering_key, options)])
        return (await run_in_async(self.app, conn, [call]))[0][0]
