"""`App`: an application's declarations and its database, and what starts a worker.

    app = sqljobs.App("postgresql://...")     # or $SQLJOBS_DSN / $DATABASE_URL

    @app.job(queue="mail")
    async def send_email(ctx: sqljobs.JobContext, mail: Mail) -> None: ...

An App is a declaration registry (`@app.job`, `@app.task`, `app.limit`;
sqljobs._declare.registry) over the application's connection pools
(sqljobs._client.pools: opened on first use, the schema checked as they open), with
the run-time faces that use them: locks, results, events, the limits and schedules
stored in the database, and starting a worker in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel

from sqljobs._app.backfills import (
    Backfill,
    BackfillHandle,
    Batch,
    PageFn,
    declare_backfill,
    environment_of,
)
from sqljobs._app.consumers import ConsumerBatch, ConsumerHandle, Source, declare_consumer
from sqljobs._app.ledger import LedgerHandle, declare_ledger
from sqljobs._app.maintenance import (
    PurgeHandle,
    PurgeTable,
    Rollup,
    declare_purge,
    declare_refresh,
    declare_rollup,
)
from sqljobs._app.partitions import Every, Partitions, declare_partitions
from sqljobs._app.search import Document, SearchIndex, declare_reindex
from sqljobs._app.subjects import Subjects, SubjectTable
from sqljobs._app.transfer import (
    Export,
    Format,
    Import,
    ImportPage,
    declare_export,
    declare_import,
)
from sqljobs._app.webhook_receiver import (
    DEFAULT_MAX_BYTES,
    Verify,
    WebhookReceiver,
    declare_receiver,
)
from sqljobs._app.webhooks import Endpoint, WebhookHandle, declare_webhook
from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.pools import Pools
from sqljobs._declare.jobs import JobHandle, RetryPolicy
from sqljobs._declare.registry import Registry

if TYPE_CHECKING:
    from sqljobs._app.limits import Limits
    from sqljobs._app.schedules import Schedules
    from sqljobs._client.locks import AsyncLock, Lock


class App(Registry):
    """A sqljobs application: what it declares, and the pools its calls run on."""

    def __init__(self, dsn: str | None = None, *, min_size: int = 1, max_size: int = 10,
                 environment: str | None = None, code_version: str | None = None) -> None:
        """`code_version` (a release id) routes a rolling deploy: this app's workers
        claim only jobs first claimed by the same version, or never claimed, and record
        it on a job's first claim (docs/howto-deploying.md)."""
        super().__init__(self)
        if code_version is not None and not (isinstance(code_version, str) and code_version
                                             and len(code_version.encode()) <= 200):
            raise ConfigurationError("code_version must be a non-empty string of at most "
                                     "200 bytes")
        self._code_version = code_version
        self.pools = Pools(dsn, min_size=min_size, max_size=max_size)
        self.given_environment = environment
        self._backfills: dict[str, BackfillHandle] = {}
        self._purges: dict[str, PurgeHandle] = {}
        self._purged_tables: set[str] = set()
        self._factories: dict[str, dict[str, Any]] = {}
        self._subjects = Subjects(self)

    @property
    def environment(self) -> str:
        """Where this app runs, for the backfill ledger: the `environment` given, else
        $SQLJOBS_ENVIRONMENT, else "default"."""
        return environment_of(self.given_environment)

    # -- the database -------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The DSN given, else $SQLJOBS_DSN, else $DATABASE_URL."""
        return self.pools.dsn

    @property
    def code_version(self) -> str | None:
        """The release of this app's code its workers route by (None: no routing)."""
        return self._code_version

    def open(self) -> Self:
        """Open the pool and check the schema version (raises SchemaError)."""
        self.pools.open()
        return self

    def close(self) -> None:
        self.pools.close()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def client(self) -> Client:
        """A client on the app's pool (opens the app on first use)."""
        return self.pools.client

    async def open_async(self) -> Self:
        """Open the asyncio pool and check the schema version (raises SchemaError)."""
        await self.pools.open_async()
        return self

    async def close_async(self) -> None:
        await self.pools.close_async()

    async def __aenter__(self) -> Self:
        return await self.open_async()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close_async()

    @property
    def async_client(self) -> AsyncClient:
        """A client on the app's asyncio pool; `await app.open_async()` first."""
        return self.pools.async_client

    # -- stored limits and schedules ------------------------------------------------------

    @property
    def limits(self) -> Limits:
        """Manage the limits stored in the database (`sqljobs.Limits`)."""
        from sqljobs._app.limits import Limits

        return Limits(self)

    @property
    def schedules(self) -> Schedules:
        """Manage the schedules stored in the database (`sqljobs.Schedules`)."""
        from sqljobs._app.schedules import Schedules

        return Schedules(self)

    # -- data factories ---------------------------------------------------------------

    def backfill(
        self,
        *,
        name: str,
        source: str | None = None,
        key: str | Sequence[str] = (),
        pages: PageFn | None = None,
        batch: int = 1000,
        count: int | None = None,
        environments: Sequence[str] | None = None,
        requires: Sequence[str] = (),
        rate: float | None = None,
        queue: str | None = None,
        timeout: float | None = None,
    ) -> Callable[[Callable[[Batch], Any]], BackfillHandle]:
        """Declare a backfill over its handler `handle(batch)` (sync or async), which
        gets each page of rows at least once (docs/howto-backfills.md).

        The source is either `source`, a query read by keyset on its `key` column(s)
        (write `%(scope)s` for the run's scope, `%%` for a literal %), or `pages`, a
        function `(cursor, scope) -> (rows, next_cursor | None)` (JSON cursors).
        `batch` rows per page; `count` the rows expected in all (fewer after the last
        batch: BackfillStalled); `environments` where it may run (None: anywhere);
        `requires` backfills that must have completed in the environment first;
        `rate` batches per second at most. It is a job named `name` (`queue`,
        `timeout` as for `@app.job`); `handle.start()` enqueues a run.
        """
        keys = (key,) if isinstance(key, str) else tuple(key)

        def declare(fn: Callable[[Batch], Any]) -> BackfillHandle:
            declared = Backfill(
                name=name, handle=fn, source=source, key=keys, pages=pages, batch=batch,
                count=count, environments=None if environments is None else tuple(environments),
                requires=tuple(requires), rate=rate)
            handle = declare_backfill(self, declared, queue=queue, timeout=timeout)
            self._backfills[name] = handle
            self._factories[name] = {"kind": "backfill", "source": source or "(pages)",
                                     "batch": batch, "environments": environments,
                                     "requires": list(requires)}
            return handle

        return declare

    @property
    def backfills(self) -> dict[str, BackfillHandle]:
        """Declared backfills by name."""
        return dict(self._backfills)

    def reindex(self, name: str, *, index: SearchIndex,
                document_of: Callable[[Any], Document | None], source: str,
                key: str | Sequence[str], id_of: Callable[[Any], str] | None = None,
                batch: int = 1000, count: int | None = None,
                environments: Sequence[str] | None = None, requires: Sequence[str] = (),
                rate: float | None = None, queue: str | None = None,
                timeout: float | None = None) -> BackfillHandle:
        """Declare a backfill into a search index (docs/howto-reindex.md): each row of
        `source` becomes `document_of(row)`, upserted into `index` (a `SearchIndex`:
        `sqljobs.PostgresSearchIndex` needs no other service), or, when that is None,
        deleted from it by `id_of(row)` (default: the key's value). The checksum covers
        `document_of` too. The other arguments are `app.backfill`'s."""
        keys = (key,) if isinstance(key, str) else tuple(key)
        handle = declare_reindex(
            self, name, index=index, document_of=document_of, source=source, key=keys,
            id_of=id_of, batch=batch, count=count,
            environments=None if environments is None else tuple(environments),
            requires=tuple(requires), rate=rate, queue=queue, timeout=timeout)
        self._backfills[name] = handle
        self._factories[name] = {"kind": "reindex", "source": source, "batch": batch,
                                 "index": type(index).__name__}
        return handle

    def partitions(self, name: str, *, table: str, every: Every = "day", ahead: int = 3,
                   retention: float | timedelta | None = None, cron: str | None = None,
                   queue: str | None = None, timeout: float | None = None) -> JobHandle[Any]:
        """Declare the upkeep of `table`, partitioned by range on one date or timestamp
        column (docs/howto-partitions.md): each run creates the partitions of this
        period and `ahead` more (`<table>_pYYYYMMDD`, periods of a day, week or month,
        UTC) and detaches and drops those past `retention`, each a durable step; with
        pg_partman managing the table, `partman.run_maintenance` instead."""
        declared = Partitions(name, table, every, ahead, retention)
        handle = declare_partitions(self, declared, cron=cron, queue=queue, timeout=timeout)
        self._factories[name] = {"kind": "partitions", "table": table, "every": every,
                                 "ahead": ahead, "retention_s": declared.retention_s
                                 if retention is not None else None, "cron": cron}
        return handle

    def purge(self, name: str, tables: Sequence[PurgeTable], *, cron: str | None = None,
              queue: str | None = None, timeout: float | None = None) -> PurgeHandle:
        """Declare the retention of the app's own rows by age (docs/howto-upkeep.md):
        each `sqljobs.PurgeTable(table, column, older_than, batch=1000, where=None)` in
        its own durable step, one clock reading per pass, bounded batches. A table kept
        by another purge is refused here. With `cron`, a task; else a job to enqueue."""
        handle = declare_purge(self, name, tables, self._purged_tables, cron=cron,
                               queue=queue, timeout=timeout)
        self._purges[name] = handle
        self._factories[name] = {"kind": "purge", "tables": [
            {"table": t.table, "column": t.column, "older_than_s": t.age_s, "batch": t.batch}
            for t in tables], "cron": cron}
        return handle

    @property
    def factories(self) -> dict[str, dict[str, Any]]:
        """What each data factory declared (its job's name -> kind and settings), for
        `sqljobs describe`."""
        return {name: dict(found) for name, found in self._factories.items()}

    @property
    def purges(self) -> dict[str, PurgeHandle]:
        """Declared purges by name."""
        return dict(self._purges)

    def rollup(self, name: str, *, target: str, source: str, key: str | Sequence[str],
               cron: str | None = None, queue: str | None = None,
               timeout: float | None = None) -> JobHandle[Any]:
        """Declare a summary table `target` kept from `source` in ONE upsert per run
        (docs/howto-upkeep.md): the query's columns are the target's, `key` its unique
        key; rows whose values did not change are not written."""
        keys = (key,) if isinstance(key, str) else tuple(key)
        handle = declare_rollup(self, Rollup(name, target, source, keys), cron=cron,
                                queue=queue, timeout=timeout)
        self._factories[name] = {"kind": "rollup", "target": target, "key": list(keys),
                                 "cron": cron}
        return handle

    def refresh_view(self, view: str, *, name: str | None = None, concurrently: bool = True,
                     cron: str | None = None, queue: str | None = None,
                     timeout: float | None = None) -> JobHandle[Any]:
        """Declare `refresh materialized view [concurrently] view` (docs/howto-upkeep.md),
        under an advisory lock: a run that finds another refresh of the view in progress
        skips (`{"refreshed": false}`), so two never overlap. The job's name defaults to
        `refresh:<view>`."""
        handle = declare_refresh(self, name or f"refresh:{view}", view,
                                 concurrently=concurrently, cron=cron, queue=queue,
                                 timeout=timeout)
        self._factories[handle.name] = {"kind": "refresh_view", "view": view,
                                        "concurrently": concurrently, "cron": cron}
        return handle

    def export_rows(self, name: str, *, source: str, key: str | Sequence[str], url: str,
                    format: Format = "jsonl", page: int = 1000,
                    tenant_column: str | None = None, queue: str | None = None,
                    timeout: float | None = None) -> JobHandle[Any]:
        """Declare an export of `source` (read by keyset on `key`) to the storage `url`
        (fsspec: `file://`, `s3://`, ...; `{tenant}` is the job's tenant), one object per
        page of `page` rows named by its index (`part-000001.jsonl`); `tenant_column`
        limits a tenant's job to its rows (docs/howto-import-export.md)."""
        keys = (key,) if isinstance(key, str) else tuple(key)
        handle = declare_export(self, Export(name, source, keys, url, format, page,
                                             tenant_column), queue=queue, timeout=timeout)
        self._factories[name] = {"kind": "export", "url": url, "format": format,
                                 "page": page, "tenant_column": tenant_column}
        return handle

    def import_rows(self, name: str, *, url: str = "", format: Format = "csv",
                    page_bytes: int = 1 << 20, max_record_bytes: int = 64 << 10,
                    model: type[BaseModel] | None = None, tenant_field: str | None = None,
                    queue: str | None = None, timeout: float | None = None,
                    ) -> Callable[[Callable[[ImportPage], Any]], JobHandle[Any]]:
        """Declare an import of a CSV (header first) or JSON-lines file over its handler
        `handle(page)`, which gets each page's valid records at least once: pages of at
        most `page_bytes`, one durable step each, checkpointed at the byte offset; bad
        records are counted and located (line, byte, field, reason), never copied
        (docs/howto-import-export.md). `page_bytes < max_record_bytes` is refused."""
        def declare(fn: Callable[[ImportPage], Any]) -> JobHandle[Any]:
            spec = Import(name, fn, url, format, page_bytes, max_record_bytes, model,
                          tenant_field)
            handle = declare_import(self, spec, queue=queue, timeout=timeout)
            self._factories[name] = {"kind": "import", "url": url, "format": format,
                                     "page_bytes": page_bytes,
                                     "max_record_bytes": max_record_bytes,
                                     "tenant_field": tenant_field}
            return handle

        return declare

    # -- integrations -------------------------------------------------------------------

    def webhook(self, name: str, *, url: str, secrets: str | Sequence[str],
                tenant: str | None = None, data: type[BaseModel] | None = None,
                timeout: float = 10.0, headers: Mapping[str, str] | None = None,
                retry: RetryPolicy | None = None, queue: str | None = None,
                concurrency: int | None = None) -> WebhookHandle:
        """Declare an outbound webhook endpoint (docs/howto-webhooks.md): a job named
        `name` whose each run POSTs ONE event to `url`, signed per Standard Webhooks with
        every secret in `secrets` (`whsec_<base64>`; two while one is rotated). `tenant`
        is the endpoint's: an event of another is refused. `data` types the events'
        data (its Sensitive fields are redacted like any payload's); `timeout` is per
        request; `retry` the delivery's policy. `handle.send(type, data)` enqueues one."""
        endpoint = Endpoint(url, (secrets,) if isinstance(secrets, str) else tuple(secrets),
                            tenant, timeout, dict(headers or {}))
        handle = declare_webhook(self, name, endpoint, data=data, queue=queue, retry=retry,
                                 concurrency=concurrency)
        self._factories[name] = {"kind": "webhook", "url": url.split("?", 1)[0],
                                 "tenant": tenant, "secrets": len(endpoint.secrets)}
        return handle

    def webhook_receiver(
        self, name: str, *, secrets: str | Sequence[str] = (), verify: Verify | None = None,
        event_id: Callable[[Mapping[str, str], Any], str] | None = None,
        parse: Callable[[bytes], Any] | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
        tenant: str | None = None, queue: str | None = None,
        retry: RetryPolicy | None = None, timeout: float | None = None,
    ) -> Callable[[Callable[..., Any]], WebhookReceiver]:
        """Declare an inbound webhook over its handler `handle(ctx, event:
        sqljobs.ReceivedEvent)` (docs/howto-webhooks.md): answers an ASGI application
        that reads at most `max_bytes`, verifies the signature BEFORE parsing (Standard
        Webhooks with `secrets`, or `verify(headers, body) -> bool` with `event_id(
        headers, parsed)` for a provider's own scheme), enqueues the job `name` keyed by
        the event id (a redelivery dedupes) and only then answers 200; 503 when the
        enqueue fails. `tenant` is the tenant of the jobs it enqueues."""
        keys = (secrets,) if isinstance(secrets, str) else tuple(secrets)

        def declare(fn: Callable[..., Any]) -> WebhookReceiver:
            receiver = declare_receiver(
                self, name, fn, secrets=keys, verify=verify, max_bytes=max_bytes,
                parse=parse, event_id=event_id, tenant=tenant, queue=queue, retry=retry,
                timeout=timeout)
            self._factories[name] = {"kind": "webhook_receiver", "max_bytes": max_bytes,
                                     "scheme": "standard" if keys else "verify",
                                     "tenant": tenant}
            return receiver

        return declare

    def ledger(self, name: str, *, queue: str | None = None, retry: RetryPolicy | None = None,
               timeout: float | None = None) -> LedgerHandle:
        """Declare a double-entry ledger (docs/howto-ledger.md): postings balanced per
        currency (LedgerUnbalanced otherwise, nothing written), each written whole in
        ONE durable step, once per (ledger, tenant, key): a retried job posts once, the
        key with other lines is LedgerPostingConflict. `handle.post(key, lines)`
        enqueues its job (named `name`); `await handle.post_in(ctx, key, lines)` posts
        from inside another job; `handle.balances()` reads."""
        handle = declare_ledger(self, name, queue=queue, retry=retry, timeout=timeout)
        self._factories[name] = {"kind": "ledger"}
        return handle

    def consumer(self, name: str, *, source: Source, batch: int = 100, turns: int = 1000,
                 cron: str | None = "* * * * *", queue: str | None = None,
                 timeout: float | None = None, retry: RetryPolicy | None = None,
                 ) -> Callable[[Callable[[ConsumerBatch], Any]], ConsumerHandle]:
        """Declare a stream consumer over its handler `handle(batch)` (docs/howto-
        consumers.md): a job named `name` whose runs read `source` in turns of at most
        `batch` rows, each turn's effects (written on `batch.conn`) and cursor committed
        in ONE transaction of the app's database, until a turn finds nothing (or after
        `turns`); with `cron`, the task `<name>.supervisor` starts a run when none is
        live. `sqljobs.TableSource(table, key=...)` reads a PostgreSQL table."""
        def declare(fn: Callable[[ConsumerBatch], Any]) -> ConsumerHandle:
            handle = declare_consumer(self, name, source, fn, batch=batch, turns=turns,
                                      cron=cron, queue=queue, timeout=timeout,
                                      retry=retry)
            self._factories[name] = {"kind": "consumer", "source": type(source).__name__,
                                     "batch": batch, "cron": cron}
            return handle

        return declare

    # -- data subjects (GDPR) -------------------------------------------------------------

    def subject_of(self, job: str | JobHandle[Any], path: str) -> None:
        """Map a job type to its data subject (docs/howto-gdpr.md): `path` is the payload
        path (keys only, `customer.id`) whose value names the subject."""
        self._subjects.map_job(job, path)

    def subject_table(self, table: str, *, subject: str, columns: Sequence[str] = (),
                      erase: Literal["null", "delete"] = "null") -> None:
        """Map an app table: the rows where `subject` (a column) is the subject hold their
        data in `columns`; an erase sets those to NULL, or deletes the rows."""
        self._subjects.add_table(SubjectTable(table, subject, tuple(columns), erase))

    def subject_coverage(self) -> list[str]:
        """The declared job types with PersonalData fields and no `subject_of` mapping
        (each a gap an export or erase would miss)."""
        return self._subjects.coverage()

    def subject_export(self, subject: str) -> dict[str, Any]:
        """Everything stored about `subject` (GDPR art. 15): its jobs' personal values,
        where they occur in the job tables, the mapped tables' rows. Reads only."""
        return self._subjects.export(subject)

    def subject_erase(self, subject: str, *, actor: str | None = None,
                      vacuum: bool = False) -> dict[str, Any]:
        """Erase `subject` (GDPR art. 17) in one transaction on the schema owner's
        connection: every value found by `subject_export` replaced by "[erased]" in every
        row of the job tables, the mapped tables' columns nulled (or rows deleted), and
        an audit row (`jobs.subject_audit`: who, when, counts and paths, never values).
        Answers what was erased, with the audit id."""
        return self._subjects.erase(subject, actor=actor, vacuum=vacuum)

    # -- locks ------------------------------------------------------------------------

    def lock(self, name: str, *, ttl: float = 30.0, timeout: float | None = None,
             holder: str | None = None) -> Lock:
        """A fenced lock on the named lease: `with app.lock("export") as lock:`. Waits
        for it (`timeout` seconds at most: LockBusy), renews it in the background, and
        exposes `lock.token` and `lock.check()` (`sqljobs.Lock`)."""
        from sqljobs._client.locks import Lock

        return Lock(self.client.run, name, ttl_s=ttl, timeout=timeout, holder=holder)

    def lock_async(self, name: str, *, ttl: float = 30.0, timeout: float | None = None,
                   holder: str | None = None) -> AsyncLock:
        """`lock` for asyncio code (`async with app.lock_async("export") as lock:`): a
        lost lease cancels the task inside the block, which raises LockLost."""
        from sqljobs._client.locks import AsyncLock

        return AsyncLock(self.async_client.run, name, ttl_s=ttl, timeout=timeout,
                         holder=holder)

    # -- worker -----------------------------------------------------------------------

    def run_worker(self, queues: list[str] | None = None, concurrency: int = 10,
                   **options: Any) -> int:
        """Run a worker for this app's jobs until SIGTERM/SIGINT (`sqljobs.Worker`).

        `queues` defaults to every queue the declared jobs use. Answers the exit code:
        0 after a drain, 1 after a forced stop.
        """
        from sqljobs._runtime.worker import Worker

        return Worker(self, queues, concurrency, **options).run()

    async def run_worker_async(self, queues: list[str] | None = None, concurrency: int = 10,
                               **options: Any) -> int:
        """`run_worker` inside a running event loop."""
        from sqljobs._runtime.worker import Worker

        return await Worker(self, queues, concurrency, **options).run_async()

    # -- results ----------------------------------------------------------------------

    def result(self, job_id: int, timeout: float | None = None) -> Any:
        """Wait for job `job_id` to finish and answer its result.

        Raises JobFailed / JobDead / JobCancelled when it ended without succeeding,
        ResultTimeout when `timeout` seconds pass first, JobNotFound for an unknown id.
        """
        from sqljobs._client.results import wait_result

        return wait_result(self.dsn, job_id, timeout)

    async def result_async(self, job_id: int, timeout: float | None = None) -> Any:
        """`result` for asyncio code."""
        from sqljobs._client.results import wait_result_async

        return await wait_result_async(self.dsn, job_id, timeout)

    # -- events -----------------------------------------------------------------------

    def emit_event(self, name: str, payload: Mapping[str, Any] | None = None, *,
                   conn: Any = None, actor: str | Mapping[str, Any] | None = None) -> int:
        """Emit an event (`jobs.emit_event_v2`): wakes every job waiting for a matching one.

        With `conn` (psycopg, or a SQLAlchemy Session/Connection) it is emitted inside
        that transaction and counts only if it commits. `actor`: who emitted it, stored
        with the event (inside a handler, its run's actor unless given;
        docs/howto-hooks.md). Answers the event id.
        """
        from sqljobs._client.transactions import run_in

        return run_in(self, conn, [queries.emit_event(name, payload, actor)])[0]

    async def emit_event_async(self, name: str, payload: Mapping[str, Any] | None = None, *,
                               conn: Any = None,
                               actor: str | Mapping[str, Any] | None = None) -> int:
        """`emit_event` for asyncio code."""
        from sqljobs._client.transactions import run_in_async

        return (await run_in_async(self, conn, [queries.emit_event(name, payload, actor)]))[0]


__all__ = ["App"]
