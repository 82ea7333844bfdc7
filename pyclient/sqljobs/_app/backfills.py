"""`app.backfill(...)`: a data backfill as an ordinary job, durable per batch.

    @app.backfill(name="users.normalise_email", source="select id, email from users",
                  key="id", batch=500, count=1_000_000, environments=["production"])
    async def normalise(batch: sqljobs.Batch) -> None:
        ...  # handle batch.rows (at least once)

The declaration makes one job (`@app.job` under the backfill's name), so a backfill is
enqueued, claimed, retried, listed and cancelled like any other. Its handler:

1. asks the ledger's gate (`jobs.backfill_begin`, every run): the environment, the
   backfills it `requires`, another live run, and the checksum of a completed one;
2. stores where it starts as the durable step `start` (the ledger's cursor the first
   time; a replay gets the same answer back);
3. per batch, the durable step `batch-<n>` reads the page at the cursor (a keyset query
   over `source`, or the `pages` function), hands it to the handler, records the batch
   in the ledger (`jobs.backfill_advance`, once per batch) and stores the CURSOR after it,
   never the page. A crash re-runs at most the batch in hand: at least once;
4. a paused ledger row parks the job on the event `sqljobs.backfill` until a resume;
   `rate` spaces the batches (an asyncio wait, which a cancel or a drain interrupts);
5. after the last batch, `jobs.backfill_finish` checks the declared `count`: short of
   it, the ledger row is `stalled` and the job fails with BackfillStalled.

The ledger (`jobs.backfill`, sql/85_factories.sql) says what ran; the declarations say
what exists; `pending` is the difference, per environment (`sqljobs backfills --pending`).
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import inspect
import json
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from pydantic import BaseModel

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import BackfillError, BackfillStalled, ConfigurationError
from sqljobs._client.records import BackfillRecord, Enqueued
from sqljobs._client.transactions import ClientSource, run_in
from sqljobs._declare.jobs import JobHandle

if TYPE_CHECKING:
    from sqljobs._runtime.context import JobContext

ENVIRONMENT_VARIABLE = "SQLJOBS_ENVIRONMENT"
DEFAULT_ENVIRONMENT = "default"
RESUME_EVENT = "sqljobs.backfill"

Row = dict[str, Any]
# A page function: (cursor, scope) -> (rows, the cursor after them, or None at the end).
PageFn = Callable[[Any, str], "tuple[list[Any], Any] | Awaitable[tuple[list[Any], Any]]"]


def environment_of(given: str | None) -> str:
    """The environment given, else $SQLJOBS_ENVIRONMENT, else "default"."""
    return given or os.environ.get(ENVIRONMENT_VARIABLE) or DEFAULT_ENVIRONMENT


class Host(ClientSource, Protocol):
    """What a backfill needs of its app (`App`): where it runs, its database, `@app.job`."""

    @property
    def environment(self) -> str: ...

    @property
    def dsn(self) -> str: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            timeout: float | None = ..., payload: type[BaseModel] | None = ...,
            terminal: tuple[type[BaseException], ...] = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


class BackfillRun(BaseModel):
    """The payload of a backfill's job: which scope, from scratch or not, and who."""

    scope: str = ""
    rerun: bool = False
    started_by: str = ""


@dataclass(frozen=True)
class Batch:
    """What a backfill's handler gets: one page of rows (at least once)."""

    rows: list[Any]
    number: int          # 1, 2, ... within this job's run
    scope: str
    cursor: Any          # where this page started (None: the beginning)
    ctx: JobContext


def _source_text(fn: Callable[..., Any] | None) -> str:
    """What the checksum reads of a function: its source, else its code's bytes."""
    if fn is None:
        return ""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        return code.co_code.hex() if code is not None else getattr(fn, "__qualname__", "")


def _jsonable(value: Any) -> Any:
    """A cursor value as JSON (a date or a UUID becomes its text, which PostgreSQL
    reads back as the column's type: psycopg sends text of unknown type)."""
    return json.loads(json.dumps(value, default=str))


@dataclass(frozen=True)
class Backfill:
    """One declared backfill (what `app.backfill` records)."""

    name: str
    handle: Callable[[Batch], Any]
    source: str | None = None
    key: tuple[str, ...] = ()
    pages: PageFn | None = None
    batch: int = 1000
    count: int | None = None
    environments: tuple[str, ...] | None = None
    requires: tuple[str, ...] = ()
    rate: float | None = None  # batches per second
    also: Callable[..., Any] | None = None  # another function the checksum reads (reindex)
    checksum: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if (self.source is None) == (self.pages is None):
            raise ConfigurationError(
                f"backfill {self.name!r}: give exactly one of source= (a query) and pages=")
        if self.source is not None and not self.key:
            raise ConfigurationError(
                f"backfill {self.name!r}: a source query needs key= (its keyset columns)")
        if self.batch < 1:
            raise ConfigurationError(f"backfill {self.name!r}: batch must be at least 1")
        if self.count is not None and self.count < 0:
            raise ConfigurationError(f"backfill {self.name!r}: count must be >= 0")
        if self.rate is not None and not self.rate > 0:
            raise ConfigurationError(
                f"backfill {self.name!r}: rate is batches per second, above 0")
        if self.environments is not None and not self.environments:
            raise ConfigurationError(
                f"backfill {self.name!r}: environments=[] would run nowhere; leave it None")
        if self.name in self.requires:
            raise ConfigurationError(f"backfill {self.name!r} cannot require itself")
        object.__setattr__(self, "checksum", self._checksum())

    def _checksum(self) -> str:
        """sha256 of what decides what the backfill does: its query, keys, batch size
        and count, and the source text of its handler and page function."""
        declared = {"name": self.name, "source": self.source, "key": list(self.key),
                    "batch": self.batch, "count": self.count,
                    "handle": _source_text(self.handle), "pages": _source_text(self.pages)}
        if self.also is not None:
            declared["also"] = _source_text(self.also)
        text = json.dumps(declared, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def runs_in(self, environment: str) -> bool:
        return self.environments is None or environment in self.environments

    @property
    def interval_s(self) -> float:
        """The least time from one batch's start to the next's (0: no throttle)."""
        return 0.0 if self.rate is None else 1.0 / self.rate

    def page_query(self, cursor: Any) -> sql.Composed:
        """The keyset query of the page after `cursor` (None: the first page)."""
        assert self.source is not None
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.key)
        after: sql.Composable = sql.SQL("")
        if cursor is not None:
            values = sql.SQL(", ").join(sql.Placeholder(f"sqljobs_c{i}")
                                        for i in range(len(self.key)))
            after = sql.SQL(" where ({keys}) > ({values})").format(keys=keys, values=values)
        return sql.SQL("select * from ({source}) as sqljobs_page{after} "
                       "order by {keys} limit {limit}").format(
            source=sql.SQL(self.source),  # the app's own declared query
            after=after, keys=keys, limit=sql.Literal(self.batch))


@dataclass(frozen=True)
class PendingBackfill:
    """A declared backfill that has not completed in an environment, and why."""

    name: str
    scope: str
    reason: str  # never ran | running | paused | stalled | cancelled | failed | dead | changed
    checksum: str


def pending(declared: Mapping[str, Backfill], ledger: Sequence[BackfillRecord],
            environment: str) -> list[PendingBackfill]:
    """What the registry declares minus what the ledger completed, in `environment`:
    each backfill that may run there (its `environments`) and has no completed row of
    scope "" under its current checksum. A completed row of another checksum is
    listed as "changed": it is reported, never run again on its own."""
    rows = {(r.name, r.scope): r for r in ledger if r.environment == environment}
    found = []
    for name, backfill in sorted(declared.items()):
        if not backfill.runs_in(environment):
            continue
        row = rows.get((name, ""))
        if row is None:
            found.append(PendingBackfill(name, "", "never ran", backfill.checksum))
        elif row.status != "completed":
            found.append(PendingBackfill(name, "", row.status, backfill.checksum))
        elif row.checksum != backfill.checksum:
            found.append(PendingBackfill(name, "", "changed", backfill.checksum))
    return found


class BackfillHandle:
    """What `@app.backfill` returns: start a run, and the operator's verbs on it."""

    def __init__(self, app: Host, backfill: Backfill, job: JobHandle[BackfillRun]) -> None:
        self.app = app
        self.backfill = backfill
        self.job = job

    @property
    def name(self) -> str:
        return self.backfill.name

    def __call__(self, batch: Batch) -> Any:
        return self.backfill.handle(batch)

    def start(self, scope: str = "", *, key: str | None = None, rerun: bool = False,
              started_by: str | None = None, tenant: str | None = None,
              conn: Any = None) -> Enqueued:
        """Enqueue a run of the backfill for `scope` (its job; the worker runs it).

        `key` makes the start idempotent (a deploy's release id, say); without one each
        start is a new job, and a second run while one is live fails BackfillBusy.
        `rerun` starts again from the beginning, even over a completed run.
        """
        who = started_by or f"{getpass.getuser()}@{socket.gethostname()}"
        payload = BackfillRun(scope=scope, rerun=rerun, started_by=who)
        spec = self.job.spec(payload, key=key or f"{scope}:{secrets.token_urlsafe(12)}",
                             tenant=tenant)
        return run_in(self.app, conn, [queries.enqueue_spec(spec)])[0]

    def _verb(self, call: Callable[[str, str, str], queries.Call[None]], scope: str,
              environment: str | None) -> None:
        self.app.client.run(call(self.name, scope, environment_of(
            environment or self.app.environment)))

    def pause(self, scope: str = "", *, environment: str | None = None) -> None:
        """Pause the running backfill after its batch in hand (BackfillState if not running)."""
        self._verb(queries.backfill_pause, scope, environment)

    def resume(self, scope: str = "", *, environment: str | None = None) -> None:
        """Resume a paused backfill: its parked job wakes and goes on."""
        self._verb(queries.backfill_resume, scope, environment)

    def cancel(self, scope: str = "", *, environment: str | None = None) -> None:
        """Cancel the backfill and its live job; a later start goes on from its cursor."""
        self._verb(queries.backfill_cancel, scope, environment)

    def status(self, scope: str = "", *, environment: str | None = None) -> BackfillRecord | None:
        """The ledger row of this backfill (None when it never ran in the environment)."""
        where = environment_of(environment or self.app.environment)
        rows = self.app.client.run(queries.backfills(where))
        return next((r for r in rows if r.name == self.name and r.scope == scope), None)


def _cancelled(name: str) -> None:
    """Stop the run: the ledger row was cancelled (its job is being cancelled too)."""
    from sqljobs._runtime.stopping import RunCancelled  # the runtime, only in a worker

    raise RunCancelled(f"backfill {name} was cancelled")


class _Run:
    """One run of a backfill's job: the gate, the batches, the pauses, the count."""

    def __init__(self, backfill: Backfill, app: Host, ctx: JobContext, run: BackfillRun,
                 conn: psycopg.AsyncConnection[Any]) -> None:
        self.backfill = backfill
        self.ctx = ctx
        self.run = run
        self.environment = app.environment
        self.conn = conn
        self.client = AsyncClient(conn)

    def _where(self) -> tuple[int, int, str, str, str]:
        return (self.ctx.job_id, self.ctx.claim, self.backfill.name, self.run.scope,
                self.environment)

    async def go(self) -> dict[str, Any]:
        b, step = self.backfill, self.ctx.step
        # The gate, on every run: an environment or a requirement may have changed.
        begun = await self.client.run(queries.backfill_begin(
            *self._where(), b.environments, b.requires, b.checksum, b.count,
            self.run.rerun, self.run.started_by))
        async def where_it_starts() -> dict[str, Any]:
            return begun._asdict()

        start = await step.run_async("start", where_it_starts)
        if start["verdict"] == "done":
            return {"verdict": "done", "batches": start["batches"], "rows": start["rows_done"]}
        cursor, number = start["cursor"], 0
        while True:
            number += 1
            began = time.monotonic()
            ran: list[bool] = []
            done = await step.run_async(f"batch-{number}", self._batch(number, cursor, ran))
            cursor = done["cursor"]
            if done["status"] == "cancelled":
                _cancelled(b.name)
            if done["status"] == "paused":
                await self._paused(number)
            if done["end"]:
                break
            if ran and b.interval_s:  # a batch run now (not replayed): keep to the rate
                await asyncio.sleep(max(0.0, b.interval_s - (time.monotonic() - began)))
        status = await self.client.run(queries.backfill_finish(*self._where()))
        if status == "stalled":
            raise BackfillStalled(
                f"backfill {b.name} (scope {self.run.scope!r}) ended short of its count "
                f"{b.count}", hint="the ledger row is stalled; see `sqljobs backfills`")
        return {"verdict": status, "batches": number}

    def _batch(self, number: int, cursor: Any,
               ran: list[bool]) -> Callable[[], Awaitable[dict[str, Any]]]:
        async def batch() -> dict[str, Any]:
            ran.append(True)
            rows, after, end = await self._page(cursor)
            if rows:
                handled = self.backfill.handle(Batch(rows, number, self.run.scope, cursor,
                                                     self.ctx))
                if inspect.isawaitable(handled):
                    await handled
            status = await self.client.run(queries.backfill_advance(
                *self._where(), number, after, len(rows)))
            return {"cursor": after, "rows": len(rows), "end": end, "status": status}
        return batch

    async def _page(self, cursor: Any) -> tuple[list[Any], Any, bool]:
        """The page after `cursor`, the cursor after it, and whether it was the last."""
        b = self.backfill
        if b.pages is not None:
            answer = b.pages(cursor, self.run.scope)
            rows, after = (await answer) if inspect.isawaitable(answer) else answer
            if after is None:
                return list(rows), cursor, True
            return list(rows), _jsonable(after), False
        params: dict[str, Any] = {"scope": self.run.scope}
        if cursor is not None:
            params.update({f"sqljobs_c{i}": v for i, v in enumerate(cursor)})
        async with self.conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(b.page_query(cursor), params)
            rows = await cur.fetchall()
        if not rows:
            return [], cursor, True
        return rows, _jsonable([rows[-1][k] for k in b.key]), len(rows) < b.batch

    async def _status(self) -> str:
        return await self.client.run(queries.backfill_status(*self._where()))

    async def _paused(self, number: int) -> None:
        """Park until the ledger row is running again (a resume's event wakes the job);
        an event that finds the row still paused (an older resume) waits again."""
        match = {"action": "resume", "environment": self.environment,
                 "name": self.backfill.name, "scope": self.run.scope}
        attempt = 0
        while True:
            attempt += 1
            await self.ctx.step.wait_for_event_async(f"paused-{number}-{attempt}",
                                                     RESUME_EVENT, match)
            status = await self.ctx.step.run_async(f"resumed-{number}-{attempt}",
                                                    self._status)
            if status == "cancelled":
                _cancelled(self.backfill.name)
            if status != "paused":
                return


def declare_backfill(app: Host, backfill: Backfill, *, queue: str | None,
                     timeout: float | None) -> BackfillHandle:
    """Declare the backfill's job on `app` (named as the backfill) and answer its handle."""

    async def run_backfill(ctx: JobContext, run: BackfillRun) -> dict[str, Any]:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            return await _Run(backfill, app, ctx, run, conn).go()

    run_backfill.__qualname__ = f"backfill[{backfill.name}]"
    job: JobHandle[BackfillRun] = app.job(
        name=backfill.name, queue=queue, timeout=timeout, payload=BackfillRun,
        terminal=(BackfillError,))(run_backfill)
    return BackfillHandle(app, backfill, job)


__all__ = ["Backfill", "BackfillHandle", "BackfillRun", "Batch", "PendingBackfill",
           "declare_backfill", "environment_of", "pending"]
