"""The test harness itself: server discovery, pgTAP advice, dump normalisation."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from tests.harness.pgtap import _install_advice
from tests.harness.schema import normalise_dump
from tests.harness.server import docker_engine_answers, make_dsn


def test_missing_pgtap_advice_names_the_package_for_this_server(
        conn: psycopg.Connection[Any]) -> None:
    major = conn.info.server_version // 10000
    advice = _install_advice(conn)
    assert f"apt-get install postgresql-{major}-pgtap" in advice
    assert "make install" in advice


def test_docker_probe_is_quick_and_never_raises() -> None:
    started = time.monotonic()
    assert docker_engine_answers(timeout=1.0) in (True, False)
    assert time.monotonic() - started < 10


def test_make_dsn_keeps_the_server_and_changes_the_database() -> None:
    dsn = make_dsn("postgresql://u:p@/postgres?host=/tmp/sock&port=5433", "other")
    parts = dict(item.split("=", 1) for item in dsn.split())
    assert parts == {"user": "u", "password": "p", "dbname": "other", "host": "/tmp/sock",
                     "port": "5433"}


def test_dump_normalisation_drops_what_differs_by_nature() -> None:
    one = "--\n-- Dumped by pg_dump 18\n\\restrict abc\nCREATE SCHEMA jobs;\n\n\n" \
          "ALTER TABLE ONLY jobs.job ALTER COLUMN id SET (pg_attver=1);\n\\unrestrict abc\n"
    two = "\\restrict xyz\n-- other comment\nCREATE SCHEMA jobs;\n\n" \
          "ALTER TABLE ONLY jobs.job ALTER COLUMN id SET (pg_attver=2);\n\\unrestrict xyz\n"
    assert normalise_dump(one) == normalise_dump(two)
    assert "CREATE SCHEMA jobs;" in normalise_dump(one)
