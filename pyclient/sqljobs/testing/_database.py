"""An isolated, migrated database per test: one template per session, a clone per test.

Migrating takes about a second; cloning the migrated template (`create database ...
template ...`) takes a tenth of that, so every test starts from an empty, current
schema without paying for the migration again. The next test's clone is made, and the
last test's dropped, in a background thread while a test runs: a test waits for its
database only when the one before it was quicker than a clone. Names carry a
per-session tag, so several sessions (pytest-xdist workers, two checkouts) can share
one server.
"""

from __future__ import annotations

import itertools
import os
import secrets
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from sqljobs._schema import migrate

_SESSION = f"{os.getpid()}_{secrets.token_hex(3)}"
_COUNTER = itertools.count(1)


def database_dsn(admin_dsn: str, name: str) -> str:
    """The same server and credentials, another database."""
    return make_conninfo(admin_dsn, dbname=name)


def _admin(admin_dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(admin_dsn, autocommit=True)


def drop(admin_dsn: str, name: str) -> None:
    with _admin(admin_dsn) as conn:
        try:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            # FORCE may end only sessions the role may signal: an autovacuum worker in
            # the database (PostgreSQL 18) is not one. A plain drop cancels it itself.
            conn.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(name)))


class Template:
    """The session's migrated template database and its clones (all dropped at close)."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.name = f"sqljobs_test_{_SESSION}_template"
        drop(admin_dsn, self.name)
        with _admin(admin_dsn) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(self.name)))
        try:
            migrate.upgrade(database_dsn(admin_dsn, self.name))
        except BaseException:
            drop(admin_dsn, self.name)
            raise
        # one thread: clones and drops never compete with each other for the server
        self._background = ThreadPoolExecutor(1, thread_name_prefix="sqljobs-testing")
        self._ready: Future[str] | None = None
        self._dropping: list[Future[None]] = []

    def clone(self) -> str:
        """A new database holding the migrated schema and no jobs; answers its name
        (and starts making the next one)."""
        ready, self._ready = self._ready, None
        name = ready.result() if ready is not None else self._clone()
        self._ready = self._background.submit(self._clone)
        return name

    def release(self, name: str) -> None:
        """Drop a clone, in the background (`close` waits for it)."""
        for done in [f for f in self._dropping if f.done()]:
            done.result()  # a drop that failed fails the test after it, not silently
        self._dropping = [f for f in self._dropping if not f.done()]
        self._dropping.append(self._background.submit(drop, self.admin_dsn, name))

    def _clone(self) -> str:
        name = f"sqljobs_test_{_SESSION}_{next(_COUNTER)}"
        with _admin(self.admin_dsn) as conn:
            # (PostgreSQL 15's default WAL_LOG strategy, not FILE_COPY: FILE_COPY forces
            # a checkpoint, several times slower on a busy server.)
            conn.execute(sql.SQL("create database {} template {}").format(
                sql.Identifier(name), sql.Identifier(self.name)))
        return name

    def close(self) -> None:
        """Drop what is left (the clone made ahead, the template); raise what a
        background drop raised."""
        try:
            if self._ready is not None:
                self.release(self._ready.result())
            for dropping in self._dropping:
                dropping.result()
        finally:
            self._background.shutdown(wait=True)
            drop(self.admin_dsn, self.name)


__all__ = ["Template", "database_dsn", "drop"]
