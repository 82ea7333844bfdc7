"""Find a PostgreSQL server for the tests (see conftest.py for the order)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def make_dsn(dsn: str, dbname: str) -> str:
    """The same server and credentials, another database."""
    return make_conninfo(dsn, dbname=dbname)


@contextmanager
def find_server() -> Iterator[str]:
    """Yield the DSN of an administrative database on a usable server."""
    if dsn := os.environ.get("SQLJOBS_TEST_DSN"):
        with psycopg.connect(dsn, connect_timeout=10):
            pass
        yield make_dsn(dsn, conninfo_to_dict(dsn).get("dbname") or "postgres")
        return
    raise RuntimeError("set SQLJOBS_TEST_DSN (other server paths: tests/harness/server.py)")
