"""`sqljobs jobs ...` and `sqljobs queues ...` against a real database."""

from __future__ import annotations

from typing import Any

import psycopg
from typer.testing import CliRunner

from sqljobs._cli import app
from sqljobs._client import queries
from sqljobs._client.connection import Client

runner = CliRunner()


def sqljobs(dsn: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--dsn", dsn], env={"COLUMNS": "200"})


def seed(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Two ready mail jobs, one dead report job, one succeeded report job."""
    client = Client(conn)
    ids = {}
    for key in ("m1", "m2"):
        ids[key] = client.run(queries.enqueue("mail.send", key, {"to": key}, {"queue": "mail"})).id
    for key in ("r1", "r2"):
        ids[key] = client.run(queries.enqueue("report.build", key, {}, {"max_attempts": 1})).id
    for job in client.run(queries.claim(["default"], "w", 2)):
        if job.key == "r1":
            client.run(queries.nack(job.id, job.claim, {"message": "disk full"}))
        else:
            client.run(queries.ack(job.id, job.claim, {"pages": 3}))
    return ids


def test_jobs_list_filters_and_shows_the_last_error(conn: psycopg.Connection[Any],
                                                    db_dsn: str) -> None:
    ids = seed(conn)
    result = sqljobs(db_dsn, "jobs", "list", "--state", "dead")
    assert result.exit_code == 0, result.output
    assert str(ids["r1"]) in result.output and "disk full" in result.output
    assert "mail.send" not in result.output
    result = sqljobs(db_dsn, "jobs", "list", "--queue", "mail")
    assert result.output.count("mail.send") == 2
    bogus = sqljobs(db_dsn, "jobs", "list", "--state", "bogus")
    assert bogus.exit_code == 2 and "unknown state bogus" in bogus.output


def test_jobs_show_prints_fields_result_and_payload(conn: psycopg.Connection[Any],
                                                    db_dsn: str) -> None:
    ids = seed(conn)
    result = sqljobs(db_dsn, "jobs", "show", str(ids["r2"]), "--payload")
    assert result.exit_code == 0, result.output
    assert "succeeded" in result.output and '"pages": 3' in result.output
    missing = sqljobs(db_dsn, "jobs", "show", "999999")
    assert missing.exit_code == 4 and "no job has id 999999" in missing.output


def test_jobs_retry_by_id_and_by_filter(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    ids = seed(conn)
    result = sqljobs(db_dsn, "jobs", "retry", str(ids["r1"]))
    assert result.exit_code == 0, result.output
    state = conn.execute("select state::text, attempt from jobs.job where id = %s",
                         (ids["r1"],)).fetchone()
    assert state == ("ready", 0)
    # A live job is refused with its coded error, and nothing changes.
    refused = sqljobs(db_dsn, "jobs", "retry", str(ids["m1"]))
    assert refused.exit_code == 1 and "job_live" in refused.output
    conn.execute("select jobs.cancel_where('{\"queue\": \"mail\"}')")
    bulk = sqljobs(db_dsn, "jobs", "retry", "--state", "cancelled", "--max", "1", "--yes")
    assert bulk.exit_code == 0, bulk.output
    assert "retry: 2 job(s)" in bulk.output
    row = conn.execute("select count(*) from jobs.job where queue = 'mail' and state = 'ready'"
                       ).fetchone()
    assert row is not None and row[0] == 2


def test_bulk_verbs_need_ids_or_a_filter(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    seed(conn)
    result = sqljobs(db_dsn, "jobs", "cancel")
    assert result.exit_code == 2 and "give job ids, or a filter" in result.output
    row = conn.execute("select count(*) from jobs.job where state = 'cancelled'").fetchone()
    assert row is not None and row[0] == 0


def test_cancel_promote_remove(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    ids = seed(conn)
    assert sqljobs(db_dsn, "jobs", "cancel", str(ids["m1"])).exit_code == 0
    assert sqljobs(db_dsn, "jobs", "remove", str(ids["m1"])).exit_code == 0
    finished = sqljobs(db_dsn, "jobs", "promote", str(ids["r2"]))
    assert finished.exit_code == 1 and "job_finished" in finished.output
    assert sqljobs(db_dsn, "jobs", "promote", "--queue", "mail", "--yes").exit_code == 0
    left = conn.execute("select key, state::text from jobs.job where queue = 'mail'").fetchall()
    assert left == [("m2", "ready")]


def test_queues_list_pause_resume(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    seed(conn)
    assert sqljobs(db_dsn, "queues", "pause", "mail").exit_code == 0
    listing = sqljobs(db_dsn, "queues", "list")
    assert listing.exit_code == 0, listing.output
    mail = next(line for line in listing.output.splitlines() if line.startswith("mail\t"))
    assert mail.split("\t")[1] == "yes"
    assert sqljobs(db_dsn, "queues", "resume", "mail").exit_code == 0
    row = conn.execute("select paused from jobs.queue where name = 'mail'").fetchone()
    assert row == (False,)
