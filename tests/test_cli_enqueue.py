"""`sqljobs enqueue NAME` against a real database: the job it makes, dedupe, exit codes."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from sqljobs._cli import app

runner = CliRunner()


def sqljobs(dsn: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--dsn", dsn])


def register(conn: psycopg.Connection[Any], name: str, queue: str | None) -> None:
    """What a worker declaring `name` on `queue` writes as it starts."""
    conn.execute("select jobs.job_type_put(%s, %s)", (name, Jsonb({"queue": queue})))


def test_enqueue_makes_the_job_and_a_repeated_key_dedupes(conn: psycopg.Connection[Any],
                                                          db_dsn: str) -> None:
    register(conn, "mail.send", "mail")
    register(conn, "report.build", None)
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


def test_enqueue_goes_to_the_queue_the_workers_of_the_name_serve(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    register(conn, "slow.nap", "slow")
    made = sqljobs(db_dsn, "enqueue", "slow.nap", "--json")
    assert made.exit_code == 0, made.output
    queue = "select queue from jobs.job where id = %s"
    assert conn.execute(queue, (json.loads(made.stdout)["id"],)).fetchone() == ("slow",)

    # an explicit other queue is taken, and warned about: no worker of slow.nap serves it
    other = sqljobs(db_dsn, "enqueue", "slow.nap", "--queue", "default", "--json")
    assert other.exit_code == 0, other.output
    assert "warning" in other.stderr and "'slow'" in other.stderr
    assert conn.execute(queue, (json.loads(other.stdout)["id"],)).fetchone() == ("default",)


def test_an_unregistered_name_is_refused_unless_forced(conn: psycopg.Connection[Any],
                                                       db_dsn: str) -> None:
    refused = sqljobs(db_dsn, "enqueue", "nobody.runs.this")
    assert refused.exit_code == 1
    assert "no worker has registered" in refused.stderr and "--force" in refused.stderr
    assert conn.execute("select count(*) from jobs.job").fetchone() == (0,)
    forced = sqljobs(db_dsn, "enqueue", "nobody.runs.this", "--force", "--json")
    assert forced.exit_code == 0, forced.output
    assert conn.execute("select name, queue from jobs.job").fetchall() == [
        ("nobody.runs.this", "default")]


def test_enqueue_refusals_have_exit_codes_and_change_nothing(conn: psycopg.Connection[Any],
                                                             db_dsn: str) -> None:
    register(conn, "x.y", None)
    not_json = sqljobs(db_dsn, "enqueue", "x.y", "--payload", "{nope")
    assert not_json.exit_code == 2 and "not JSON" in not_json.output
    refused = sqljobs(db_dsn, "enqueue", "x.y", "--max-attempts", "0")
    assert refused.exit_code == 1, refused.output
    assert "max_attempts" in refused.output
    assert conn.execute("select count(*) from jobs.job").fetchone() == (0,)
