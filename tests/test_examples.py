"""The programs under examples/ run, against a migrated database.

- examples/webapp: the FastAPI app, in-process with its test client: a request's job
  exists exactly when the request's transaction committed; the worker then runs it.
- examples/plain_sql/enqueue.sql: run with psql, twice (the second run dedupes).
- examples/plain_sql/enqueue.mjs: run with Node.js and the `pg` package, when `node`
  and `npm` are on this machine.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.harness.schema import find_psql
from tests.node import install, needs_node, pg_env
from tests.worker_helpers import running

ROOT = Path(__file__).resolve().parents[1]
PLAIN_SQL = ROOT / "examples" / "plain_sql"


def jobs_with_key(conn: psycopg.Connection[Any], key: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select name, queue, state::text, jobs.job_payload(id) from jobs.job_view "
        "where key = %s", (key,)).fetchall()


@pytest.fixture
def client(db_dsn: str, conn: psycopg.Connection[Any]) -> Any:
    from examples.webapp.main import create_app
    from fastapi.testclient import TestClient

    conn.execute("drop table if exists public.signup")
    with TestClient(create_app(db_dsn)) as test_client:
        yield test_client
    conn.execute("drop table if exists public.signup")


def test_the_web_app_enqueues_in_its_request_transaction(
        client: Any, conn: psycopg.Connection[Any]) -> None:
    response = client.post("/signups", json={"email": "ada@example.com"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["job_outcome"] == "created"
    key = f"signup:{body['id']}:welcome"
    assert jobs_with_key(conn, key) == [
        ("examples.send_welcome", "mail", "ready",
         {"signup_id": body["id"], "email": "ada@example.com"})]
    assert conn.execute("select id from signup where email = 'ada@example.com'"
                        ).fetchone() == (body["id"],)


def test_a_request_that_fails_after_the_enqueue_leaves_no_job(
        client: Any, conn: psycopg.Connection[Any]) -> None:
    response = client.post("/signups", json={"email": "eve@invalid.example"})
    assert response.status_code == 422
    assert conn.execute("select count(*) from signup").fetchone() == (0,)
    # The enqueue ran (it took an id from the sequence) but rolled back with the request.
    assert conn.execute("select count(*) from jobs.job_view").fetchone() == (0,)


def test_the_example_worker_runs_the_web_apps_job(
        client: Any, conn: psycopg.Connection[Any], db_dsn: str) -> None:
    from examples.webapp import jobs

    job_id = client.post("/signups", json={"email": "bob@example.com"}).json()["job_id"]
    jobs.app.pools.given = db_dsn
    try:
        with running(jobs.app):
            result = jobs.app.result(job_id, timeout=30)
    finally:
        jobs.app.close()
        jobs.app.pools.given = None
    assert result["sent_to"] == "bob@example.com"


def test_the_psql_producer_enqueues_and_a_second_run_dedupes(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    psql = find_psql()
    assert psql is not None, "no psql: install postgresql-client or the test extra"
    command = [psql, db_dsn, "-X", "-q", "-v", "signup_id=42", "-v", "email=ada@example.com",
               "-f", str(PLAIN_SQL / "enqueue.sql")]
    first = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("created") == 4 and "deduped" not in first.stdout
    assert jobs_with_key(conn, "signup:42:welcome") == [
        ("examples.send_welcome", "mail", "ready", {"signup_id": 42, "email": "ada@example.com"})]
    reports = conn.execute("select key, queue from jobs.job_view "
                           "where name = 'examples.daily_report' order by key").fetchall()
    assert reports == [("report:2030-01-01", "reports"), ("report:2030-01-02", "reports"),
                       ("report:2030-01-03", "reports")]

    second = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("deduped") == 4 and "created" not in second.stdout
    assert conn.execute("select count(*) from jobs.job_view").fetchone() == (4,)


@needs_node
def test_the_node_producer_enqueues_with_pg(db_dsn: str, conn: psycopg.Connection[Any],
                                            tmp_path: Path) -> None:
    install(PLAIN_SQL, ["package.json", "enqueue.mjs"], tmp_path)
    env = pg_env(db_dsn)
    command = ["node", "enqueue.mjs", "77", "node@example.com"]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["outcome"] == "created"
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {**json.loads(first.stdout), "outcome": "deduped"}
    assert jobs_with_key(conn, "signup:77:welcome") == [
        ("examples.send_welcome", "mail", "ready",
         {"signup_id": 77, "email": "node@example.com"})]
