"""`sqljobs enqueue NAME` against a real database: the job it makes, dedupe, exit codes."""

from __future__ import annotations

import json
import secrets
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from sqljobs._cli import app
from tests.cli_helpers import one_line

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


# -- bad input: a typed refusal, never a traceback, nothing written -----------------------

DEEP_JSON = "[" * 100_000 + "]" * 100_000
LONG_NAME = secrets.token_hex(5000)  # 10,000 characters pglz cannot squeeze into an index

BAD_ENQUEUES = [
    # the engine refuses: one line, its SQLSTATE (and name, when it is one of ours), exit 1
    pytest.param([LONG_NAME, "--force"], 1,
                 r"^error: (SJ001 invalid_argument: .*name|54000: index row)", id="long-name"),
    pytest.param(["x.y", "--max-attempts", "0"], 1,
                 r"^error: SJ001 invalid_argument: .*max_attempts must be at least 1$",
                 id="coded-refusal"),
    pytest.param(["x.y", "--payload", '{"to": "\\udcff"}'], 1,
                 r"^error: 22P02: invalid input syntax for type json$", id="lone-surrogate-escape"),
    pytest.param(["x.y", "--payload", '{"to": "\\u0000"}'], 1,
                 r"^error: 22P05: ", id="nul-escape"),
    # bad usage, found before anything is sent: exit 2
    pytest.param(["x\udcffy", "--force"], 2, r"the argument 'x\\udcffy' is not valid UTF-8",
                 id="name-not-utf8"),
    pytest.param(["x.y", "--key", "k\udcff"], 2, r"is not valid UTF-8", id="key-not-utf8"),
    pytest.param(["x.y", "--payload", '{"to": "\udcff"}'], 2, r"is not valid UTF-8",
                 id="payload-not-utf8"),
    pytest.param(["x.y", "--delay", "nan"], 2,
                 r"Invalid value for '--delay': 'nan' is not a finite number", id="delay-nan"),
    pytest.param(["x.y", "--delay", "inf"], 2,
                 r"Invalid value for '--delay': 'inf' is not a finite number", id="delay-inf"),
    pytest.param(["x.y", "--delay", "-Infinity"], 2, r"'-Infinity' is not a finite number",
                 id="delay-minus-infinity"),
    pytest.param(["x.y", "--delay", "1e308"], 2,
                 r"Invalid value for '--delay': '1e308' is out of range: from 0 to 3\.2e9 "
                 r"seconds", id="delay-1e308"),
    pytest.param(["x.y", "--delay", "-1"], 2, r"'-1' is out of range", id="delay-negative"),
    pytest.param(["x.y", "--delay", "soon"], 2, r"'soon' is not a number", id="delay-text"),
    pytest.param(["x.y", "--key", ""], 2,
                 r"Invalid value for '--key': an idempotency key cannot be empty", id="empty-key"),
    pytest.param(["x.y", "--priority", "99999999999999999999"], 2,
                 r"Invalid value for '--priority': '99999999999999999999' is out of range",
                 id="priority-beyond-bigint"),
    pytest.param(["x.y", "--max-attempts", "9" * 5000], 2,
                 r"Invalid value for '--max-attempts': '9{40}\.\.\.' is out of range",
                 id="max-attempts-5000-digits"),
    pytest.param(["x.y", "--payload", '{"to": NaN}'], 2,
                 r"^error: --payload is not JSON: NaN is not JSON$", id="payload-nan"),
    pytest.param(["x.y", "--payload", DEEP_JSON], 2,
                 r"^error: --payload is nested deeper than this client reads$",
                 id="payload-deep"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD_ENQUEUES)
def test_bad_input_is_a_typed_refusal_never_a_traceback(
        conn: psycopg.Connection[Any], db_dsn: str, args: list[str], code: int,
        message: str) -> None:
    register(conn, "x.y", None)
    result = runner.invoke(app, ["enqueue", *args, "--dsn", db_dsn], env={"COLUMNS": "250"})
    assert result.exit_code == code, result.output
    # CliRunner catches what a command raises: an exception other than the exit is the
    # traceback a user would have seen
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output, result.output
    line = one_line(result, message)
    if code == 1:  # what the database refused is one line on stderr, and nothing else
        assert result.stderr.splitlines() == [line] and result.stdout == ""
    assert conn.execute("select count(*) from jobs.job").fetchone() == (0,)
