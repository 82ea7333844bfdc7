"""`App`: where an application's connection settings live.

An App owns a connection pool and checks, when it opens, that the database carries the
schema version this client needs. The runtime (declarations, worker) builds on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from psycopg_pool import AsyncConnectionPool, ConnectionPool
from pydantic import BaseModel

from sqljobs.client import queries
from sqljobs.client.connection import AsyncClient, Client
from sqljobs.client.database import (
    SCHEMA_MISSING,
    check_schema_version,
    needs_floor,
    redacted_dsn,
    resolve_dsn,
)
from sqljobs.client.errors import ConfigurationError, UnknownJob
from sqljobs.declare.jobs import JobDefinition, JobHandle, RetryPolicy, payload_model_of
from sqljobs.declare.limits import KeyLimit, Limit, RateArg, job_limits
from sqljobs.declare.tasks import TaskDefinition

if TYPE_CHECKING:
    from sqljobs.client.locks import AsyncLock, Lock
    from sqljobs.declare.limits import Limits, Rate
    from sqljobs.declare.schedules import Schedules

class App:
    """A sqljobs application: connection settings, a pool, and (later) declarations."""

    def __init__(self, dsn: str | None = None, *, min_size: int = 1, max_size: int = 10) -> None:
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool: ConnectionPool[Any] | None = None
        self._async_pool: AsyncConnectionPool[Any] | None = None
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
        """
        policy = retry or RetryPolicy()
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
                terminal=terminal,
            )
            limits = job_limits(job_name, definition.payload_model, concurrency, rate, limit)
            for each in limits:
                self._declare_limit(each)
            handle: JobHandle[Any] = JobHandle(self, definition)
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
    def limits(self) -> Limits:
        """Manage the limits stored in the database (see `sqljobs.declare.limits`)."""
        from sqljobs.declare.limits import Limits

        return Limits(self)

    # -- locks ------------------------------------------------------------------------

    def lock(self, name: str, *, ttl: float = 30.0, timeout: float | None = None,
             holder: str | None = None) -> Lock:
        """A fenced lock on the named lease: `with app.lock("export") as lock:`. Waits
        for it (`timeout` seconds at most: LockBusy), renews it in the background, and
        exposes `lock.token` and `lock.check()`; see `sqljobs.client.locks`."""
        from sqljobs.client.locks import Lock

        return Lock(self.client.run, name, ttl_s=ttl, timeout=timeout, holder=holder)

    def lock_async(self, name: str, *, ttl: float = 30.0, timeout: float | None = None,
                   holder: str | None = None) -> AsyncLock:
        """`lock` for asyncio code (`async with app.lock_async("export") as lock:`): a
        lost lease cancels the task inside the block, which raises LockLost."""
        from sqljobs.client.locks import AsyncLock

        return AsyncLock(self.async_client.run, name, ttl_s=ttl, timeout=timeout,
                         holder=holder)

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
    ) -> Callable[[Callable[..., Any]], JobHandle[Any]]:
        """Declare a task, a job with a schedule: `@app.task(cron="*/5 * * * *")`.

        `cron` has five fields, or six with seconds first; it is read in `timezone` (an
        IANA name). `catch_up` says what the scheduler fires after downtime: "all" the
        missed occurrences, the "latest" one only, or "none". A bad cron expression, time
        zone, policy or payload is refused here (ConfigurationError / InvalidPayload).
        The other arguments are `app.job`'s; see `sqljobs.declare.tasks`.
        """
        from sqljobs.declare.cron import Cron
        from sqljobs.declare.tasks import adapt_handler, check_catch_up

        schedule = Cron(cron, timezone)
        policy = check_catch_up(catch_up)

        def declare(fn: Callable[..., Any]) -> JobHandle[Any]:
            handler, model = adapt_handler(fn)
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            if task_name in self._tasks:
                raise ConfigurationError(f"a task named {task_name!r} is already declared")
            handle = self.job(name=task_name, queue=queue, retry=retry, timeout=timeout,
                              priority=priority, dead_letter=dead_letter, terminal=terminal,
                              payload=model)(handler)
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

    @property
    def schedules(self) -> Schedules:
        """Manage the schedules stored in the database (see `sqljobs.declare.schedules`)."""
        from sqljobs.declare.schedules import Schedules

        return Schedules(self)

    @property
    def dsn(self) -> str:
        return resolve_dsn(self._dsn)

    def _pool_kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "prepare_threshold": 0}

    # -- sync -------------------------------------------------------------------------

    def open(self) -> Self:
        """Open the pool and check the schema version (raises SchemaError)."""
        if self._pool is None:
            pool: ConnectionPool[Any] = ConnectionPool(
                self.dsn, min_size=self._min_size, max_size=self._max_size,
                kwargs=self._pool_kwargs(), open=False,
            )
            pool.open(wait=True)
            try:
                try:
                    installed = Client(pool).run(queries.schema_version())
                except SCHEMA_MISSING:
                    installed = None
                floor = (Client(pool).run(queries.schema_floor()) if needs_floor(installed)
                         else None)
                check_schema_version(installed, redacted_dsn(self.dsn), floor)
            except BaseException:
                pool.close()
                raise
            self._pool = pool
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def client(self) -> Client:
        """A client on the app's pool (opens the app on first use)."""
        self.open()
        assert self._pool is not None
        return Client(self._pool)

    # -- async ------------------------------------------------------------------------

    async def open_async(self) -> Self:
        """Open the asyncio pool and check the schema version (raises SchemaError)."""
        if self._async_pool is None:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.dsn, min_size=self._min_size, max_size=self._max_size,
                kwargs=self._pool_kwargs(), open=False,
            )
            await pool.open(wait=True)
            try:
                try:
                    installed = await AsyncClient(pool).run(queries.schema_version())
                except SCHEMA_MISSING:
                    installed = None
                floor = None
                if needs_floor(installed):
                    floor = await AsyncClient(pool).run(queries.schema_floor())
                check_schema_version(installed, redacted_dsn(self.dsn), floor)
            except BaseException:
                await pool.close()
                raise
            self._async_pool = pool
        return self

    async def close_async(self) -> None:
        if self._async_pool is not None:
            await self._async_pool.close()
            self._async_pool = None

    async def __aenter__(self) -> Self:
        return await self.open_async()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close_async()

    @property
    def async_client(self) -> AsyncClient:
        """A client on the app's asyncio pool; `await app.open_async()` first."""
        if self._async_pool is None:
            raise ConfigurationError("the async pool is not open: await app.open_async() first")
        return AsyncClient(self._async_pool)

    # -- worker -----------------------------------------------------------------------

    def run_worker(self, queues: list[str] | None = None, concurrency: int = 10,
                   **options: Any) -> int:
        """Run a worker for this app's jobs until SIGTERM/SIGINT (see `sqljobs.runtime.worker`).

        `queues` defaults to every queue the declared jobs use. Answers the exit code:
        0 after a drain, 1 after a forced stop.
        """
        from sqljobs.runtime.worker import Worker

        return Worker(self, queues, concurrency, **options).run()

    async def run_worker_async(self, queues: list[str] | None = None, concurrency: int = 10,
                               **options: Any) -> int:
        """`run_worker` inside a running event loop."""
        from sqljobs.runtime.worker import Worker

        return await Worker(self, queues, concurrency, **options).run_async()

    # -- results ----------------------------------------------------------------------

    def result(self, job_id: int, timeout: float | None = None) -> Any:
        """Wait for job `job_id` to finish and answer its result (see `sqljobs.client.results`).

        Raises JobFailed / JobDead / JobCancelled when it ended without succeeding,
        ResultTimeout when `timeout` seconds pass first, JobNotFound for an unknown id.
        """
        from sqljobs.client.results import wait_result

        return wait_result(self.dsn, job_id, timeout)

    async def result_async(self, job_id: int, timeout: float | None = None) -> Any:
        """`result` for asyncio code."""
        from sqljobs.client.results import wait_result_async

        return await wait_result_async(self.dsn, job_id, timeout)

    # -- events -----------------------------------------------------------------------

    def emit_event(self, name: str, payload: Mapping[str, Any] | None = None, *,
                   conn: Any = None) -> int:
        """Emit an event (`jobs.emit_event`): wakes every job waiting for a matching one.

        With `conn` (psycopg, or a SQLAlchemy Session/Connection) it is emitted inside
        that transaction and counts only if it commits. Answers the event id.
        """
        from sqljobs.client.transactions import run_in

        return run_in(self, conn, [queries.emit_event(name, payload)])[0]

    async def emit_event_async(self, name: str, payload: Mapping[str, Any] | None = None, *,
                               conn: Any = None) -> int:
        """`emit_event` for asyncio code."""
        from sqljobs.client.transactions import run_in_async

        return (await run_in_async(self, conn, [queries.emit_event(name, payload)]))[0]
