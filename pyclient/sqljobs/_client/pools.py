"""An application's connection pools: where its calls run when no connection is given.

`Pools` holds the DSN (as given, or from $SQLJOBS_DSN / $DATABASE_URL), opens a psycopg
pool (sync) and an asyncio one on first use, and checks when each opens that the
database carries a schema this client can use (`check_schema_version`). `App` is the
public face of it; the runtime's roles open pools of their own.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.database import (
    check_schema,
    check_schema_async,
    redacted_dsn,
    resolve_dsn,
)
from sqljobs._client.errors import ConfigurationError

POOL_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}


class Pools:
    """A sync and an asyncio connection pool on one database, opened on demand."""

    def __init__(self, dsn: str | None = None, *, min_size: int = 1,
                 max_size: int = 10) -> None:
        self.given = dsn  # None: $SQLJOBS_DSN, then $DATABASE_URL
        self.min_size = min_size
        self.max_size = max_size
        self._pool: ConnectionPool[Any] | None = None
        self._async_pool: AsyncConnectionPool[Any] | None = None

    @property
    def dsn(self) -> str:
        """The DSN given, else $SQLJOBS_DSN, else $DATABASE_URL (ConfigurationError)."""
        return resolve_dsn(self.given)

    # -- sync -------------------------------------------------------------------------

    def open(self) -> Self:
        """Open the pool and check the schema version (raises SchemaError)."""
        if self._pool is None:
            pool: ConnectionPool[Any] = ConnectionPool(
                self.dsn, min_size=self.min_size, max_size=self.max_size,
                kwargs=dict(POOL_KWARGS), open=False)
            pool.open(wait=True)
            try:
                check_schema(Client(pool), redacted_dsn(self.dsn))
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
        """A client on the sync pool (opens it on first use)."""
        self.open()
        assert self._pool is not None
        return Client(self._pool)

    # -- async ------------------------------------------------------------------------

    async def open_async(self) -> Self:
        """Open the asyncio pool and check the schema version (raises SchemaError)."""
        if self._async_pool is None:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.dsn, min_size=self.min_size, max_size=self.max_size,
                kwargs=dict(POOL_KWARGS), open=False)
            await pool.open(wait=True)
            try:
                await check_schema_async(AsyncClient(pool), redacted_dsn(self.dsn))
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
        """A client on the asyncio pool; `await open_async()` first."""
        if self._async_pool is None:
            raise ConfigurationError("the async pool is not open: await app.open_async() first")
        return AsyncClient(self._async_pool)


__all__ = ["POOL_KWARGS", "Pools"]
