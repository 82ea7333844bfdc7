"""`sqljobs enqueue NAME` against a real database: the job it makes, dedupe, exit codes."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from typer.testing import CliRunner

from sqljobs.cli import app

runner = CliRunner()


def sqljobs(dsn: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--dsn", dsn])


def test_enqueue_makes_the_job_and_a_repeated_key_dedupes(conn: psycopg.Connection[Any],
                                                          db_dsn: str) -> None:
    first = sqljobs(db_dsn, "enqueue", "mail.send", "--payload", '{"to": "ada"}',
                    "--key", "k1", "--queue", "mail", "--priority", "3", "--delay", "60",
                    "--json")
    assert first.exit_code == 0, first.output
    made = json.loads(first.stdout)
    assert made["outcome"] == "created" and made["key"] == "k1"
    row = conn.execute(
        "select name, queue, priority, state::text, jobs.job_payload(id), "
        "run_at > jobs.now() + interval '50 seconds' from jobs.job where id = %s",
        (made["id"],)).fetchone()
    assert row == ("mail.send", "mail", 3, "ready", {"to": "ada"}, True)

    again = sqljobs(db_dsn, "enqueue", "mail.send", "--payload", '{"to": "ada"}',
                    "--key", "k1", "--queue", "mail")
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == f"deduped job {made['id']} mail.send (key k1)"

    fresh = [json.loads(sqljobs(db_dsn, "enqueue", "report.build", "--json").stdout)["id"]
             for _ in range(2)]
    assert len(set(fresh)) == 2, "without --key every call makes a new job"


def test_enqueue_refusals_have_exit_codes_and_change_nothing(conn: psycopg.Connection[Any],
                                                             db_dsn: str) -> None:
    not_json = sqljobs(db_dsn, "enqueue", "x.y", "--payload", "{nope")
    assert not_json.exit_code == 2 and "not JSON" in not_json.output
    refused = sqljobs(db_dsn, "enqueue", "x.y", "--max-attempts", "0")
    assert refused.exit_code == 1, refused.output
    assert "max_attempts" in refused.output
    assert conn.execute("select count(*) from jobs.job").fetchone() == (0,)
