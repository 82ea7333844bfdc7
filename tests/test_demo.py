"""`sqljobs demo`, run as CI runs it: a subprocess whose stdout is not a terminal, on a
fresh migrated database given with --dsn. The summary must say that every job kind did
what the demo expects, and the database must show it: the flaky mail retried once, the
CRM sync dead-lettered, one order shipped and the other compensated after its sleep and
its event, the cron task fired at least twice, the fan-out's children all succeeded.
Running it again on the same database works (keys are unique per run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from sqljobs._demo.summary import Report, inspect_commands, render

SQLJOBS = [sys.executable, "-c", "from sqljobs._cli import main; main()"]


def run_demo(dsn: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SQLJOBS_DSN", "DATABASE_URL")}
    # A generous time limit: a slow, shared machine must not cut the demo short (it ends
    # by itself as soon as every job is final, in about 10 s).
    return subprocess.run([*SQLJOBS, "demo", "--dsn", dsn, "--timeout", "300"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def first_run(db_dsn: str) -> subprocess.CompletedProcess[str]:
    return run_demo(db_dsn)


def rows(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)  # type: ignore[arg-type]
        return cur.fetchall()


def jobs_named(dsn: str, name: str) -> list[dict[str, Any]]:
    return rows(dsn, "select id, key, state::text as state, attempt, max_attempts, last_error, "
                     "result from jobs.job_view where name = %s order by id", name)


def test_the_demo_ends_by_itself_with_a_summary(first_run: subprocess.CompletedProcess[str],
                                                ) -> None:
    out = first_run.stdout
    assert first_run.returncode == 0, (out, first_run.stderr)
    assert "\x1b[" not in out  # not a terminal: plain lines, no live table
    assert "reached a final state" in out
    assert out.count("[ok]") == 5 and "UNEXPECTED" not in out
    assert "sqljobs demo: everything happened as expected" in out
    for said in ("the mail server answered 421 on attempt 1", "(the last one: dead-lettered)",
                 "emits the event demo.payment.confirmed", "COMPENSATION:",
                 "heartbeat (cron */2 * * * * *", "all 3 child jobs succeeded"):
        assert said in out, said
    # The summary tells what the database holds.
    for told in ("slept 2 s (parked)", "event demo.payment.confirmed received",
                 "compensations ran: charge-card, then reserve-stock undone",
                 "last_error.compensated = true", "succeeded on attempt 2",
                 "failed 3 attempts of 3", "ctx.step.invoke_many enqueued 3 demo.resize"):
        assert told in out, told
    # ... and how to look at it.
    assert "from jobs.job_view where name like 'demo.%'" in out
    assert "sqljobs schedules list --dsn" in out
    assert "sqljobs dev stop" not in out  # a DSN was given: no embedded server involved


def test_every_kind_reached_its_final_state(first_run: subprocess.CompletedProcess[str],
                                            db_dsn: str) -> None:
    assert first_run.returncode == 0, first_run.stdout
    mails = jobs_named(db_dsn, "demo.send_welcome")
    assert [m["state"] for m in mails] == ["succeeded"] * 3
    assert sorted(m["attempt"] for m in mails) == [1, 1, 2]

    [crm] = jobs_named(db_dsn, "demo.sync_crm")
    assert crm["state"] == "dead" and crm["attempt"] == crm["max_attempts"] == 3
    assert crm["last_error"]["message"].startswith("crm.example.com refused")

    orders = jobs_named(db_dsn, "demo.fulfil_order")
    assert sorted(o["state"] for o in orders) == ["failed", "succeeded"]
    for order in orders:
        steps = rows(db_dsn, "select name, kind, value from jobs.job_steps(%s)", order["id"])
        kinds = [s["kind"] for s in steps]
        assert kinds[:4] == ["run", "run", "sleep", "event"], steps
        assert steps[3]["value"]["event"] == "demo.payment.confirmed"
        if order["state"] == "succeeded":
            assert order["result"]["tracking"].startswith("TRK-")
        else:
            assert order["last_error"]["compensated"] is True
            assert order["last_error"]["kind"] == "terminal"
            undone = [s["name"] for s in steps if s["kind"] == "undo"]
            assert undone == ["sqljobs.undo:charge-card", "sqljobs.undo:reserve-stock"]

    beats = jobs_named(db_dsn, "demo.heartbeat")
    assert len(beats) >= 2 and {b["state"] for b in beats} == {"succeeded"}
    assert all(b["key"].startswith("demo.heartbeat@") for b in beats)
    [schedule] = rows(db_dsn, "select paused from jobs.schedules() where name = %s",
                      "demo.heartbeat")
    assert schedule["paused"] is True  # the demo pauses it when done

    [parent] = jobs_named(db_dsn, "demo.make_thumbnails")
    assert parent["state"] == "succeeded"
    children = jobs_named(db_dsn, "demo.resize")
    assert sorted(c["key"] for c in children) == [
        f"{parent['id']}:resize[{i}]" for i in range(3)]
    assert {c["state"] for c in children} == {"succeeded"}
    assert [t["width"] for t in parent["result"]["thumbnails"]] == [64, 256, 1024]

    live = rows(db_dsn, "select count(*) as n from jobs.job_view where name like 'demo.%%' "
                        "and state::text not in ('succeeded', 'failed', 'dead', 'cancelled')")
    assert live[0]["n"] == 0


def test_the_demo_runs_again_on_the_same_database(first_run: subprocess.CompletedProcess[str],
                                                  db_dsn: str) -> None:
    assert first_run.returncode == 0, first_run.stdout
    before = rows(db_dsn, "select count(*) as n from jobs.job_view where name like 'demo.%%'")
    again = run_demo(db_dsn)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert "sqljobs demo: everything happened as expected" in again.stdout
    after = rows(db_dsn, "select count(*) as n from jobs.job_view where name like 'demo.%%'")
    assert after[0]["n"] >= before[0]["n"] + 12  # new jobs, none deduped into the old ones
    assert len(jobs_named(db_dsn, "demo.sync_crm")) == 2


def test_a_run_that_did_not_finish_is_not_reported_as_a_success() -> None:
    report = Report(run_id="r", dsn="postgresql://x@h/db", embedded=False, first_id=1,
                    elapsed_s=50.0, finished=False, rows=[])
    lines, ok = render(report)
    assert not ok
    assert any("UNEXPECTED" in line for line in lines)
    assert lines[-1] == "sqljobs demo: something did not happen as expected (see above)"


def test_the_inspect_commands_exist_and_name_the_run() -> None:
    from tests.test_docs import _commands

    report = Report(run_id="r", dsn="postgresql://u@h:5432/db", embedded=True, first_id=7,
                    elapsed_s=9.0, finished=True, rows=[])
    commands = inspect_commands(report)
    assert any("jobs.job_view where name like 'demo.%' and id >= 7" in c for c in commands)
    assert any(c.startswith("sqljobs dev stop") for c in commands)  # the embedded server
    have = _commands()
    for command in commands:
        if command.startswith("sqljobs "):
            words = command.split("#")[0].split()[1:]
            path = " ".join(w for w in words[:2] if not w.startswith("-") and not w.isdigit())
            assert path in have, command
