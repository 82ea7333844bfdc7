"""`sqljobs worker` and `sqljobs workers`: argument errors, and the listing."""

from __future__ import annotations

from typing import Any

import psycopg
from typer.testing import CliRunner

from sqljobs._cli import app as cli

runner = CliRunner()


def test_worker_refuses_a_target_that_is_not_an_app(db_dsn: str) -> None:
    result = runner.invoke(cli, ["worker", "tests.worker_example_app:QUEUE", "--dsn", db_dsn])
    assert result.exit_code == 2
    assert "is a str, not a sqljobs App" in result.output


def test_worker_refuses_a_missing_module_or_attribute(db_dsn: str) -> None:
    for target in ("tests.no_such_module:app", "tests.worker_example_app:nope", "no_colon"):
        result = runner.invoke(cli, ["worker", target, "--dsn", db_dsn])
        assert result.exit_code == 2, target


def test_workers_lists_live_workers_and_unserved_jobs(conn: psycopg.Connection[Any],
                                                      db_dsn: str) -> None:
    conn.execute("select jobs.worker_heartbeat('w-cli', array['mail'], array['mail.send'], 3, "
                 "60, 'hostx', 4242)")
    conn.execute("select jobs.enqueue('mail.digest', 'k', '{}', '{\"queue\": \"mail\"}')")
    result = runner.invoke(cli, ["workers", "--dsn", db_dsn], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "1 live worker(s)" in result.output
    assert "w-cli" in result.output and "hostx" in result.output and "4242" in result.output
    assert "no live worker can run" in result.output and "mail.digest" in result.output
