"""The CLI for scripts: `--json` documents that match the database, plain output that
keeps full names when stdout is not a terminal, filter verbs that ask first, and the
exit codes of docs/reference/cli.md. CliRunner's stdout is not a terminal; the
subprocess tests run the installed `sqljobs` with stdout a pipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
from typer.testing import CliRunner

from sqljobs._cli import app
from sqljobs._client import queries
from sqljobs._client.connection import Client

runner = CliRunner()
LONG_QUEUE = "nightly-invoice-reconciliation-for-every-tenant"
LONG_NAME = "billing.reconcile_invoices_against_the_ledger"


def sqljobs(dsn: str, *args: str, columns: str = "80") -> Any:
    return runner.invoke(app, [*args, "--dsn", dsn], env={"COLUMNS": columns})


def as_json(dsn: str, *args: str) -> Any:
    result = sqljobs(dsn, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def seed(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Three ready jobs of a long name on a long queue, one dead mail job, one worker."""
    client = Client(conn)
    ids = {f"r{i}": client.run(queries.enqueue(LONG_NAME, f"r{i}", {"n": i},
                                               {"queue": LONG_QUEUE})).id for i in range(3)}
    ids["dead"] = client.run(queries.enqueue("mail.send", "d", {}, {"queue": "mail",
                                                                   "max_attempts": 1})).id
    job = client.run(queries.claim(["mail"], "w", 1))[0]
    client.run(queries.nack(job.id, job.claim, {"message": "smtp refused"}))
    client.run(queries.worker_heartbeat("worker-with-a-long-identifier-1", [LONG_QUEUE],
                                        [LONG_NAME], 4, 60, "host-a", 4242))
    return ids


def test_json_documents_match_the_database(conn: psycopg.Connection[Any],
                                           db_dsn: str) -> None:
    ids = seed(conn)
    queues = as_json(db_dsn, "queues", "list")
    by_name = {q["queue"]: q for q in queues["queues"]}
    assert by_name[LONG_QUEUE]["ready"] == 3 and by_name["mail"]["dead"] == 1
    assert queues["limits_in_use"] == []
    workers = as_json(db_dsn, "workers")
    assert [(w["id"], w["pid"]) for w in workers["workers"]] == [
        ("worker-with-a-long-identifier-1", 4242)]
    assert workers["unserved"] == []
    shown = as_json(db_dsn, "jobs", "show", str(ids["dead"]))
    assert shown["job"]["state"] == "dead" and shown["job"]["id"] == ids["dead"]
    assert sqljobs(db_dsn, "limits", "set", "two-at-a-time", "--scope", "queue",
                   "--target", LONG_QUEUE, "--concurrency", "2").exit_code == 0
    limits = as_json(db_dsn, "limits", "list")
    assert [(r["name"], r["concurrency"]) for r in limits["limits"]] == [("two-at-a-time", 2)]
    assert sqljobs(db_dsn, "schedules", "add", "hourly-reconcile", "--job", LONG_NAME,
                   "--cron", "0 * * * *").exit_code == 0
    schedules = as_json(db_dsn, "schedules", "list")
    assert [(s["name"], s["cron"]) for s in schedules["schedules"]] == [
        ("hourly-reconcile", "0 * * * *")]
    assert Client(conn).run(queries.lease_acquire("nightly-lock", "me", 60)) is not None
    leases = as_json(db_dsn, "leases")
    assert [(lease["name"], lease["holder"]) for lease in leases["leases"]] == [
        ("nightly-lock", "me")]
    retention = as_json(db_dsn, "retention", "show")
    default = next(r for r in retention["retention"] if r["queue"] == "*")
    assert default["succeeded_s"] == 86400
    assert sqljobs(db_dsn, "retention", "set", "--queue", "mail", "--dead",
                   "forever").exit_code == 0
    mail = next(r for r in as_json(db_dsn, "retention", "show")["retention"]
                if r["queue"] == "mail")
    assert mail["dead_s"] is None  # forever: JSON has no Infinity
    stats = as_json(db_dsn, "stats")
    assert [q["queue"] for q in stats["queues"]] == ["mail"] and stats["window_s"] == 300
    assert "jobs" in as_json(db_dsn, "describe")


def test_jobs_list_json_pages_with_the_cursor(conn: psycopg.Connection[Any],
                                              db_dsn: str) -> None:
    ids = seed(conn)
    first = as_json(db_dsn, "jobs", "list", "--queue", LONG_QUEUE, "--limit", "2")
    assert [j["id"] for j in first["jobs"]] == [ids["r2"], ids["r1"]]
    assert "payload" in first["jobs"][0]  # redacted: no worker registered its type
    assert first["next_after_id"] == ids["r1"]
    rest = as_json(db_dsn, "jobs", "list", "--queue", LONG_QUEUE, "--limit", "2",
                   "--after-id", str(first["next_after_id"]))
    assert [j["id"] for j in rest["jobs"]] == [ids["r0"]] and rest["next_after_id"] is None


def test_plain_output_keeps_full_names_when_not_a_terminal(conn: psycopg.Connection[Any],
                                                           db_dsn: str) -> None:
    seed(conn)
    conn.execute("select jobs.pause_queue(%s)", (LONG_QUEUE,))
    listing = sqljobs(db_dsn, "queues", "list")
    assert listing.exit_code == 0, listing.output
    lines = listing.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["queue", "paused", "ready"]
    row = next(line.split("\t") for line in lines if line.startswith(LONG_QUEUE + "\t"))
    assert row[:3] == [LONG_QUEUE, "yes", "3"] and len(row) == len(lines[0].split("\t"))
    assert "…" not in listing.stdout
    jobs = sqljobs(db_dsn, "jobs", "list")
    assert LONG_NAME in jobs.stdout and "smtp refused" in jobs.stdout
    assert "…" not in jobs.stdout
    workers = sqljobs(db_dsn, "workers").stdout
    assert workers.startswith("# 1 live worker(s)\nid\thost\tpid\t")
    assert "worker-with-a-long-identifier-1\thost-a\t4242\t" + LONG_QUEUE in workers


def _sqljobs_command() -> list[str]:
    installed = Path(sys.executable).with_name("sqljobs")
    return [str(installed)] if installed.exists() else [sys.executable, "-m", "sqljobs._cli"]


def test_a_pipe_at_80_columns_and_jq(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    ids = seed(conn)
    env = {**os.environ, "COLUMNS": "80", "SQLJOBS_DSN": db_dsn}
    plain = subprocess.run([*_sqljobs_command(), "queues", "list"], env=env,
                           stdout=subprocess.PIPE, text=True, check=True).stdout
    assert f"\n{LONG_QUEUE}\t\t3\t" in plain and "…" not in plain
    listing = subprocess.run([*_sqljobs_command(), "jobs", "list", "--state", "dead",
                              "--json"], env=env, stdout=subprocess.PIPE, check=True).stdout
    jq = shutil.which("jq")
    if jq:
        picked = subprocess.run([jq, "-r", ".jobs[] | [.id, .name, .last_error.message] | @tsv"],
                                input=listing, stdout=subprocess.PIPE, check=True).stdout
        assert picked.decode() == f"{ids['dead']}\tmail.send\tsmtp refused\n"
    else:
        job = json.loads(listing)["jobs"][0]
        assert (job["id"], job["last_error"]["message"]) == (ids["dead"], "smtp refused")


def _states(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute(
        "select state::text from jobs.job where queue = %s order by id", (LONG_QUEUE,))]


def test_a_filter_verb_counts_and_asks_first(conn: psycopg.Connection[Any],
                                             db_dsn: str) -> None:
    seed(conn)
    asked = sqljobs(db_dsn, "jobs", "cancel", "--queue", LONG_QUEUE, "--json")
    assert asked.exit_code == 3
    assert json.loads(asked.stdout) == {"matched": 3, "changed": 0}
    assert "cancel would touch 3 job(s)" in asked.stderr and "--yes" in asked.stderr
    assert _states(conn) == ["ready", "ready", "ready"]  # nothing changed, nothing left locked
    done = sqljobs(db_dsn, "jobs", "cancel", "--queue", LONG_QUEUE, "--yes", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"matched": 3, "changed": 3}
    assert _states(conn) == ["cancelled"] * 3
    # Nothing matches any more: nothing to confirm.
    again = sqljobs(db_dsn, "jobs", "cancel", "--queue", LONG_QUEUE)
    assert again.exit_code == 0 and again.stdout == "cancel: 0 job(s)\n"
    plain = sqljobs(db_dsn, "jobs", "remove", "--state", "cancelled", "-y")
    assert plain.exit_code == 0 and plain.stdout == "remove: 3 job(s)\n"
    assert _states(conn) == []


def test_exit_codes(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    ids = seed(conn)
    by_ids = sqljobs(db_dsn, "jobs", "retry", str(ids["dead"]), "--json")
    assert by_ids.exit_code == 0 and json.loads(by_ids.stdout) == {"matched": 1, "changed": 1}
    refused = sqljobs(db_dsn, "jobs", "retry", str(ids["r0"]))
    assert refused.exit_code == 1 and "job_live" in refused.stderr
    assert sqljobs(db_dsn, "jobs", "list", "--no-such-option").exit_code == 2
    assert sqljobs(db_dsn, "jobs", "retry", str(ids["r0"]), "--queue", "x").exit_code == 2
    assert sqljobs(db_dsn, "jobs", "remove", "--queue", LONG_QUEUE).exit_code == 3
    missing = sqljobs(db_dsn, "jobs", "show", "987654321", "--json")
    assert missing.exit_code == 4 and missing.stdout == ""


def _answer(db_dsn: str, answer: bytes) -> subprocess.CompletedProcess[bytes]:
    """`jobs cancel --queue ...` with stdin a terminal (a pty) that answers the prompt."""
    import pty

    leader, follower = pty.openpty()
    try:
        os.write(leader, answer)
        return subprocess.run([*_sqljobs_command(), "jobs", "cancel", "--queue", LONG_QUEUE],
                              env={**os.environ, "SQLJOBS_DSN": db_dsn}, stdin=follower,
                              capture_output=True, timeout=60)
    finally:
        os.close(follower)
        os.close(leader)


def test_on_a_terminal_a_filter_verb_asks(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    seed(conn)
    declined = _answer(db_dsn, b"n\n")
    assert declined.returncode == 3
    assert b"cancel 3 job(s) matching" in declined.stderr
    assert _states(conn) == ["ready"] * 3
    accepted = _answer(db_dsn, b"y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout == b"cancel: 3 job(s)\n"
    assert _states(conn) == ["cancelled"] * 3


def test_bytes_that_are_not_utf8_are_a_usage_error_in_a_real_process(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """The bytes of argv as a shell passes them (Python reads them as surrogates): one
    usage error, exit code 2, nothing sent; and a refusal of the engine is one line."""
    env = {**os.environ, "COLUMNS": "200", "SQLJOBS_DSN": db_dsn}
    for argv in ([b"enqueue", b"mail.\xff", b"--force"],
                 [b"enqueue", b"mail.send", b"--force", b"--payload", b'{"to": "\xc3("}'],
                 [b"jobs", b"list", b"--queue", b"\xfe\xff"]):
        ran = subprocess.run([*_sqljobs_command(), *argv], env=env, capture_output=True,
                             timeout=60, check=False)
        assert ran.returncode == 2, ran
        assert b"Traceback" not in ran.stderr + ran.stdout, ran.stderr
        assert b"is not valid UTF-8" in ran.stderr, ran.stderr
    engine = subprocess.run([*_sqljobs_command(), "enqueue", "mail.send", "--force",
                             "--max-attempts", "0"], env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert engine.returncode == 1, engine
    assert engine.stderr.startswith("error: SJ001 invalid_argument: ")
    assert engine.stderr.count("\n") == 1 and "Traceback" not in engine.stderr
    assert conn.execute("select count(*) from jobs.job").fetchone() == (0,)
