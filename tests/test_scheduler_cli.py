"""`sqljobs schedules ...`: add, list with next fire times, pause, resume, remove, and
refusals with exit code 2 and a clear message."""

from __future__ import annotations

from typing import Any

import psycopg
from typer.testing import CliRunner

from sqljobs._cli import app as cli

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def run(*args: str) -> Any:
    return runner.invoke(cli, list(args), env=WIDE)


def test_schedules_are_managed_from_the_cli(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    added = run("schedules", "add", "nightly", "--job", "roles.note", "--cron", "0 2 * * *",
                "--timezone", "Europe/Paris", "--payload", '{"text": "night"}',
                "--app", "tests.roles_example_app:app", "--dsn", db_dsn)
    assert added.exit_code == 0, added.output
    assert "schedule nightly added" in added.output
    row = conn.execute("select job_name, timezone, options, payload from jobs.schedules()"
                       ).fetchone()
    # The app declares roles.note: its queue and retry policy are the defaults.
    assert row is not None and row[0] == "roles.note" and row[1] == "Europe/Paris"
    assert row[2]["queue"] == "roles" and row[3] == {"text": "night"}

    listed = run("schedules", "list", "--dsn", db_dsn)
    assert listed.exit_code == 0, listed.output
    assert "1 schedule(s)" in listed.output and "nightly" in listed.output
    assert "active" in listed.output

    assert run("schedules", "pause", "nightly", "--dsn", db_dsn).exit_code == 0
    assert "paused" in run("schedules", "list", "--dsn", db_dsn).output
    assert run("schedules", "resume", "nightly", "--dsn", db_dsn).exit_code == 0
    assert run("schedules", "remove", "nightly", "--dsn", db_dsn).exit_code == 0
    assert conn.execute("select count(*) from jobs.schedule").fetchone() == (0,)


def test_the_cli_refuses_bad_schedules(db_dsn: str) -> None:
    for args, message in [
        (["--cron", "0 25 * * *"], "bad cron expression '0 25 * * *'"),
        (["--cron", "0 2 * * *", "--timezone", "Nowhere/Land"], "unknown time zone"),
        (["--cron", "0 2 * * *", "--catch-up", "sometimes"], "catch_up must be one of"),
        (["--cron", "0 2 * * *", "--payload", "{oops"], "--payload is not JSON"),
    ]:
        result = run("schedules", "add", "x", "--job", "some.job", *args, "--dsn", db_dsn)
        assert result.exit_code == 2, args
        assert message in result.output, result.output
    missing = run("schedules", "pause", "nope", "--dsn", db_dsn)
    assert missing.exit_code == 1 and "no schedule named 'nope'" in missing.output
