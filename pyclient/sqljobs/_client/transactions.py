"""Run calls on the app's pool, or inside a caller's own transaction.

A caller's connection may be a psycopg connection, or a SQLAlchemy Session or
Connection on the psycopg driver: the calls then join that transaction, so what they
write exists only if the caller commits.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import psycopg

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.errors import ConfigurationError, LeaseLost
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


@dataclass(frozen=True, slots=True)
class RunFence:
    """The run a handler's writes belong to, what its refusal raises, and its job's
    actor (what the run enqueues, stages and emits names it unless told otherwise)."""

    job_id: int
    claim: int
    stopped: Callable[[], Exception]
    actor: Any = None


# Set by the worker while a handler runs (sqljobs._runtime.worker.running): every write
# run_in makes then goes first through jobs.fence_run, in the same transaction, so a
# run that was stopped (cancelled, its lease lost, drained) writes nothing. jobs.fence_run
# also makes the run's actor the default of that transaction's enqueues, stages and
# events (jobs.run_actor()); JobHandle.spec reads it here too, so a producer hook (the
# tracing span) sees the actor the job will have.
RUN_FENCE: ContextVar[RunFence | None] = ContextVar("sqljobs_run_fence", default=None)


def run_in(app: ClientSource, conn: Any, calls: list[Call[T]]) -> list[T]:
    """Run calls atomically: on the caller's connection when given, else the pool."""
    fence = RUN_FENCE.get()
    if fence is not None:
        return _fenced(fence, lambda: run_in(app, conn, [_fence(fence), *calls])[1:])
    if conn is None:
        client = app.client
        return [client.run(calls[0])] if len(calls) == 1 else client.run_all(calls)
    return Client(_psycopg_of(conn)).run_all(calls)


async def run_in_async(app: ClientSource, conn: Any, calls: list[Call[T]]) -> list[T]:
    fence = RUN_FENCE.get()
    if fence is not None:
        token = RUN_FENCE.set(None)
        try:
            return (await run_in_async(app, conn, [_fence(fence), *calls]))[1:]
        except LeaseLost as error:
            raise fence.stopped() from error
        finally:
            RUN_FENCE.reset(token)
    if conn is None:
        client = app.async_client
        return [await client.run(calls[0])] if len(calls) == 1 else await client.run_all(calls)
    return await AsyncClient(await _async_psycopg_of(conn)).run_all(calls)


def run_actor() -> Any:
    """The actor of the run this code is inside (None: none, or not inside a run)."""
    fence = RUN_FENCE.get()
    return None if fence is None else fence.actor


def _fence(fence: RunFence) -> Call[Any]:
    return queries.fence_run(fence.job_id, fence.claim)


def _fenced(fence: RunFence, write: Callable[[], list[T]]) -> list[T]:
    """`write` (which sends the fence first) with the fence off meanwhile; its refusal
    as the run's own error."""
    token = RUN_FENCE.set(None)
    try:
        return write()
    except LeaseLost as error:
        raise fence.stopped() from error
    finally:
        RUN_FENCE.reset(token)
