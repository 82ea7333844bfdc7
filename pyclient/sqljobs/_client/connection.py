"""Run `queries.Call`s on a connection or a pool, sync or async.

Each operation is written once, as a `Call` in `sqljobs.queries`; the two clients only
run calls (`client.run(queries.claim(...))`), so sync and async can never drift apart.
On a pool every call is one autocommit statement, prepared after first use. On a
caller's own connection a call joins whatever transaction that connection has open.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from sqljobs._client.errors import TRANSIENT_ERRORS, translate
from sqljobs._client.queries import Call

T = TypeVar("T")

SyncSource = psycopg.Connection[Any] | ConnectionPool[Any]
AsyncSource = psycopg.AsyncConnection[Any] | AsyncConnectionPool[Any]


# How many times a call safe to send twice is sent again after its connection dropped.
RESENDS = 3


def _has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement answered rows (a SELECT) rather than a command tag. Asked
    of the result's status: `cur.description` makes a Column object per field at every
    call, on every call a worker or producer sends."""
    result = cur.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


class Client:
    """Runs calls synchronously on a psycopg connection or connection pool."""

    def __init__(self, source: SyncSource) -> None:
        self._source = source

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if isinstance(self._source, ConnectionPool):
            with self._source.connection() as conn:
                yield conn
        else:
            yield self._source

    def run(self, call: Call[T]) -> T:
        with self._connection() as conn:
            try:
                with conn.cursor(row_factory=tuple_row if call.tuples else dict_row) as cur:
                    cur.execute(call.sql, call.params, prepare=True)
                    rows = cur.fetchall() if _has_rows(cur) else []
            except psycopg.Error as error:
                raise translate(error) from error
        return call.decode(rows)

    def run_all(self, calls: list[Call[T]]) -> list[T]:
        """Run calls in one transaction: all take effect, or none.

        On an autocommit connection (the pool's) the calls get a transaction of their
        own; on a caller's connection they join the caller's transaction, which the
        caller commits or rolls back (psycopg's transaction() would commit it here).
        """
        with self._connection() as conn:
            if not conn.autocommit:
                return [Client(conn).run(call) for call in calls]
            with conn.transaction():
                return [Client(conn).run(call) for call in calls]


class AsyncClient:
    """Runs calls on an asyncio psycopg connection or connection pool."""

    def __init__(self, source: AsyncSource) -> None:
        self._source = source

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if isinstance(self._source, AsyncConnectionPool):
            async with self._source.connection() as conn:
                yield conn
        else:
            yield self._source

    async def run(self, call: Call[T]) -> T:
        async with self._connection() as conn:
            try:
                async with conn.cursor(row_factory=tuple_row if call.tuples else dict_row) as cur:
                    await cur.execute(call.sql, call.params, prepare=True)
                    rows = await cur.fetchall() if _has_rows(cur) else []
            except psycopg.Error as error:
                raise translate(error) from error
        return call.decode(rows)

    async def run_again_once(self, call: Call[T]) -> T:
        """Run a call that is safe to send twice (fenced and idempotent, as a step's
        store is). On a pool, a call that fails because its connection dropped (a
        terminated backend, a failover) is sent again on a live connection, after the
        pool's idle connections are checked and the dead ones dropped: a failover then
        costs a retry, not the job's attempt. A second drop while it is sent again (the
        pool's other connections went with the first) is retried too, up to
        RESENDS times."""
        for _ in range(RESENDS):
            try:
                return await self.run(call)
            except TRANSIENT_ERRORS:
                if not isinstance(self._source, AsyncConnectionPool):
                    raise
            await self._source.check()
        return await self.run(call)

    async def run_all(self, calls: list[Call[T]]) -> list[T]:
        """Run calls in one transaction: all take effect, or none (see Client.run_all)."""
        async with self.transaction() as client:
            return [await client.run(call) for call in calls]

    @asynccontextmanager
    async def transaction(self, *, read_committed: bool = False
                          ) -> AsyncIterator[AsyncClient]:
        """One connection, in one transaction for as long as the block runs: committed
        when it ends, rolled back when it raises (`read_committed`: at that isolation
        level, whatever the session's default). On a connection that is not in autocommit
        mode the block runs in the caller's transaction, which the caller commits or
        rolls back (see Client.run_all)."""
        async with self._connection() as conn:
            if not conn.autocommit:
                yield AsyncClient(conn)
            else:
                async with conn.transaction():
                    if read_committed:
                        await conn.execute("set transaction isolation level read committed")
                    yield AsyncClient(conn)
