"""`App`: where an application's connection settings live.

An App owns a connection pool and checks, when it opens, that the database carries the
schema version this client needs. The runtime (declarations, worker) builds on it.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from sqljobs import queries
from sqljobs._version import SCHEMA_VERSION
from sqljobs.client import AsyncClient, Client
from sqljobs.errors import ConfigurationError, SchemaError

DSN_VARIABLES = ("SQLJOBS_DSN", "DATABASE_URL")


def resolve_dsn(dsn: str | None) -> str:
    """The DSN given, else $SQLJOBS_DSN, else $DATABASE_URL."""
    if dsn:
        return dsn
    for variable in DSN_VARIABLES:
        if value := os.environ.get(variable):
            return value
    raise ConfigurationError(
        "no database given: pass dsn=..., or set SQLJOBS_DSN or DATABASE_URL"
    )


def check_schema_version(installed: int | None, dsn_hint: str = "<dsn>") -> None:
    """Raise SchemaError, naming the command to run, when the schema is missing or old."""
    command = f"sqljobs migrate --dsn {dsn_hint}"
    if installed is None:
        raise SchemaError(
            f"this database has no sqljobs schema (jobs.schema_version() is missing); "
            f"install it with: {command}"
        )
    if installed < SCHEMA_VERSION:
        raise SchemaError(
            f"this database has sqljobs schema version {installed}, but this client needs "
            f"{SCHEMA_VERSION}; upgrade it with: {command}"
        )


def _redacted(dsn: str) -> str:
    """The DSN with any password removed, fit for an error message."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<dsn>"
    info.pop("password", None)
    host = info.get("host", "localhost")
    port = info.get("port", 5432)
    user = f"{info['user']}@" if info.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{info.get('dbname', '')}"


class App:
    """A sqljobs application: connection settings, a pool, and (later) declarations."""

    def __init__(self, dsn: str | None = None, *, min_size: int = 1, max_size: int = 10) -> None:
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool: ConnectionPool[Any] | None = None
        self._async_pool: AsyncConnectionPool[Any] | None = None

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
                check_schema_version(Client(pool).run(queries.schema_version()),
                                     _redacted(self.dsn))
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
                check_schema_version(await AsyncClient(pool).run(queries.schema_version()),
                                     _redacted(self.dsn))
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
