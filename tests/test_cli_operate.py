"""`sqljobs jobs ...` and `sqljobs queues ...` against a real database."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from sqljobs._cli import app
from sqljobs._client import queries
from sqljobs._client.connection import Client
from tests.cli_helpers import one_line

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


def test_jobs_list_and_show_print_the_actor(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    client = Client(conn)
    by_user = client.run(queries.enqueue("actor.cli", "u", {}, {"actor": {"user": "42"}})).id
    by_service = client.run(queries.enqueue("actor.cli", "s", {}, {"actor": "svc:billing"})).id
    listing = sqljobs(db_dsn, "jobs", "list", "--name", "actor.cli")
    assert listing.exit_code == 0, listing.output
    assert "actor" in listing.output and '{"user":"42"}' in listing.output
    assert "svc:billing" in listing.output
    shown = sqljobs(db_dsn, "jobs", "show", str(by_user))
    assert shown.exit_code == 0, shown.output
    assert any(line.split()[:2] == ["actor", '{"user":'] for line in shown.output.splitlines())
    as_json = sqljobs(db_dsn, "jobs", "show", str(by_service), "--json")
    assert '"actor": "svc:billing"' in as_json.output


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


# -- bad input: a typed refusal, never a traceback, nothing changed ----------------------

BEYOND_BIGINT = "99999999999999999999"


def table(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("select id, state::text, attempt, run_at, queue from jobs.job "
                        "order by id").fetchall()


def refused(result: Any, code: int, pattern: str) -> None:
    assert result.exit_code == code, result.output
    # CliRunner catches what a command raises: an exception other than the exit is the
    # traceback a user would have seen
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output, result.output
    line = one_line(result, pattern)
    if code == 1:  # what the database refused is one line on stderr, and nothing else
        assert result.stderr.splitlines() == [line], result.stderr


JOB_ID_RANGE = r"is out of range: a job id from 1 to 9223372036854775807"

BAD_OPERATIONS = [
    # ids beyond a bigint (or below 1), numbers that are not finite: usage, exit 2
    pytest.param(["jobs", "show", BEYOND_BIGINT], 2,
                 rf"Invalid value for 'job_id': '{BEYOND_BIGINT}' {JOB_ID_RANGE}",
                 id="show-beyond-bigint"),
    pytest.param(["jobs", "show", "0"], 2, JOB_ID_RANGE, id="show-zero"),
    pytest.param(["jobs", "show", "seven"], 2, r"'seven' is not a job id", id="show-text"),
    *[pytest.param(["jobs", verb, "{m1}", BEYOND_BIGINT], 2,
                   rf"Invalid value for 'ids': '{BEYOND_BIGINT}' {JOB_ID_RANGE}",
                   id=f"{verb}-beyond-bigint")
      for verb in ("retry", "cancel", "promote", "remove")],
    pytest.param(["jobs", "list", "--after-id", BEYOND_BIGINT], 2,
                 rf"Invalid value for '--after-id': .*{JOB_ID_RANGE}", id="list-after-id"),
    pytest.param(["jobs", "list", "--limit", BEYOND_BIGINT], 2,
                 r"Invalid value for '--limit': .* is out of range", id="list-limit"),
    pytest.param(["jobs", "retry", "--state", "dead", "--max", BEYOND_BIGINT, "--yes"], 2,
                 r"Invalid value for '--max': .* is out of range", id="retry-max"),
    pytest.param(["queues", "pause", "mail\udcff"], 2, r"is not valid UTF-8",
                 id="queue-not-utf8"),
    pytest.param(["jobs", "cancel", "--queue", "mail\udcff", "--yes"], 2,
                 r"is not valid UTF-8", id="filter-not-utf8"),
    # every other float option of the CLI: finite and within its range
    pytest.param(["stats", "--minutes", "nan"], 2,
                 r"Invalid value for '--minutes': 'nan' is not a finite number", id="stats-nan"),
    pytest.param(["limits", "set", "l", "--scope", "global", "--rate", "1", "--per", "inf"],
                 2, r"Invalid value for '--per': 'inf' is not a finite number", id="limit-per"),
    pytest.param(["purge", "--pause", "nan"], 2, r"'nan' is not a finite number",
                 id="purge-pause"),
    pytest.param(["purge", "--succeeded", "9" * 400], 2, r"is more than a century",
                 id="purge-age-beyond-float"),
    pytest.param(["worker", "tests.worker_example_app:app", "--lease", "nan"], 2,
                 r"Invalid value for '--lease': 'nan' is not a finite number", id="worker-lease"),
    pytest.param(["worker", "tests.worker_example_app:app", "--concurrency", BEYOND_BIGINT],
                 2, r"Invalid value for '--concurrency' / '-c': .* is out of range: a whole "
                 r"number from 1 to 10000",
                 id="worker-concurrency"),
    pytest.param(["relay", "tests.worker_example_app:app", "--retention", "1e308"], 2,
                 r"Invalid value for '--retention': '1e308' is out of range", id="relay-retention"),
    pytest.param(["scheduler", "tests.worker_example_app:app", "--tick", "-inf"], 2,
                 r"Invalid value for '--tick': '-inf' is not a finite number",
                 id="scheduler-tick"),
    # the engine refuses: one line with its SQLSTATE and symbolic name, exit 1
    pytest.param(["jobs", "retry", "{m1}"], 1,
                 r"^error: SJ008 job_live: job \d+ is ready", id="coded-job-live"),
    pytest.param(["jobs", "cancel", "987654321"], 1,
                 r"^error: SJ006 job_not_found: no job has id 987654321$", id="coded-not-found"),
    pytest.param(["jobs", "list", "--limit", "0"], 1,
                 r"^error: SJ001 invalid_argument: .*limit", id="coded-limit"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD_OPERATIONS)
def test_bad_input_is_a_typed_refusal_never_a_traceback(
        conn: psycopg.Connection[Any], db_dsn: str, args: list[str], code: int,
        message: str) -> None:
    ids = seed(conn)
    before = table(conn)
    result = sqljobs(db_dsn, *[arg.format(**ids) for arg in args])
    refused(result, code, message)
    assert table(conn) == before


@pytest.fixture
def unprivileged_dsn(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[str]:
    """A login role granted nothing in the jobs schema."""
    role = f"sqljobs_nobody_{secrets.token_hex(4)}"
    conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
    try:
        yield make_conninfo(db_dsn, user=role)
    finally:
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


@pytest.mark.parametrize(("dsn", "code", "message"), [
    pytest.param("unprivileged", 1, r"^error: 42501: permission denied for schema jobs$",
                 id="insufficient-privilege"),
    pytest.param("postgresql://postgres@127.0.0.1:1/nowhere", 1,
                 r"^error: the database connection failed: .*\(OperationalError\)$",
                 id="unreachable"),
    pytest.param("no such dsn", 2, r"^error: the DSN is not valid: ", id="not-a-dsn"),
])
def test_a_database_that_refuses_or_is_not_there_is_one_line(
        conn: psycopg.Connection[Any], unprivileged_dsn: str, dsn: str, code: int,
        message: str) -> None:
    ids = seed(conn)
    before = table(conn)
    target = unprivileged_dsn if dsn == "unprivileged" else dsn
    for args in (["jobs", "list"], ["jobs", "cancel", str(ids["m1"])]):
        result = runner.invoke(app, [*args, "--dsn", target], env={"COLUMNS": "200"})
        refused(result, code, message)
        assert result.stderr.count("\n") == 1, result.stderr
    assert table(conn) == before
