"""`sqljobs jobs list` (filters, keyset pagination) and `sqljobs jobs show` (attempts,
steps, children, waits) against the real database, through the redacting functions."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from sqljobs import InvalidArgument
from sqljobs._cli import app
from sqljobs._client import introspection, queries
from sqljobs._client.connection import Client

runner = CliRunner()


def sqljobs(dsn: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--dsn", dsn], env={"COLUMNS": "250"})


def listed(dsn: str, *args: str) -> tuple[list[dict[str, Any]], int | None]:
    result = sqljobs(dsn, "jobs", "list", "--json", *args)
    assert result.exit_code == 0, result.output
    page = json.loads(result.stdout)
    return page["jobs"], page["next_after_id"]


def test_list_filters_by_queue_name_tenant_key_and_state(conn: psycopg.Connection[Any],
                                                         db_dsn: str) -> None:
    client = Client(conn)
    for i in range(3):
        client.run(queries.enqueue("mail.send", f"m{i}", {}, {"queue": "mail", "tenant": "acme"}))
    client.run(queries.enqueue("mail.send", "other", {}, {"queue": "mail", "tenant": "globex"}))
    client.run(queries.enqueue("report.build", "r", {}, {}))
    assert len(listed(db_dsn, "--queue", "mail")[0]) == 4
    assert {r["key"] for r in listed(db_dsn, "--tenant", "globex")[0]} == {"other"}
    assert [r["key"] for r in listed(db_dsn, "--key", "m1")[0]] == ["m1"]
    assert [r["name"] for r in listed(db_dsn, "--name", "report.build")[0]] == ["report.build"]
    assert listed(db_dsn, "--state", "dead")[0] == []
    bad = sqljobs(db_dsn, "jobs", "list", "--created-after", "not a time")
    assert bad.exit_code == 1 and "invalid_argument" in bad.output


def test_list_filters_by_time(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    client = Client(conn)
    conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
    early = client.run(queries.enqueue("t.job", "early", {}, {})).id
    conn.execute("set jobs.fake_now = '2030-01-02 00:00:00+00'")
    late = client.run(queries.enqueue("t.job", "late", {}, {})).id
    job = client.run(queries.claim(["default"], "w", 1))[0]
    client.run(queries.ack(job.id, job.claim, None))  # `early` finished on the 2nd
    conn.execute("reset jobs.fake_now")
    ids = lambda *args: [r["id"] for r in listed(db_dsn, *args)[0]]  # noqa: E731
    assert ids("--created-after", "2030-01-01T12:00:00Z") == [late]
    assert ids("--created-before", "2030-01-01T12:00:00Z") == [early]
    assert ids("--finished-after", "2030-01-01T12:00:00Z") == [early]
    assert ids("--finished-before", "2030-01-01T12:00:00Z") == []


def test_keyset_pages_walk_every_job_once_newest_first(conn: psycopg.Connection[Any],
                                                       db_dsn: str) -> None:
    client = Client(conn)
    made = [client.run(queries.enqueue("page.job", f"k{i}", {}, {})).id for i in range(7)]
    seen: list[int] = []
    cursor: int | None = None
    pages = 0
    while True:
        args = ["--limit", "3"] + (["--after-id", str(cursor)] if cursor else [])
        rows, cursor = listed(db_dsn, *args)
        seen += [r["id"] for r in rows]
        pages += 1
        if cursor is None:
            break
    assert seen == sorted(made, reverse=True) and pages == 3
    table = sqljobs(db_dsn, "jobs", "list", "--limit", "3")
    assert f"next page: --after-id {sorted(made)[-3]}" in table.output
    with pytest.raises(InvalidArgument):
        client.run(introspection.list_jobs({}, None, 0))
    with pytest.raises(InvalidArgument):
        client.run(introspection.list_jobs({"colour": "red"}))


def test_show_prints_attempts_steps_children_and_waits(conn: psycopg.Connection[Any],
                                                       db_dsn: str) -> None:
    client = Client(conn)
    parent = client.run(queries.enqueue("flow.parent", "p", {"n": 1}, {"max_attempts": 3}))
    conn.execute("select jobs.job_type_put('flow.parent', '{}')")
    job = client.run(queries.claim(["default"], "w", 1))[0]
    client.run(queries.nack(job.id, job.claim, {"kind": "error", "message": "disk full"}))
    conn.execute("update jobs.job set run_at = now() where id = %s", (parent.id,))
    job = client.run(queries.claim(["default"], "w", 1))[0]
    conn.execute("select jobs.step_put(%s, %s, 'fetch', '{\"rows\": 3}')", (job.id, job.claim))
    conn.execute("select * from jobs.step_invoke(%s, %s, '{kids}', %s)",
                 (job.id, job.claim, json.dumps([{"name": "flow.child", "payload": {}}])))
    waiter = client.run(queries.enqueue("flow.waiter", "w", {}, {"queue": "waits"}))
    job = client.run(queries.claim(["waits"], "w", 1))[0]
    conn.execute("select * from jobs.step_wait(%s, %s, 'paid', "
                 "'[{\"event\": \"order.paid\", \"match\": {\"order\": 1}}]')",
                 (job.id, job.claim))
    result = sqljobs(db_dsn, "jobs", "show", str(parent.id))
    assert result.exit_code == 0, result.output
    out = result.output
    attempt = conn.execute("select attempt from jobs.job where id = %s", (parent.id,)).fetchone()
    assert attempt is not None
    assert "attempts" in out and f"{attempt[0]}/3" in out and "disk full" in out
    assert "fetch" in out and '"rows": 3' in out
    assert "children" in out and "flow.child" in out
    detail = json.loads(sqljobs(db_dsn, "jobs", "show", str(parent.id), "--json").output)
    assert detail["job"]["payload"] == {"n": 1}  # a registered type with no sensitive path
    assert [c["name"] for c in detail["children"]] == ["flow.child"]
    waits = sqljobs(db_dsn, "jobs", "show", str(waiter.id))
    assert "waiting for events" in waits.output and "order.paid" in waits.output
    missing = sqljobs(db_dsn, "jobs", "show", "999999")
    assert missing.exit_code == 4 and "no job has id 999999" in missing.output
