"""Run calls on the app's pool, or inside a caller's own transaction.

A caller's connection may be a psycopg connection, or a SQLAlchemy Session or
Connection on the psycopg driver: the calls then join that transaction, so what they
write exists only if the caller commits.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import psycopg

from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.queries import Call

T = TypeVar("T")


class ClientSource(Protocol):
    """Where calls run when the caller gives no connection: an `App`'s pools."""

    @property
    def client(self) -> Client: ...

    @property
    def async_client(self) -> AsyncClient: ...


def _psycopg_of(conn: Any) -> psycopg.Connection[Any]:
    if isinstance(conn, psycopg.Connection):
        return conn
    # SQLAlchemy: a Session hands out its Connection (beginning its transaction).
    sa_conn = conn.connection() if hasattr(conn, "get_bind") else conn
    driver = getattr(getattr(sa_conn, "connection", None), "driver_connection", None)
    if isinstance(driver, psycopg.Connection):
        return driver
    raise ConfigurationError(
        f"conn must be a psycopg Connection or a SQLAlchemy Session/Connection on the "
        f"psycopg driver (postgresql+psycopg://), not {type(conn).__name__}"
    )


async def _async_psycopg_of(conn: Any) -> psycopg.AsyncConnection[Any]:
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    # SQLAlchemy asyncio: AsyncSession.connection() / AsyncConnection.get_raw_connection().
    sa_conn = await conn.connection() if hasattr(conn, "get_bind") else conn
    raw = await sa_conn.get_raw_connection() if hasattr(sa_conn, "get_raw_connection") else None
    driver = getattr(raw, "driver_connection", None)
    if isinstance(driver, psycopg.AsyncConnection):
        return driver
    raise ConfigurationError(
        f"conn must be a psycopg AsyncConnection or a SQLAlchemy AsyncSession/AsyncConnection "
        f"on the psycopg driver, not {type(conn).__name__}"
    )


def run_in(app: ClientSource, conn: Any, calls: list[Call[T]]) -> list[T]:
    """Run calls atomically: on the caller's connection when given, else the pool."""
    if conn is None:
        client = app.client
        return [client.run(calls[0])] if len(calls) == 1 else client.run_all(calls)
    return Client(_psycopg_of(conn)).run_all(calls)


async def run_in_async(app: ClientSource, conn: Any, calls: list[Call[T]]) -> list[T]:
    if conn is None:
        client = app.async_client
        return [await client.run(calls[0])] if len(calls) == 1 else await client.run_all(calls)
    return await AsyncClient(await _async_psycopg_of(conn)).run_all(calls)
