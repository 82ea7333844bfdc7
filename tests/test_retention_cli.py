"""`sqljobs purge` and `sqljobs retention ...` against a real database."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from typer.testing import CliRunner

from sqljobs._cli import app
from tests.processes import scalar

runner = CliRunner()


def sqljobs(dsn: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--dsn", dsn], env={"COLUMNS": "200"})


def succeeded(conn: psycopg.Connection[Any], n: int, queue: str) -> None:
    conn.execute("select count(*) from jobs.enqueue_many(%s)", (json.dumps(
        [{"name": "cli.job", "key": f"{queue}-{i}", "queue": queue} for i in range(n)]),))
    rows = conn.execute("select id, claim from jobs.claim(%s, 'w', %s, 60)",
                        ([queue], n)).fetchall()
    conn.execute("select count(*) from jobs.ack_many(%s, %s)",
                 ([r[0] for r in rows], [r[1] for r in rows]))


def test_purge_dry_run_counts_then_purge_loops_batches_until_done(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    succeeded(conn, 25, "a")
    succeeded(conn, 5, "b")
    dry = sqljobs(db_dsn, "purge", "--dry-run", "--succeeded", "0")
    assert dry.exit_code == 0, dry.output
    assert "eligible now: 30 jobs" in dry.output and "nothing deleted" in dry.output
    assert scalar(conn, "select count(*) from jobs.job") == 30

    default = sqljobs(db_dsn, "purge")
    assert default.exit_code == 0, default.output
    assert "purged 0 jobs" in default.output, "the default keeps succeeded jobs a day"

    one_queue = sqljobs(db_dsn, "purge", "--succeeded", "0s", "--queue", "b")
    assert "purged 5 jobs" in one_queue.output
    assert scalar(conn, "select count(*) from jobs.job where queue = 'b'") == 0

    looped = sqljobs(db_dsn, "purge", "--succeeded", "0", "--batch", "10")
    assert looped.exit_code == 0, looped.output
    assert "purged 25 jobs" in looped.output and "in 3 batch(es)" in looped.output
    assert scalar(conn, "select count(*) from jobs.job") == 0


def test_retention_set_show_remove_share_the_stored_policy(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    result = sqljobs(db_dsn, "retention", "set", "--queue", "audit", "--succeeded", "forever",
                     "--dead", "2w")
    assert result.exit_code == 0, result.output
    assert scalar(conn, "select dead_s from jobs.retention_policy() where queue = 'audit'") \
        == 14 * 86400
    shown = sqljobs(db_dsn, "retention", "show")
    assert "audit" in shown.output and "forever" in shown.output and "2w" in shown.output
    succeeded(conn, 3, "audit")
    purged = sqljobs(db_dsn, "purge", "--succeeded", "0")
    assert "purged 0 jobs" in purged.output, "a queue's stored age beats a run-wide one"
    removed = sqljobs(db_dsn, "retention", "remove", "--queue", "audit")
    assert "removed" in removed.output
    assert scalar(conn, "select count(*) from jobs.retention") == 0


def test_bad_ages_and_batches_are_refused(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    succeeded(conn, 2, "x")
    for args in (("--succeeded", "soon"), ("--batch", "0"), ("--succeeded", "-5")):
        result = sqljobs(db_dsn, "purge", *args)
        assert result.exit_code == 2, (args, result.output)
    nothing = sqljobs(db_dsn, "retention", "set")
    assert nothing.exit_code == 2 and "at least one age" in nothing.output
    assert scalar(conn, "select count(*) from jobs.job") == 2, "nothing was deleted"


def test_an_empty_queue_name_is_refused_and_the_every_queue_policy_stays(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """`--queue ''` names no queue: it is not another way to write the every-queue ('*')
    policy. The refusal is one line naming its SQLSTATE, and no policy row changes."""
    kept = sqljobs(db_dsn, "retention", "set", "--succeeded", "1h")
    assert kept.exit_code == 0, kept.output
    before = conn.execute("select * from jobs.retention order by 1").fetchall()
    assert len(before) == 1
    for args in (("set", "--queue", "", "--succeeded", "0"), ("remove", "--queue", "")):
        result = sqljobs(db_dsn, "retention", *args)
        assert result.exit_code == 1, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: SJ001 invalid_argument: "), (
            args, result.output)
        assert "Traceback" not in result.output
        assert conn.execute("select * from jobs.retention order by 1").fetchall() == before
