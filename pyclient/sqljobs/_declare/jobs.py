"""Job declarations: `@app.job(...)` turns a function into a `JobHandle`.

A handler takes `(ctx, payload)`; the payload is a pydantic model, validated when the
job is enqueued (nothing is written for a bad payload) and again in the worker (a
payload that no longer validates fails the job terminally with a coded reason).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from sqljobs._client import queries
from sqljobs._client.errors import ConfigurationError, InvalidPayload, TenantPolicyRefused
from sqljobs._client.producing import Sending, installed, producing
from sqljobs._client.records import Enqueued, Jitter, JobSpec, Staged
from sqljobs._client.redaction import Redaction
from sqljobs._client.transactions import ClientSource, run_actor, run_in, run_in_async
from sqljobs._declare.limits import Rate
from sqljobs._declare.redaction import payload_json, redaction_of

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
    hooks: dict[str, dict[str, str]] | None = None  # {"settled"|"exhausted": {name, queue}}
    progress_every_s: float = 1.0  # ctx.progress writes at most once per this interval
    tenant_policy: typing.Literal["required", "forbidden"] | None = None

    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @functools.cached_property
    def redaction(self) -> Redaction:
        """The payload's sensitive and personal paths (sqljobs._declare.redaction)."""
        return redaction_of(self.payload_model)

    @functools.cached_property
    def _payload_list(self) -> TypeAdapter[list[P]]:
        return TypeAdapter(list[self.payload_model])  # type: ignore[name-defined]

    def parse_payloads(self, payloads: Sequence[Any]) -> list[P]:
        """`parse_payload` of each, in one pass; raises InvalidPayload for the first
        payload that does not validate, as `parse_payload` would."""
        try:
            return self._payload_list.validate_python(payloads)
        except ValidationError:
            return [self.parse_payload(payload) for payload in payloads]

    def payloads_json(self, models: Sequence[P]) -> str:
        """The payloads as stored (`payload_json` of each), as the text of one JSON array."""
        if self.redaction.sensitive:  # their SecretStr values, revealed
            return json.dumps([payload_json(model) for model in models])
        return self._payload_list.dump_json(list(models)).decode()

    def parse_payload(self, payload: Any) -> P:
        """The payload as the declared model; raises InvalidPayload."""
        if isinstance(payload, self.payload_model):
            return payload
        try:
            return self.payload_model.model_validate(payload)
        except ValidationError as error:
            # pydantic's text echoes (and may cut short) each input: a model with
            # sensitive fields gets the errors without their inputs.
            detail = str(error) if not self.redaction.sensitive else "\n".join(
                f"{'.'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']} [type={e['type']}]"
                for e in error.errors(include_url=False, include_input=False,
                                      include_context=False))
            raise InvalidPayload(
                f"payload of job {self.name!r} does not validate as "
                f"{self.payload_model.__name__}: {error.error_count()} error(s)",
                detail=detail,
            ) from None if self.redaction.sensitive else error


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


def _actor_json(actor: Any) -> Any:
    """An actor as the spec sends it (a mapping as a dict); the SQL checks the rest."""
    return dict(actor) if isinstance(actor, Mapping) else actor


class JobHandle(Generic[P]):
    """What `@app.job` returns: call it to run the handler inline, or enqueue it."""

    def __init__(self, app: ClientSource, definition: JobDefinition[P]) -> None:
        self.app = app  # where it enqueues when no connection is given
        self.definition = definition
        # as_(): on whose behalf it enqueues (None: its caller's run's, if any)
        self.actor: str | Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.definition.name

    def as_(self, actor: str | Mapping[str, Any]) -> JobHandle[P]:
        """This handle, enqueuing (and staging) on behalf of `actor`: who asked for the
        job, a user or service id as a string or a small JSON object (at most 512 bytes
        as JSON; anything else is refused with `InvalidActor`, nothing written).

            send_report.as_({"user": "42"}).enqueue({"day": "2030-01-02"}, key="r-42")

        The job stores it, its handler reads it as `ctx.actor`, and what its run
        enqueues, stages, emits or invokes inherits it. The caller's word, like a label:
        not authentication (docs/howto-hooks.md). An `actor=` option wins over it."""
        bound = copy.copy(self)
        bound.actor = actor
        return bound

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
        actor: str | Mapping[str, Any] | None = None,
    ) -> JobSpec:
        """The JobSpec for one enqueue; validates the payload (raises InvalidPayload).

        `group` names the group that `singleton`, `debounce` and `throttle` act on
        (default: every job of this name): `singleton=True` answers the group's live
        singleton job instead of a new one; `debounce=s` collapses enqueues of the
        group within s seconds into one run with the latest payload, s after the last;
        `throttle=(n, s)` starts at most n of the group per s seconds
        (docs/howto-limits.md).

        `actor` says who asked for the job (see `as_`); none given: the handle's
        (`as_`), else, inside a handler, its run's."""
        d = self.definition
        if d.tenant_policy == "forbidden" and tenant is not None:  # (the SQL refuses it too)
            raise TenantPolicyRefused(f"job type {d.name} forbids a tenant and one was given",
                                      hint="enqueue it without a tenant")
        model = d.parse_payload(payload)
        rate = None if throttle is None else Rate.of(throttle, "throttle")
        return JobSpec(
            name=d.name, key=key, payload=payload_json(model),
            queue=queue or d.queue, tenant=tenant,
            priority=d.priority if priority is None else priority,
            run_at=run_at, delay_s=_delay_s(delay),
            max_attempts=d.retry.max_attempts, retry_base_s=d.retry.base_s,
            retry_cap_s=d.retry.cap_s, retry_jitter=d.retry.jitter,
            dead_letter=d.retry.dead_letter, timeout_s=d.timeout_s,
            on_conflict=on_conflict, traceparent=traceparent, group_key=group,
            singleton=singleton or None, debounce_s=_delay_s(debounce),
            throttle_n=rate and rate.n, throttle_per_s=rate and rate.per_s,
            hooks=d.hooks, actor=_actor_json(
                actor if actor is not None else self.actor if self.actor is not None
                else run_actor()),
        )

    def enqueue(self, payload: P | Mapping[str, Any], *, key: str, conn: Any = None,
                **options: Any) -> Enqueued:
        """Enqueue one job. With `conn` (a psycopg connection, or a SQLAlchemy Session
        or Connection) the job is written in that transaction and exists only if it
        commits; without it, on the app's pool in its own transaction."""
        with producing("enqueue", [self.spec(payload, key=key, **options)]) as sending:
            answer = run_in(self.app, conn, [queries.enqueue_spec(sending.specs[0])])[0]
            sending.enqueued([answer.id])
        return answer

    def enqueue_many(self, items: Sequence[tuple[P | Mapping[str, Any], str]], *,
                     conn: Any = None, **options: Any) -> list[Enqueued]:
        """Enqueue many `(payload, key)` pairs: all validated first, then written in
        chunks of 1,000 inside one transaction (all or nothing)."""
        if not items:
            return []
        if installed() is None:
            return [e for chunk in run_in(self.app, conn, self._batches(items, options))
                    for e in chunk]
        specs = [self.spec(payload, key=key, **options) for payload, key in items]
        with producing("enqueue", specs) as sending:
            answers = [e for chunk in run_in(self.app, conn, queries.enqueue_chunks(
                sending.specs)) for e in chunk]
            sending.enqueued([e.id for e in answers])
        return answers

    def _batches(self, items: Sequence[tuple[P | Mapping[str, Any], str]],
                 options: Mapping[str, Any]) -> list[queries.Call[list[Enqueued]]]:
        """The items as jobs.enqueue_batch calls of ENQUEUE_CHUNK jobs: the spec they
        share (what `spec` makes of their options), then their keys and their payloads,
        validated and serialised in one pass each. A producer hook (tracing) sees every
        spec, so with one installed the items go as specs (jobs.enqueue_many) instead."""
        payloads = self.definition.parse_payloads([payload for payload, _ in items])
        keys = [key for _, key in items]
        shared = self.spec(payloads[0], key=keys[0], **options).to_sql()
        del shared["key"], shared["payload"]
        chunk = queries.ENQUEUE_CHUNK
        return [queries.enqueue_batch(shared, keys[i:i + chunk],
                                      self.definition.payloads_json(payloads[i:i + chunk]))
                for i in range(0, len(keys), chunk)]

    async def enqueue_async(self, payload: P | Mapping[str, Any], *, key: str,
                            conn: Any = None, **options: Any) -> Enqueued:
        """`enqueue` for asyncio code (an AsyncConnection or AsyncSession as `conn`)."""
        with producing("enqueue", [self.spec(payload, key=key, **options)]) as sending:
            call = queries.enqueue_spec(sending.specs[0])
            answer = (await run_in_async(self.app, conn, [call]))[0]
            sending.enqueued([answer.id])
        return answer

    async def enqueue_many_async(self, items: Sequence[tuple[P | Mapping[str, Any], str]], *,
                                 conn: Any = None, **options: Any) -> list[Enqueued]:
        """`enqueue_many` for asyncio code."""
        if not items:
            return []
        if installed() is None:
            return [e for chunk in await run_in_async(self.app, conn, self._batches(items, options))
                    for e in chunk]
        specs = [self.spec(payload, key=key, **options) for payload, key in items]
        with producing("enqueue", specs) as sending:
            chunks = await run_in_async(self.app, conn, queries.enqueue_chunks(sending.specs))
            answers = [e for chunk in chunks for e in chunk]
            sending.enqueued([e.id for e in answers])
        return answers

    # -- transactional outbox (sql/70_outbox.sql, sqljobs.relay) ----------------------

    def _staged(self, sending: Sending, ordering_key: str | None) -> list[dict[str, Any]]:
        staged = [spec.to_sql() for spec in sending.specs]
        if ordering_key is not None:
            for spec in staged:
                spec["ordering_key"] = ordering_key
        return staged

    def stage(self, payload: P | Mapping[str, Any], *, key: str, conn: Any = None,
              ordering_key: str | None = None, **options: Any) -> Staged:
        """Stage one job in the outbox: written in `conn`'s transaction (or on the pool),
        published as a job by a relay (`sqljobs relay`) once that transaction commits.

        The answer's id IS the future job's id. A key that already has a job or a staged
        row answers that id as `deduped`. Rows sharing an `ordering_key` are published
        in the order they were staged. Takes enqueue's options but `on_conflict`.
        """
        with producing("stage", [self.spec(payload, key=key, **options)]) as sending:
            call = queries.stage_many(self._staged(sending, ordering_key))
            answer = run_in(self.app, conn, [call])[0][0]
            sending.enqueued([answer.id])
        return answer

    def stage_many(self, items: Sequence[tuple[P | Mapping[str, Any], str]], *,
                   conn: Any = None, ordering_key: str | None = None,
                   **options: Any) -> list[Staged]:
        """Stage many `(payload, key)` pairs in one transaction (all or nothing)."""
        specs = [self.spec(payload, key=key, **options) for payload, key in items]
        with producing("stage", specs) as sending:
            calls = queries.stage_chunks(self._staged(sending, ordering_key))
            answers = [s for chunk in run_in(self.app, conn, calls) for s in chunk]
            sending.enqueued([s.id for s in answers])
        return answers

    async def stage_async(self, payload: P | Mapping[str, Any], *, key: str, conn: Any = None,
                          ordering_key: str | None = None, **options: Any) -> Staged:
        """`stage` for asyncio code (an AsyncConnection or AsyncSession as `conn`)."""
        with producing("stage", [self.spec(payload, key=key, **options)]) as sending:
            call = queries.stage_many(self._staged(sending, ordering_key))
            answer = (await run_in_async(self.app, conn, [call]))[0][0]
            sending.enqueued([answer.id])
        return answer
