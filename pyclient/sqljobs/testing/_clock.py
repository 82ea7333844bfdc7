"""The test clock: `clock.advance(seconds)` moves `jobs.now()` for one test database.

The engine reads all time through `jobs.now()`, which honours the session setting
`jobs.fake_now` only for the schema's owner or a superuser (sql/00_schema.sql; any
other role gets SJ019). The clock stores that setting as a default of the test's own
role in the test's own database (`alter role ... in database ... set`), so every
session the test opens afterwards (the app's pool, a drain's worker) starts at the new
time, and no other role and no other database ever sees it. It dies with the database.

Time stands still once moved: a lease, a retry's backoff or a sleep ends only when the
test advances the clock past it, never because the machine was slow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from sqljobs._client.errors import SqljobsError


class ClockError(SqljobsError, ValueError):
    """The test clock was asked to go backwards, or by a role that may not move it."""


class Clock:
    """The clock of one test database (the `sqljobs_db` fixture's `clock`)."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        # what refreshes sessions opened before a move (TestDatabase.use)
        self.on_advance: list[Callable[[], None]] = []
        self.on_advance_async: list[Callable[[], Awaitable[None]]] = []

    def now(self) -> datetime:
        """`jobs.now()` as a new session of the test database sees it."""
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            return _now(conn)

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move `jobs.now()` forward by `seconds` for sessions opened from now on, and
        reopen the pools of the apps the test database serves (`sqljobs_db.use(app)`).
        Answers the new time. Use `advance_async` when such an app has an asyncio
        pool open."""
        moved = self._move(seconds)
        for refresh in self.on_advance:
            refresh()
        return moved

    async def advance_async(self, seconds: float | timedelta) -> datetime:
        """`advance` for asyncio tests: also reopens the apps' asyncio pools."""
        moved = self._move(seconds)
        for refresh_async in self.on_advance_async:
            await refresh_async()
        return moved

    def _move(self, seconds: float | timedelta) -> datetime:
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise ClockError(f"the test clock only moves forward, not by {delta}")
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            row: Any = conn.execute(
                "select session_user::text, current_database()::text, "
                "(select r.rolsuper or pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')"
                "   from pg_catalog.pg_roles r, pg_catalog.pg_namespace n"
                "  where r.rolname = session_user and n.nspname = 'jobs')").fetchone()
            role, database, may = row
            if not may:
                # the engine would refuse every call of this role (SJ019): say so now
                raise ClockError(
                    f"role {role} may not move the test clock: only the owner of schema "
                    f"jobs or a superuser may (connect the tests as the role that "
                    f"migrated the database)")
            moved = _now(conn) + delta
            conn.execute(sql.SQL("alter role {} in database {} set jobs.fake_now = {}").format(
                sql.Identifier(role), sql.Identifier(database), sql.Literal(moved.isoformat())))
        return moved


def _now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("select jobs.now()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


__all__ = ["Clock", "ClockError"]
