"""`app.partitions(...)`: upkeep of an app's range-partitioned table, on a schedule.

One run reads the database clock once (the durable step `clock`), then:

- **native DDL** (the default): creates the partitions from the current period to
  `ahead` periods after it (`create table if not exists <parent>_pYYYYMMDD partition of
  <parent> for values from (...) to (...)`), one durable step each (`create:<name>`);
  then detaches and drops, one durable step each (`drop:<name>`), the partitions it
  named whose upper bound is older than `retention` (UTC periods; the bounds are
  written as UTC midnights). Each step is idempotent, so a
  crash between detach and drop is finished by the retry. Partitions of other names
  are never touched.
- **pg_partman**, when the database has the extension and the parent is in
  `partman.part_config`: one durable step (`partman`) running
  `partman.run_maintenance(parent)`, which does the same by partman's configuration
  (its premake and retention, set when the parent was registered with
  `partman.create_parent`).

The DDL runs on the app's own connection, with the app's privileges.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, Protocol

import psycopg
from psycopg import sql
from pydantic import BaseModel

from sqljobs._app.maintenance import Empty, qualified
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle

Every = Literal["day", "week", "month"]


class Host(ClientSource, Protocol):
    @property
    def dsn(self) -> str: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            timeout: float | None = ..., payload: type[BaseModel] | None = ...,
            terminal: tuple[type[BaseException], ...] = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...

    def task(self, *, cron: str, timezone: str = ..., catch_up: str = ...,
             name: str | None = ..., queue: str | None = ..., timeout: float | None = ...,
             terminal: tuple[type[BaseException], ...] = ...,
             ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


def period_start(day: date, every: Every) -> date:
    if every == "day":
        return day
    if every == "week":
        return day - timedelta(days=day.weekday())  # Monday
    return day.replace(day=1)


def next_period(start: date, every: Every) -> date:
    if every == "day":
        return start + timedelta(days=1)
    if every == "week":
        return start + timedelta(days=7)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


@dataclass(frozen=True)
class Partitions:
    """A declared upkeep: `table` partitioned by range on a date or timestamp column."""

    name: str
    table: str
    every: Every = "day"
    ahead: int = 3
    retention: float | timedelta | None = None

    def __post_init__(self) -> None:
        qualified(self.table)
        if self.every not in ("day", "week", "month"):
            raise ConfigurationError(f"partitions {self.name!r}: every is day, week or month")
        if not 0 <= self.ahead <= 366:
            raise ConfigurationError(f"partitions {self.name!r}: ahead must be 0..366")
        if self.retention is not None and self.retention_s < 0:
            raise ConfigurationError(f"partitions {self.name!r}: retention must be >= 0")

    @property
    def retention_s(self) -> float:
        r = self.retention
        return 0.0 if r is None else r.total_seconds() if isinstance(r, timedelta) else float(r)

    @property
    def base(self) -> str:
        return self.table.split(".")[-1]

    @property
    def schema(self) -> str | None:
        return self.table.split(".")[0] if "." in self.table else None

    def partition_name(self, start: date) -> str:
        return f"{self.base}_p{start:%Y%m%d}"

    def start_of(self, partition: str) -> date | None:
        """The period a partition of ours starts (None: not a name this upkeep made)."""
        found = re.fullmatch(re.escape(self.base) + r"_p(\d{8})", partition)
        return datetime.strptime(found.group(1), "%Y%m%d").date() if found else None

    def qualified_partition(self, partition: str) -> sql.Identifier:
        return sql.Identifier(self.schema, partition) if self.schema else \
            sql.Identifier(partition)

    def wanted(self, now: datetime) -> list[date]:
        start, found = period_start(now.astimezone(UTC).date(), self.every), []
        for _ in range(self.ahead + 1):
            found.append(start)
            start = next_period(start, self.every)
        return found


def _children(conn: psycopg.Connection[Any], table: str) -> list[str]:
    rows = conn.execute(
        "select c.relname from pg_catalog.pg_inherits i "
        "join pg_catalog.pg_class c on c.oid = i.inhrelid "
        "where i.inhparent = pg_catalog.to_regclass(%s)", (table,)).fetchall()
    return [str(r[0]) for r in rows]


def _check_parent(conn: psycopg.Connection[Any], table: str) -> None:
    row = conn.execute("select p.partstrat, p.partnatts from pg_catalog.pg_partitioned_table p "
                       "where p.partrelid = pg_catalog.to_regclass(%s)", (table,)).fetchone()
    if row is None or row[0] != "r" or row[1] != 1:
        raise ConfigurationError(f"{table} is not partitioned by range on one column")


def _partman(conn: psycopg.Connection[Any], table: str) -> str | None:
    """The parent's name as pg_partman records it (`schema.table`, whatever the search path)
    when pg_partman is installed and manages `table`; None otherwise. A table declared
    without a schema is resolved by the search path, as `to_regclass` does."""
    row = conn.execute("select e.extnamespace::regnamespace::text from pg_catalog.pg_extension e "
                       "where e.extname = 'pg_partman'").fetchone()
    if row is None:
        return None
    found = conn.execute(sql.SQL(
        "select p.parent_table from {}.part_config p "
        "join pg_catalog.pg_class c on c.oid = pg_catalog.to_regclass(%s) "
        "join pg_catalog.pg_namespace n on n.oid = c.relnamespace "
        "where p.parent_table = n.nspname || '.' || c.relname").format(
        sql.Identifier(str(row[0]))), (table,)).fetchone()
    return str(found[0]) if found else None


def create_partition(conn: psycopg.Connection[Any], spec: Partitions, start: date) -> str:
    name = spec.partition_name(start)
    conn.execute(sql.SQL("create table if not exists {part} partition of {parent} "
                         "for values from ({low}) to ({high})").format(
        part=spec.qualified_partition(name), parent=qualified(spec.table),
        low=sql.Literal(f"{start.isoformat()} 00:00:00+00"),
        high=sql.Literal(f"{next_period(start, spec.every).isoformat()} 00:00:00+00")))
    return name


def drop_partition(conn: psycopg.Connection[Any], spec: Partitions, name: str) -> str:
    """Detach (when still attached) then drop: each half idempotent."""
    if name in _children(conn, spec.table):
        conn.execute(sql.SQL("alter table {parent} detach partition {part}").format(
            parent=qualified(spec.table), part=spec.qualified_partition(name)))
    conn.execute(sql.SQL("drop table if exists {part}").format(
        part=spec.qualified_partition(name)))
    return name


def declare_partitions(app: Host, spec: Partitions, *, cron: str | None, queue: str | None,
                       timeout: float | None) -> JobHandle[Any]:
    async def run(ctx: Any, payload: Empty) -> dict[str, Any]:
        def connect() -> psycopg.Connection[Any]:
            return psycopg.connect(app.dsn, autocommit=True)

        def clock() -> str:
            with connect() as conn:
                row = conn.execute("select jobs.now()").fetchone()
                assert row is not None
                return str(row[0].isoformat())

        now = datetime.fromisoformat(await ctx.step.run_async("clock", clock))

        def plan() -> dict[str, Any]:
            with connect() as conn:
                _check_parent(conn, spec.table)
                parent = _partman(conn, spec.table)
                if parent is not None:
                    return {"partman": True, "parent": parent, "drop": []}
                cutoff = now - timedelta(seconds=spec.retention_s)
                drop = []
                if spec.retention is not None:
                    for child in sorted(_children(conn, spec.table)):
                        start = spec.start_of(child)
                        if start is not None and datetime.combine(
                                next_period(start, spec.every), datetime.min.time(),
                                UTC) <= cutoff:
                            drop.append(child)
                return {"partman": False, "drop": drop}

        planned = await ctx.step.run_async("plan", plan)
        if planned["partman"]:
            def maintain() -> bool:
                with connect() as conn:
                    row = conn.execute(
                        "select e.extnamespace::regnamespace::text from pg_catalog.pg_extension e "
                        "where e.extname = 'pg_partman'").fetchone()
                    assert row is not None
                    conn.execute(sql.SQL("select {}.run_maintenance(%s)").format(
                        sql.Identifier(str(row[0]))), (planned.get("parent", spec.table),))
                return True

            await ctx.step.run_async("partman", maintain)
            return {"by": "pg_partman", "ensured": [], "dropped": []}
        ensured = []
        for start in spec.wanted(now):
            def make(start: date = start) -> str:
                with connect() as conn:
                    return create_partition(conn, spec, start)
            ensured.append(await ctx.step.run_async(f"create:{spec.partition_name(start)}",
                                                    make))
        dropped = []
        for name in planned["drop"]:
            def drop(name: str = name) -> str:
                with connect() as conn:
                    return drop_partition(conn, spec, name)
            dropped.append(await ctx.step.run_async(f"drop:{name}", drop))
        return {"by": "native", "ensured": ensured, "dropped": dropped}

    run.__qualname__ = spec.name
    if cron is None:  # a table that is not range-partitioned fails at once, not 25 times
        return app.job(name=spec.name, queue=queue, timeout=timeout, payload=Empty,
                       terminal=(ConfigurationError,))(run)
    return app.task(cron=cron, name=spec.name, queue=queue, timeout=timeout,
                    terminal=(ConfigurationError,))(run)


__all__ = ["Partitions", "create_partition", "declare_partitions", "drop_partition",
           "next_period", "period_start"]
