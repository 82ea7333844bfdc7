"""The test clock: `clock.advance(seconds)` moves `jobs.now()` for one test database.

The engine reads all time through `jobs.now()`, which honours the session setting
`jobs.fake_now` only for the schema's owner or a superuser (sql/00_schema.sql; any
other role gets SJ019). The clock puts that setting in the test database's DSN
(`options=-c jobs.fake_now=...`), so every session opened from the DSN afterwards (the
pools of the apps the test database serves, a drain's worker, $SQLJOBS_DSN) starts at
the new time, whatever its role's privileges on parameters; no other database, and no
session opened from another DSN, ever sees it.

Time stands still once moved: a lease, a retry's backoff or a sleep ends only when the
test advances the clock past it, never because the machine was slow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sqljobs._client.errors import SqljobsError


class ClockError(SqljobsError, ValueError):
    """The test clock was asked to go backwards, or by a role that may not move it."""


def dsn_at(base_dsn: str, when: datetime) -> str:
    """`base_dsn` with its sessions' `jobs.fake_now` at `when` (its other options kept)."""
    options = str(conninfo_to_dict(base_dsn).get("options") or "")
    # ISO form, no spaces: libpq would split the option at one
    fake = f"-c jobs.fake_now={when.isoformat()}"
    return make_conninfo(base_dsn, options=f"{options} {fake}".strip())


class Clock:
    """The clock of one test database (the `sqljobs_db` fixture's `clock`)."""

    def __init__(self, dsn: Callable[[], str], moved: Callable[[datetime], None],
                 moved_async: Callable[[datetime], Awaitable[None]]) -> None:
        self._dsn = dsn
        self._moved = moved
        self._moved_async = moved_async

    def now(self) -> datetime:
        """`jobs.now()` as a new session of the test database sees it."""
        with psycopg.connect(self._dsn(), autocommit=True) as conn:
            return _now(conn)

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move `jobs.now()` forward by `seconds` for sessions opened from now on: the
        test database's `dsn` (and $SQLJOBS_DSN) carry the new time, and the pools of
        the apps it serves (`sqljobs_db.use(app)`) reopen on it. Answers the new time.
        Use `advance_async` when such an app has an asyncio pool open."""
        moved = self._next(seconds)
        self._moved(moved)
        return moved

    async def advance_async(self, seconds: float | timedelta) -> datetime:
        """`advance` for asyncio tests: also reopens the apps' asyncio pools."""
        moved = self._next(seconds)
        await self._moved_async(moved)
        return moved

    def _next(self, seconds: float | timedelta) -> datetime:
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise ClockError(f"the test clock only moves forward, not by {delta}")
        with psycopg.connect(self._dsn(), autocommit=True) as conn:
            row: Any = conn.execute(
                "select session_user::text,"
                " (select r.rolsuper or pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')"
                "    from pg_catalog.pg_roles r, pg_catalog.pg_namespace n"
                "   where r.rolname = session_user and n.nspname = 'jobs')").fetchone()
            role, may = row
            if not may:
                # the engine would refuse every call of this role (SJ019): say so now
                raise ClockError(
                    f"role {role} may not move the test clock: only the owner of schema "
                    f"jobs or a superuser may (connect the tests as the role that "
                    f"migrated the database)")
            return _now(conn) + delta


def _now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("select jobs.now()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


__all__ = ["Clock", "ClockError", "dsn_at"]
