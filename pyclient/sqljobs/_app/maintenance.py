"""Scheduled upkeep of an application's own tables, each an ordinary job (or task):

- `app.purge(...)`: retention of the app's rows by age. A pass reads the database clock
  ONCE (the durable step `clock`), then purges each table in its own durable step
  (`table:<schema.table>`), in bounded batches (one transaction each). The tables are
  deleted from on the app's own connection, with the app's privileges: nothing in
  schema `jobs` can delete from an app's table.
- `app.rollup(...)`: a summary table kept from its source in ONE upsert per run
  (`insert ... select ... on conflict (key) do update`, rows that did not change are
  not written).
- `app.refresh_view(...)`: `refresh materialized view [concurrently]` under a
  transaction-level advisory lock taken with `try`: a run that finds another refresh
  of the same view in progress skips instead of queueing behind it, so two never overlap.

With `cron=` each is a task the scheduler fires; without, a job to enqueue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg
from psycopg import sql
from pydantic import BaseModel

from sqljobs._client.errors import ConfigurationError
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle


class Host(ClientSource, Protocol):
    """What the upkeep factories need of their app (`App`)."""

    @property
    def dsn(self) -> str: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            timeout: float | None = ..., payload: type[BaseModel] | None = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...

    def task(self, *, cron: str, timezone: str = ..., catch_up: str = ...,
             name: str | None = ..., queue: str | None = ..., timeout: float | None = ...,
             ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


def qualified(name: str) -> sql.Identifier:
    """`schema.table` (or `table`) as a quoted identifier; refuses anything else."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ConfigurationError(f"{name!r} is not a table name (schema.table)")
    return sql.Identifier(*parts)


def _seconds(age: float | timedelta) -> float:
    return age.total_seconds() if isinstance(age, timedelta) else float(age)


# -- purge -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PurgeTable:
    """One table a purge keeps: rows whose `column` (a timestamp) is older than `older_than`
    go, `batch` rows per transaction at most; `where` narrows which rows (SQL, the app's)."""

    table: str
    column: str
    older_than: float | timedelta
    batch: int = 1000
    where: str | None = None

    def __post_init__(self) -> None:
        qualified(self.table)
        if _seconds(self.older_than) < 0:
            raise ConfigurationError(f"purge of {self.table}: older_than must be >= 0")
        if not 1 <= self.batch <= 100_000:
            raise ConfigurationError(f"purge of {self.table}: batch must be 1..100000")

    @property
    def age_s(self) -> float:
        return _seconds(self.older_than)

    def _eligible(self) -> sql.Composed:
        narrowed = (sql.SQL("") if self.where is None
                    else sql.SQL(" and ({})").format(sql.SQL(self.where)))  # the app's own SQL
        return sql.SQL("{column} < %(cutoff)s{narrowed}").format(
            column=sql.Identifier(self.column), narrowed=narrowed)

    def delete_batch(self) -> sql.Composed:
        """Delete one batch of eligible rows, skipping rows another transaction holds."""
        return sql.SQL(
            "delete from {table} where ctid = any (array(select ctid from {table} where "
            "{eligible} limit {batch} for update skip locked))").format(
            table=qualified(self.table), eligible=self._eligible(),
            batch=sql.Literal(self.batch))

    def count(self) -> sql.Composed:
        return sql.SQL("select count(*) from {table} where {eligible}").format(
            table=qualified(self.table), eligible=self._eligible())


def purge_table(conn: psycopg.Connection[Any], table: PurgeTable, cutoff: datetime,
                max_batches: int | None = None) -> int:
    """Delete `table`'s rows older than `cutoff` in bounded batches; answers how many.
    Stops when a batch takes fewer than `batch` rows (what is left is held by other
    transactions, or nothing is), or after `max_batches`."""
    deleted, batches = 0, 0
    while max_batches is None or batches < max_batches:
        with conn.transaction():
            took = conn.execute(table.delete_batch(), {"cutoff": cutoff}).rowcount
        deleted += took
        batches += 1
        if took < table.batch:
            break
    return deleted


def eligible(conn: psycopg.Connection[Any], table: PurgeTable, cutoff: datetime) -> int:
    row = conn.execute(table.count(), {"cutoff": cutoff}).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class Purge:
    """A declared purge: its name and its tables (each table in one purge only)."""

    name: str
    tables: tuple[PurgeTable, ...]


class PurgeHandle:
    """What `app.purge` returns: the purge's job, and what it would delete now."""

    def __init__(self, app: Host, purge: Purge, job: JobHandle[Any]) -> None:
        self.app, self.purge, self.job = app, purge, job

    @property
    def name(self) -> str:
        return self.purge.name

    def dry_run(self) -> dict[str, int]:
        """Eligible rows per table now (one clock reading), deleting nothing."""
        with psycopg.connect(self.app.dsn, autocommit=True) as conn:
            now = _database_now(conn)
            return {t.table: eligible(conn, t, now - timedelta(seconds=t.age_s))
                    for t in self.purge.tables}


def _database_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("select jobs.now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


class Empty(BaseModel):
    """The payload of an upkeep job: nothing."""


def _declare(app: Host, name: str, fn: Callable[..., Any], *, cron: str | None,
             queue: str | None, timeout: float | None) -> JobHandle[Any]:
    """The job (a task with `cron`) named `name`; handlers take `(ctx: Any, payload: Empty)`
    (ctx is a JobContext; `Any` keeps the runtime out of this module's annotations)."""
    fn.__qualname__ = name
    if cron is None:
        return app.job(name=name, queue=queue, timeout=timeout, payload=Empty)(fn)
    return app.task(cron=cron, name=name, queue=queue, timeout=timeout)(fn)


def declare_purge(app: Host, name: str, tables: Sequence[PurgeTable], taken: set[str], *,
                  cron: str | None, queue: str | None, timeout: float | None) -> PurgeHandle:
    """Declare the purge's job; refuses no table, and a table another purge keeps."""
    if not tables:
        raise ConfigurationError(f"purge {name!r} names no table")
    names = [t.table for t in tables]
    twice = {t for t in names if names.count(t) > 1} | (set(names) & taken)
    if twice:
        raise ConfigurationError(
            f"purge {name!r}: {', '.join(sorted(twice))} is already purged by a declaration")
    purge = Purge(name, tuple(tables))

    async def run_purge(ctx: Any, payload: Empty) -> dict[str, int]:
        async def clock() -> str:
            async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as c:
                row = await (await c.execute("select jobs.now()")).fetchone()
                assert row is not None
                return str(row[0].isoformat())

        now = datetime.fromisoformat(await ctx.step.run_async("clock", clock))
        done: dict[str, int] = {}
        for table in purge.tables:
            def one(table: PurgeTable = table) -> int:
                with psycopg.connect(app.dsn, autocommit=True) as conn:
                    return purge_table(conn, table, now - timedelta(seconds=table.age_s))
            done[table.table] = await ctx.step.run_async(f"table:{table.table}", one)
        return done

    job = _declare(app, name, run_purge, cron=cron, queue=queue, timeout=timeout)
    taken.update(names)
    return PurgeHandle(app, purge, job)


# -- rollup ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rollup:
    """A summary table `target` kept from `source` (a query naming the target's columns),
    unique on `key`."""

    name: str
    target: str
    source: str
    key: tuple[str, ...]

    def __post_init__(self) -> None:
        qualified(self.target)
        if not self.key:
            raise ConfigurationError(f"rollup {self.name!r} needs key= (the target's unique key)")

    def columns_query(self) -> sql.Composed:
        """The source's columns (no row read)."""
        return sql.SQL("select * from ({source}) as sqljobs_rollup limit 0").format(
            source=sql.SQL(self.source))

    def upsert(self, columns: Sequence[str]) -> sql.Composed:
        """ONE statement: insert the source's rows, update those whose values changed."""
        missing = [k for k in self.key if k not in columns]
        if missing:
            raise ConfigurationError(
                f"rollup {self.name!r}: the source has no column {', '.join(missing)}")
        values = [c for c in columns if c not in self.key]
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        key = sql.SQL(", ").join(sql.Identifier(k) for k in self.key)
        if not values:
            action: sql.Composable = sql.SQL("nothing")
        else:
            action = sql.SQL("update set {sets} where ({old}) is distinct from ({new})").format(
                sets=sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c))
                                        for c in values),
                old=sql.SQL(", ").join(sql.SQL("{t}.{c}").format(
                    t=sql.Identifier("sqljobs_target"), c=sql.Identifier(c)) for c in values),
                new=sql.SQL(", ").join(sql.SQL("excluded.{c}").format(c=sql.Identifier(c))
                                       for c in values))
        return sql.SQL(
            "insert into {target} as sqljobs_target ({cols}) select {cols} from ({source}) "
            "as sqljobs_rollup on conflict ({key}) do {action}").format(
            target=qualified(self.target), cols=cols, source=sql.SQL(self.source), key=key,
            action=action)


def run_rollup(conn: psycopg.Connection[Any], rollup: Rollup) -> int:
    """The upsert, once: answers how many target rows it inserted or changed."""
    with conn.cursor() as cur:
        cur.execute(rollup.columns_query())
        columns = [d.name for d in cur.description or ()]
    return conn.execute(rollup.upsert(columns)).rowcount


def declare_rollup(app: Host, rollup: Rollup, *, cron: str | None, queue: str | None,
                   timeout: float | None) -> JobHandle[Any]:
    def run(ctx: Any, payload: Empty) -> dict[str, int]:
        with psycopg.connect(app.dsn, autocommit=True) as conn:
            return {"rows": run_rollup(conn, rollup)}

    return _declare(app, rollup.name, run, cron=cron, queue=queue, timeout=timeout)


# -- refresh_view ----------------------------------------------------------------------------

def view_lock_key(view: str) -> int:
    """The advisory lock key of a view's refresh (a stable signed 64-bit int)."""
    digest = hashlib.sha256(f"sqljobs.refresh_view:{view}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def refresh(conn: psycopg.Connection[Any], view: str, concurrently: bool) -> bool:
    """Refresh `view` under its advisory lock; False (nothing done) when another refresh
    of it holds the lock."""
    with conn.transaction():
        got = conn.execute("select pg_try_advisory_xact_lock(%s)",
                           (view_lock_key(view),)).fetchone()
        if not (got and got[0]):
            return False
        conn.execute(sql.SQL("refresh materialized view {how}{view}").format(
            how=sql.SQL("concurrently " if concurrently else ""), view=qualified(view)))
    return True


def declare_refresh(app: Host, name: str, view: str, *, concurrently: bool,
                    cron: str | None, queue: str | None,
                    timeout: float | None) -> JobHandle[Any]:
    qualified(view)

    def run(ctx: Any, payload: Empty) -> dict[str, bool]:
        with psycopg.connect(app.dsn, autocommit=True) as conn:
            return {"refreshed": refresh(conn, view, concurrently)}

    return _declare(app, name, run, cron=cron, queue=queue, timeout=timeout)


__all__ = ["Purge", "PurgeHandle", "PurgeTable", "Rollup", "declare_purge", "declare_refresh",
           "declare_rollup", "eligible", "purge_table", "refresh", "run_rollup",
           "view_lock_key"]
