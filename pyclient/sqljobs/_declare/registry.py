"""The declarations of an application: `@app.job`, `@app.task`, `app.limit`.

A `Registry` only records what code declares; it opens no connection. Its handles
enqueue through the `ClientSource` it was made with (an `App`'s pools).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from sqljobs._client.errors import ConfigurationError, UnknownJob
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobDefinition, JobHandle, RetryPolicy, payload_model_of
from sqljobs._declare.limits import KeyLimit, Limit, RateArg, job_limits
from sqljobs._declare.tasks import TaskDefinition

if TYPE_CHECKING:
    from sqljobs._declare.limits import Rate


def hook_of(target: JobHandle[Any] | str) -> dict[str, str]:
    """A settlement hook as the spec stores it: the job's name, and its queue if declared."""
    if isinstance(target, JobHandle):
        queue = target.definition.queue
        return {"name": target.name, **({"queue": queue} if queue else {})}
    if not isinstance(target, str) or not target:
        raise ConfigurationError("a hook is a job handle or a job name")
    return {"name": target}


class Registry:
    """Jobs, tasks and limits declared in code, by name (a duplicate name is refused)."""

    def __init__(self, source: ClientSource) -> None:
        self._source = source  # where the handles enqueue
        self._jobs: dict[str, JobHandle[Any]] = {}
        self._tasks: dict[str, TaskDefinition] = {}
        self._limits: dict[str, Limit] = {}

    # -- declarations -----------------------------------------------------------------

    def job(
        self,
        *,
        name: str | None = None,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        dead_letter: bool | None = None,
        terminal: tuple[type[BaseException], ...] = (),
        payload: type[BaseModel] | None = None,
        concurrency: int | None = None,
        rate: Rate | RateArg | None = None,
        limit: KeyLimit | Sequence[KeyLimit] | None = None,
        on_settled: JobHandle[Any] | str | None = None,
        on_exhausted: JobHandle[Any] | str | None = None,
        progress_every: float = 1.0,
        tenant: Literal["required", "forbidden"] | None = None,
    ) -> Callable[[Callable[..., Any]], JobHandle[Any]]:
        """Declare a job: `@app.job(queue="mail", retry=RetryPolicy(max_attempts=5))`.

        The handler takes `(ctx, payload)`, sync or async; the payload's pydantic model
        comes from its annotation (or `payload=`). `terminal` exceptions fail the job at
        once; any other exception is retried by the policy. A second job with the same
        name is refused here. What is left None (queue, priority, the policy's fields)
        takes the engine's default (`jobs.spec_defaults()`: queue "default", priority 0).

        Limits, held by the claim across every worker (docs/howto-limits.md):
        `concurrency` runs of this job at once, `rate=(n, seconds)` starts per window,
        and `limit=key("field", n)` per value of a payload field (see `sqljobs.key`).

        Settlement hooks, staged durably by the statement that settles the job
        (docs/howto-hooks.md): `on_settled` runs once per final state it reaches,
        `on_exhausted` when it is dead or failed with its attempts used up. Each is a job
        (its handle, or its name) taking a `sqljobs.SettledJob` payload.

        `ctx.progress(...)` writes at most once per `progress_every` seconds (the last
        value wins; the one kept is written before the outcome).

        `tenant="required"` refuses an enqueue that names no tenant (a tenant-bound
        session always names its own), `"forbidden"` one that names a tenant: with
        `TenantPolicyRefused` (SJ022), before any write, once a worker has registered
        the declaration (docs/howto-roles.md).
        """
        if tenant not in (None, "required", "forbidden"):
            raise ConfigurationError('tenant must be "required", "forbidden" or None')
        policy = retry or RetryPolicy()
        if not progress_every >= 0:
            raise ConfigurationError("progress_every must be zero or more seconds")
        hooks = {kind: hook_of(target) for kind, target in
                 (("settled", on_settled), ("exhausted", on_exhausted)) if target is not None}
        if dead_letter is not None:
            policy = RetryPolicy(dead_letter=dead_letter).over(policy)
        if timeout is not None and timeout <= 0:
            raise ConfigurationError("timeout must be positive seconds")

        def declare(fn: Callable[..., Any]) -> JobHandle[Any]:
            job_name = name or f"{fn.__module__}.{fn.__qualname__}"
            if job_name in self._jobs:
                raise ConfigurationError(f"a job named {job_name!r} is already declared")
            definition: JobDefinition[Any] = JobDefinition(
                name=job_name, fn=fn, payload_model=payload or payload_model_of(fn),
                queue=queue, retry=policy, timeout_s=timeout, priority=priority,
                terminal=terminal, hooks=hooks or None, progress_every_s=progress_every,
                tenant_policy=tenant,
            )
            limits = job_limits(job_name, definition.payload_model, concurrency, rate, limit)
            for each in limits:
                self._declare_limit(each)
            handle: JobHandle[Any] = JobHandle(self._source, definition)
            self._jobs[job_name] = handle
            return handle

        return declare

    def limit(self, name: str, *, scope: str, target: str | None = None,
              concurrency: int | None = None, rate: Rate | RateArg | None = None) -> Limit:
        """Declare a limit beyond one job's: `scope` "global" (every job), "queue" (target:
        the queue), "name" (target: a job name) or "tenant" (target: one tenant, or None
        for each tenant on its own); `concurrency` running at once and/or
        `rate=(n, seconds)` starts per window. Workers write it when they start."""
        declared = Limit.build(name, scope=scope, target=target, concurrency=concurrency,
                               rate=rate)
        self._declare_limit(declared)
        return declared

    def _declare_limit(self, limit: Limit) -> None:
        if limit.name in self._limits:
            raise ConfigurationError(f"a limit named {limit.name!r} is already declared")
        self._limits[limit.name] = limit

    @property
    def declared_limits(self) -> dict[str, Limit]:
        """Limits declared in code (`app.limit`, and `@app.job`'s), by name."""
        return dict(self._limits)

    @property
    def jobs(self) -> dict[str, JobHandle[Any]]:
        """Declared jobs by name."""
        return dict(self._jobs)

    def job_handle(self, name: str) -> JobHandle[Any]:
        try:
            return self._jobs[name]
        except KeyError:
            raise UnknownJob(f"no job named {name!r} is declared on this app") from None

    def task(
        self,
        *,
        cron: str,
        timezone: str = "UTC",
        catch_up: str = "latest",
        name: str | None = None,
        payload: BaseModel | Mapping[str, Any] | None = None,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        dead_letter: bool | None = None,
        terminal: tuple[type[BaseException], ...] = (),
        on_settled: JobHandle[Any] | str | None = None,
        on_exhausted: JobHandle[Any] | str | None = None,
        tenant: Literal["required", "forbidden"] | None = None,
    ) -> Callable[[Callable[..., Any]], JobHandle[Any]]:
        """Declare a task, a job with a schedule: `@app.task(cron="*/5 * * * *")`.

        `cron` has five fields, or six with seconds first; it is read in `timezone` (an
        IANA name). `catch_up` says what the scheduler fires after downtime: "all" the
        missed occurrences, the "latest" one only, or "none". A bad cron expression, time
        zone, policy or payload is refused here (ConfigurationError / InvalidPayload).
        The other arguments are `app.job`'s.
        """
        from sqljobs._declare.cron import Cron
        from sqljobs._declare.tasks import adapt_handler, check_catch_up

        schedule = Cron(cron, timezone)
        policy = check_catch_up(catch_up)

        def declare(fn: Callable[..., Any]) -> JobHandle[Any]:
            handler, model = adapt_handler(fn)
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            if task_name in self._tasks:
                raise ConfigurationError(f"a task named {task_name!r} is already declared")
            handle = self.job(name=task_name, queue=queue, retry=retry, timeout=timeout,
                              priority=priority, dead_letter=dead_letter, terminal=terminal,
                              payload=model, on_settled=on_settled,
                              on_exhausted=on_exhausted, tenant=tenant)(handler)
            spec = handle.spec(payload if payload is not None else {}, key="-").to_sql()
            options = {k: v for k, v in spec.items() if k not in ("name", "key", "payload")}
            self._tasks[task_name] = TaskDefinition(
                name=task_name, job=task_name, cron=schedule, catch_up=policy,
                payload=spec.get("payload") or {}, options=options)
            return handle

        return declare

    @property
    def tasks(self) -> dict[str, TaskDefinition]:
        """Declared tasks (schedules) by name."""
        return dict(self._tasks)


__all__ = ["Registry"]
