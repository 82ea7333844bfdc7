"""`app.consumer(...)`: a stream consumer, a job plus its supervisor task.

A run of the consumer's job reads its source in TURNS. A turn is ONE transaction of the
application's database (the app's DSN): it locks the consumer's cursor
(`jobs.consumer_cursor`), reads a batch from the source after it, hands the batch to the
handler with that transaction's connection (`batch.conn`: write your effects there),
and moves the cursor (`jobs.consumer_advance`, fenced on the turn read), then commits.
The effects and the cursor commit together: a crash repeats at most the turn that had
not committed, and nothing committed is applied twice. A run ends when a turn finds no
new rows (or after `turns` turns); the supervisor task (`<name>.supervisor`, on its
cron) starts a run when none is live, so a consumer keeps up without a worker of its
own.

A consumer refuses to enqueue itself: starting its own job from inside one of its turns
(a handler that would feed itself) raises ConsumerSelfEnqueue, by any enqueue path.

Sources implement the port `Source`: `read(conn, cursor, limit) -> (rows, next_cursor)`
on the turn's connection, cursors are JSON. `TableSource` reads a PostgreSQL table's new
rows by a key (an id, or a column with an id to break ties). A Kafka or Redis Streams
source is an adapter of the same port (docs/howto-consumers.md).
"""

from __future__ import annotations

import contextvars
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel, create_model, model_validator

from sqljobs._app.maintenance import Empty, qualified
from sqljobs._client.errors import ConfigurationError, SqljobsError
from sqljobs._client.records import Enqueued
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle, RetryPolicy

_turn_of: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "sqljobs_consumer_turn", default=None)


class ConsumerSelfEnqueue(SqljobsError):
    """A consumer's turn tried to enqueue the consumer's own job (a loop): refused, and
    nothing was enqueued."""


class ConsumerFenced(SqljobsError):
    """Another run moved the consumer's cursor during this turn: the turn was rolled
    back (its effects with it)."""


class Source(Protocol):
    """The port a consumer reads: the rows after `cursor` (None: from the start), at most
    `limit`, and the cursor after the last of them (JSON). Read on the turn's connection,
    so a source in the same database reads in the turn's transaction."""

    def read(self, conn: psycopg.Connection[Any], cursor: Any, limit: int
             ) -> tuple[list[dict[str, Any]], Any]: ...


@dataclass(frozen=True)
class TableSource:
    """New rows of a PostgreSQL table, in the order of `key`: one column that only grows
    (an identity id), or a column and a unique tiebreaker (`("created_at", "id")`),
    keyset-paged. `columns` to read (default: all), `where` to narrow (the app's SQL)."""

    table: str
    key: str | tuple[str, ...] = "id"
    columns: tuple[str, ...] = ()
    where: str | None = None

    def __post_init__(self) -> None:
        qualified(self.table)
        if not self.keys:
            raise ConfigurationError("a table source needs a key column")

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)

    def read(self, conn: psycopg.Connection[Any], cursor: Any, limit: int
             ) -> tuple[list[dict[str, Any]], Any]:
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.keys)
        conditions: list[sql.Composable] = []
        if self.where:
            conditions.append(sql.SQL("({})").format(sql.SQL(self.where)))  # the app's SQL
        if cursor is not None:
            conditions.append(sql.SQL("({}) > ({})").format(
                keys, sql.SQL(", ").join(sql.Placeholder() for _ in self.keys)))
        columns = (sql.SQL("*") if not self.columns else
                   sql.SQL(", ").join(sql.Identifier(c) for c in
                                      dict.fromkeys((*self.keys, *self.columns))))
        query = sql.SQL("select {columns} from {table}{where} order by {keys} "
                        "limit {limit}").format(
            columns=columns, table=qualified(self.table), keys=keys,
            where=(sql.SQL(" where ") + sql.SQL(" and ").join(conditions)) if conditions
            else sql.SQL(""), limit=sql.Literal(limit))
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(query, list(cursor) if cursor is not None else []).fetchall()
        if not rows:
            return [], cursor
        last = json.loads(json.dumps([rows[-1][k] for k in self.keys], default=str))
        return rows, last


@dataclass(frozen=True)
class ConsumerBatch:
    """What a consumer's handler gets: the turn's rows, its connection (the turn's
    transaction: write the effects there), the turn number and the job's context."""

    rows: list[dict[str, Any]]
    conn: psycopg.Connection[Any]
    turn: int
    ctx: Any


class ConsumerRun(BaseModel):
    """The payload of a consumer's job (its run)."""

    consumer: str = ""

    @model_validator(mode="after")
    def _not_from_its_own_turn(self) -> ConsumerRun:
        if self.consumer and _turn_of.get() == self.consumer:
            raise ConsumerSelfEnqueue(
                f"consumer {self.consumer} may not enqueue its own job from one of its turns")
        return self


class Host(ClientSource, Protocol):
    @property
    def dsn(self) -> str: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            retry: RetryPolicy | None = ..., timeout: float | None = ...,
            payload: type[BaseModel] | None = ...,
            terminal: tuple[type[BaseException], ...] = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...

    def task(self, *, cron: str, timezone: str = ..., catch_up: str = ...,
             name: str | None = ..., queue: str | None = ..., timeout: float | None = ...,
             ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


class ConsumerHandle:
    """What `app.consumer` returns: its job, its supervisor task, and how to start a run."""

    def __init__(self, app: Host, name: str, job: JobHandle[Any],
                 supervisor: JobHandle[Any] | None, model: type[ConsumerRun]) -> None:
        self.app, self.name, self.job, self.supervisor, self.model = (
            app, name, job, supervisor, model)

    def start(self, *, conn: Any = None) -> Enqueued:
        """Enqueue a run unless one is live (a singleton: the live run's id otherwise)."""
        return self.job.enqueue(self.model(consumer=self.name),
                                key=f"{self.name}:{secrets.token_urlsafe(9)}",
                                singleton=True, conn=conn)

    def position(self) -> dict[str, Any] | None:
        """The consumer's cursor, turns and rows (None before its first turn)."""
        with psycopg.connect(self.app.dsn, row_factory=dict_row) as conn:
            return conn.execute("select cursor, turn, rows_done, updated_at from "
                                "jobs.consumers() where name = %s", (self.name,)).fetchone()


def run_turns(dsn: str, name: str, source: Source, handle: Callable[[ConsumerBatch], Any],
              ctx: Any, batch: int, turns: int) -> dict[str, int]:
    """One run: turns until one finds no rows, or `turns` of them."""
    done = rows_total = 0
    with psycopg.connect(dsn) as conn:
        while done < turns:
            if getattr(ctx, "cancelled", None) is not None and ctx.cancelled.is_set():
                break
            with conn.transaction():
                row = conn.execute("select cursor, turn from jobs.consumer_cursor(%s)",
                                   (name,)).fetchone()
                assert row is not None
                cursor, turn = row
                rows, after = source.read(conn, cursor, batch)
                if not rows:
                    break
                token = _turn_of.set(name)
                try:
                    handle(ConsumerBatch(rows=rows, conn=conn, turn=turn + 1, ctx=ctx))
                finally:
                    _turn_of.reset(token)
                moved = conn.execute("select jobs.consumer_advance(%s, %s, %s, %s)",
                                     (name, turn, Jsonb(after), len(rows))).fetchone()
                if not (moved and moved[0]):
                    raise ConsumerFenced(f"consumer {name}: another run moved the cursor "
                                         f"during turn {turn + 1}")
            done += 1
            rows_total += len(rows)
    return {"turns": done, "rows": rows_total}


def declare_consumer(app: Host, name: str, source: Source,
                     handle: Callable[[ConsumerBatch], Any], *, batch: int, turns: int,
                     cron: str | None, queue: str | None, timeout: float | None,
                     retry: RetryPolicy | None = None) -> ConsumerHandle:
    if not 1 <= batch <= 100_000:
        raise ConfigurationError(f"consumer {name!r}: batch must be 1..100000")
    if turns < 1:
        raise ConfigurationError(f"consumer {name!r}: turns must be >= 1")
    model: type[ConsumerRun] = create_model(  # the run's payload names its consumer
        f"ConsumerRun[{name}]", __base__=ConsumerRun, consumer=(str, name))

    def run(ctx: Any, payload: ConsumerRun) -> dict[str, int]:
        return run_turns(app.dsn, name, source, handle, ctx, batch, turns)

    run.__qualname__ = f"consumer[{name}]"
    job = app.job(name=name, queue=queue, timeout=timeout, payload=model, retry=retry,
                  terminal=(ConsumerSelfEnqueue,))(run)
    handle_ = ConsumerHandle(app, name, job, None, model)
    if cron is not None:
        def supervise(ctx: Any, payload: Empty) -> dict[str, Any]:
            started = handle_.start()
            return {"run": started.id, "started": not started.deduped}

        supervise.__qualname__ = f"consumer[{name}].supervisor"
        handle_.supervisor = app.task(cron=cron, name=f"{name}.supervisor", queue=queue)(
            supervise)
    return handle_


__all__ = ["ConsumerBatch", "ConsumerFenced", "ConsumerHandle", "ConsumerRun",
           "ConsumerSelfEnqueue", "Source", "TableSource", "declare_consumer"]
