"""`app.backfill(...)` end to end: real tables, a real worker, the ledger, the CLI.

The backfills are declared in tests/backfill_example_app.py; each handled row is
recorded in public.bf_effects, so a test counts how often each row was handled.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from sqljobs import App, BackfillStalled, ConfigurationError, queries
from sqljobs._app.backfills import Backfill, pending
from sqljobs._cli.main import app as cli
from tests import backfill_example_app as example
from tests.processes import scalar, wait_for
from tests.worker_helpers import running

runner = CliRunner()


@pytest.fixture
def items(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    example.reset(conn, 1050)
    yield conn


def job_state(conn: psycopg.Connection[Any], job_id: int) -> str:
    return str(scalar(conn, "select state::text from jobs.job where id = %s", (job_id,)))


def ledger(conn: psycopg.Connection[Any], name: str = "bf.items",
           environment: str = "default") -> dict[str, Any]:
    row = conn.execute(
        "select status, rows_done, batches, cursor, expected, checksum, started_by "
        "from jobs.backfills(%s) where name = %s and scope = ''", (environment, name)).fetchone()
    assert row is not None, f"no ledger row for {name}"
    keys = ("status", "rows_done", "batches", "cursor", "expected", "checksum", "started_by")
    return dict(zip(keys, row, strict=True))


def handled(conn: psycopg.Connection[Any]) -> dict[int, int]:
    """How many times each row was handled."""
    return dict(conn.execute("select id, count(*) from public.bf_effects group by id").fetchall())


def cli_run(dsn: str, *args: str) -> Any:
    return runner.invoke(cli, ["backfills", *args, "--dsn", dsn])


# -- declaration ---------------------------------------------------------------------------

def test_a_declaration_is_checked_where_it_is_written() -> None:
    app = App("postgresql://unused")
    with pytest.raises(ConfigurationError, match="exactly one of source"):
        app.backfill(name="x")(lambda batch: None)
    with pytest.raises(ConfigurationError, match="needs key"):
        app.backfill(name="x", source="select 1 as id")(lambda batch: None)
    with pytest.raises(ConfigurationError, match="batches per second"):
        app.backfill(name="x", source="select 1 as id", key="id", rate=0)(lambda batch: None)
    with pytest.raises(ConfigurationError, match="require itself"):
        app.backfill(name="x", source="select 1 as id", key="id", requires=["x"])(
            lambda batch: None)
    app.backfill(name="x", source="select 1 as id", key="id")(lambda batch: None)
    with pytest.raises(ConfigurationError, match="already declared"):
        app.backfill(name="x", source="select 1 as id", key="id")(lambda batch: None)
    assert "x" in app.jobs and "x" in app.backfills, "a backfill is an ordinary job"


def test_the_checksum_follows_the_declaration() -> None:
    def handle(batch: Any) -> None:
        return None

    def other(batch: Any) -> None:
        return batch  # type: ignore[no-any-return]

    base = Backfill(name="c", handle=handle, source="select id from t", key=("id",))
    assert base.checksum == Backfill(name="c", handle=handle, source="select id from t",
                                     key=("id",)).checksum
    for changed in (Backfill(name="c", handle=other, source="select id from t", key=("id",)),
                    Backfill(name="c", handle=handle, source="select id from u", key=("id",)),
                    Backfill(name="c", handle=handle, source="select id from t", key=("id",),
                             batch=10),
                    Backfill(name="c", handle=handle, source="select id from t", key=("id",),
                             count=5)):
        assert changed.checksum != base.checksum


# -- a run ---------------------------------------------------------------------------------

def test_a_keyset_backfill_handles_every_row_and_stores_only_cursors(
        db_dsn: str, items: psycopg.Connection[Any]) -> None:
    app = example.make_app(db_dsn, count=1050)
    with app:
        job = app.backfills["bf.items"].start(started_by="ci@deploy")
    with running(app):
        wait_for(lambda: job_state(items, job.id) == "succeeded", "the backfill to finish")
    assert handled(items) == {i: 1 for i in range(1, 1051)}
    row = ledger(items)
    assert row["status"] == "completed"
    assert (row["rows_done"], row["batches"], row["expected"]) == (1050, 11, 1050)
    assert row["cursor"] == [1050] and row["started_by"] == "ci@deploy"
    steps = dict(items.execute("select name, value from jobs.step where job_id = %s",
                               (job.id,)).fetchall())
    assert set(steps) == {"start"} | {f"batch-{n}" for n in range(1, 12)}
    assert steps["batch-1"] == {"cursor": [100], "rows": 100, "end": False,
                                "status": "running"}, "the step stores the cursor, not the page"
    assert steps["batch-11"]["end"] is True and steps["batch-11"]["rows"] == 50


def test_a_page_function_backfill(db_dsn: str, items: psycopg.Connection[Any]) -> None:
    app = example.make_app(db_dsn)
    with app:
        job = app.backfills["bf.pages"].start()
    with running(app):
        wait_for(lambda: job_state(items, job.id) == "succeeded", "the backfill to finish")
    assert handled(items) == {i: 1 for i in range(1, 21)}
    assert ledger(items, "bf.pages")["batches"] == 3
    assert ledger(items, "bf.pages")["cursor"] == 14, "the last cursor the function gave"


def test_a_completed_backfill_is_done_and_a_changed_one_is_reported_not_rerun(
        db_dsn: str, items: psycopg.Connection[Any]) -> None:
    app = example.make_app(db_dsn)
    with app, running(app):
        first = app.backfills["bf.items"].start()
        wait_for(lambda: job_state(items, first.id) == "succeeded", "the first run")
        again = app.backfills["bf.items"].start()
        wait_for(lambda: job_state(items, again.id) == "succeeded", "the second start")
    assert scalar(items, "select result->>'verdict' from jobs.job where id = %s",
                  (again.id,)) == "done"
    assert max(handled(items).values()) == 1, "done: nothing handled again"

    changed = example.make_app(db_dsn, variant=1)
    declared = {n: h.backfill for n, h in changed.backfills.items()}
    with changed:
        rows = changed.client.run(queries.backfills("default"))
        assert [(p.name, p.reason) for p in pending(declared, rows, "default")] == [
            ("bf.after", "never ran"), ("bf.items", "changed"), ("bf.pages", "never ran")]
        refused = changed.backfills["bf.items"].start()
        with running(changed):
            wait_for(lambda: job_state(items, refused.id) == "failed", "the refusal")
            assert "BackfillChecksumChanged" in json.dumps(scalar(
                items, "select last_error from jobs.job where id = %s", (refused.id,)))
            assert ledger(items)["status"] == "completed", "the ledger keeps the completed run"
            rerun = changed.backfills["bf.items"].start(rerun=True)
            wait_for(lambda: job_state(items, rerun.id) == "succeeded", "the rerun")
    assert set(handled(items).values()) == {2}, "rerun: every row handled again"
    assert ledger(items)["checksum"] == changed.backfills["bf.items"].backfill.checksum


# -- gates ---------------------------------------------------------------------------------

def test_an_environment_not_listed_is_refused(db_dsn: str,
                                              items: psycopg.Connection[Any]) -> None:
    app = example.make_app(db_dsn, environment="staging", environments=["production"])
    with app:
        job = app.backfills["bf.items"].start()
    with running(app):
        wait_for(lambda: job_state(items, job.id) == "failed", "the refusal")
    error = scalar(items, "select last_error from jobs.job where id = %s", (job.id,))
    assert "BackfillEnvironmentRefused" in json.dumps(error)
    assert scalar(items, "select attempt from jobs.job where id = %s", (job.id,)) == 1, \
        "a gate refusal is terminal: not retried"
    assert handled(items) == {}
    assert scalar(items, "select count(*) from jobs.backfill") == 0


def test_requires_must_have_completed_first(db_dsn: str,
                                            items: psycopg.Connection[Any]) -> None:
    app = example.make_app(db_dsn)
    with app, running(app):
        early = app.backfills["bf.after"].start()
        wait_for(lambda: job_state(items, early.id) == "failed", "the refusal")
        assert "BackfillRequiresUnmet" in json.dumps(scalar(
            items, "select last_error from jobs.job where id = %s", (early.id,)))
        first = app.backfills["bf.items"].start()
        wait_for(lambda: job_state(items, first.id) == "succeeded", "the requirement")
        later = app.backfills["bf.after"].start()
        wait_for(lambda: job_state(items, later.id) == "succeeded", "the dependent backfill")
    assert ledger(items, "bf.after")["status"] == "completed"


def test_a_count_not_reached_is_a_stall(db_dsn: str, items: psycopg.Connection[Any]) -> None:
    app = example.make_app(db_dsn, count=2000)
    with app:
        job = app.backfills["bf.items"].start()
    with running(app):
        wait_for(lambda: job_state(items, job.id) == "failed", "the stall")
    assert ledger(items)["status"] == "stalled"
    assert ledger(items)["rows_done"] == 1050
    assert BackfillStalled.__name__ in json.dumps(scalar(
        items, "select last_error from jobs.job where id = %s", (job.id,)))


def test_pending_lists_what_has_not_completed_and_exits_non_zero(
        db_dsn: str, items: psycopg.Connection[Any]) -> None:
    target = "tests.backfill_example_app:app"
    listed = cli_run(db_dsn, "--app", target, "--pending", "--json")
    assert listed.exit_code == 5, listed.output
    assert [p["name"] for p in json.loads(listed.output)["pending"]] == [
        "bf.after", "bf.items", "bf.pages"]
    app = example.make_app(db_dsn)
    with app, running(app):
        for name in ("bf.items", "bf.pages", "bf.after"):
            job = app.backfills[name].start()
            wait_for(lambda job_id=job.id: job_state(items, job_id) == "succeeded", name)
    clear = cli_run(db_dsn, "--app", target, "--pending")
    assert clear.exit_code == 0, clear.output
    assert "0 backfill(s) pending in default" in clear.output
    elsewhere = cli_run(db_dsn, "--app", target, "--pending", "--environment", "production")
    assert elsewhere.exit_code == 5, "completed in default is still pending in production"


# -- the operator --------------------------------------------------------------------------

def test_pause_parks_the_run_and_resume_goes_on_from_the_cursor(
        db_dsn: str, items: psycopg.Connection[Any]) -> None:
    items.execute("insert into public.bf_hold values (3)")  # batch 3 waits for the test
    app = example.make_app(db_dsn)
    with app:
        job = app.backfills["bf.items"].start()
    with running(app):
        wait_for(lambda: scalar(items, "select count(*) from public.bf_effects") == 200,
                 "two batches handled, the third held")
        paused = cli_run(db_dsn, "pause", "bf.items")
        assert paused.exit_code == 0, paused.output
        assert "backfill bf.items (default): paused at 200 rows" in paused.output
        items.execute("delete from public.bf_hold")
        wait_for(lambda: job_state(items, job.id) == "parked", "the run to park after batch 3")
        assert ledger(items)["rows_done"] == 300 and ledger(items)["status"] == "paused"
        listed = cli_run(db_dsn)
        assert listed.exit_code == 0 and "paused" in listed.output and "300" in listed.output
        again = cli_run(db_dsn, "pause", "bf.items")
        assert again.exit_code == 1 and "backfill_state" in again.output
        resumed = cli_run(db_dsn, "resume", "bf.items")
        assert resumed.exit_code == 0, resumed.output
        wait_for(lambda: job_state(items, job.id) == "succeeded", "the run to finish")
    assert handled(items) == {i: 1 for i in range(1, 1051)}
    assert ledger(items)["status"] == "completed"


def test_cancel_interrupts_the_rate_wait_and_a_new_run_goes_on(
        db_dsn: str, items: psycopg.Connection[Any]) -> None:
    # One batch per 1,000 s: after its first batch the run waits; only a cancel ends it.
    app = example.make_app(db_dsn, rate=0.001)
    with app:
        job = app.backfills["bf.items"].start()
    with running(app):
        wait_for(lambda: scalar(items, "select count(*) from jobs.backfill "
                                       "where rows_done = 100") == 1, "the first batch")
        cancelled = cli_run(db_dsn, "cancel", "bf.items")
        assert cancelled.exit_code == 0, cancelled.output
        wait_for(lambda: job_state(items, job.id) == "cancelled", "the job cancelled")
    assert ledger(items)["status"] == "cancelled"
    assert scalar(items, "select count(*) from public.bf_effects") == 100

    unthrottled = example.make_app(db_dsn)  # the same declaration (rate is no part of it)
    with unthrottled:
        again = unthrottled.backfills["bf.items"].start()
    with running(unthrottled):
        wait_for(lambda: job_state(items, again.id) == "succeeded", "the new run to finish")
    assert handled(items) == {i: 1 for i in range(1, 1051)}, "it went on from the cursor"
    assert ledger(items)["rows_done"] == 1050 and ledger(items)["status"] == "completed"


def test_rate_paces_the_batches(db_dsn: str, items: psycopg.Connection[Any]) -> None:
    # 500 rows, 100 a batch: five batches and the empty one that finds the end. At 5 batches
    # a second each batch starts at least 0.2 s after the one before it, so the run takes at
    # least (6 - 1) / 5 = 1 s (a lower bound: a slower machine only makes it longer),
    # from its claim (before the first batch) to its settle (after the last).
    example.reset(items, 500)
    app = example.make_app(db_dsn, rate=5)
    with app:
        job = app.backfills["bf.items"].start()
    with running(app):
        wait_for(lambda: job_state(items, job.id) == "succeeded", "the paced run")
    took = scalar(items, "select extract(epoch from finished_at - started_at)::float8 "
                         "from jobs.job where id = %s", (job.id,))
    row = ledger(items)
    assert (row["status"], row["rows_done"], row["batches"]) == ("completed", 500, 6)
    assert took >= (6 - 1) / 5, f"6 batches at rate=5 took {took:.2f} s"
    assert handled(items) == {i: 1 for i in range(1, 501)}


# -- a crash -------------------------------------------------------------------------------

@pytest.mark.slow
def test_sigkill_mid_batch_resumes_from_the_stored_cursor(
        db_dsn: str, items: psycopg.Connection[Any], tmp_path: Any) -> None:
    from tests.processes import spawner

    items.execute("insert into public.bf_hold values (5)")  # the kill lands inside batch 5
    app = example.make_app(db_dsn, count=1050)
    with app:
        job = app.backfills["bf.items"].start()
    worker_args = ("tests.backfill_example_app:app", "--queue", "default", "--lease", "2",
                   "--poll-interval", "0.2", "--concurrency", "1")
    with spawner(db_dsn, tmp_path, "worker") as start:
        first = start(*worker_args)
        wait_for(lambda: scalar(items, "select count(*) from jobs.step where job_id = %s "
                                       "and name = 'batch-4'", (job.id,)) == 1,
                 "four batches stored, the fifth held")
        first.kill()
        items.execute("delete from public.bf_hold")
        second = start(*worker_args)
        wait_for(lambda: job_state(items, job.id) == "succeeded", "the run on the second worker")
        second.kill()
    pids = dict(items.execute("select batch, count(distinct pid) from public.bf_effects "
                              "group by batch").fetchall())
    assert all(pids[b] == 1 for b in range(1, 12)), pids
    by_pid = items.execute("select min(batch), max(batch) from public.bf_effects "
                           "group by pid order by min(batch)").fetchall()
    assert by_pid == [(1, 4), (5, 11)], "the second process began at the batch in flight"
    assert handled(items) == {i: 1 for i in range(1, 1051)}, "no stored batch ran again"
    row = ledger(items)
    assert (row["status"], row["rows_done"], row["batches"]) == ("completed", 1050, 11)
    assert scalar(items, "select attempt from jobs.job where id = %s", (job.id,)) == 2


def test_describe_lists_the_backfills_beside_their_jobs() -> None:
    described = runner.invoke(cli, ["describe", "--app", "tests.backfill_example_app:app",
                                    "--json"])
    assert described.exit_code == 0, described.output
    found = json.loads(described.output)
    assert {"bf.items", "bf.pages", "bf.after"} <= {j["name"] for j in found["jobs"]}
    after = next(b for b in found["backfills"] if b["name"] == "bf.after")
    assert after["requires"] == ["bf.items"] and after["key"] == ["id"]
    assert after["checksum"] == example.app.backfills["bf.after"].backfill.checksum
    table = runner.invoke(cli, ["describe", "--app", "tests.backfill_example_app:app"])
    assert "# backfills" in table.output and "pages=" in table.output


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from examples.backfills import app as example_module

    app = example_module.app
    app.pools.given = db_dsn
    conn.execute(example_module.USERS)
    conn.execute("truncate public.users")
    conn.execute("insert into public.users select i, 'User' || i || '@Example.COM' "
                 "from generate_series(1, 1200) i")
    with app:
        job = app.backfills["users.lowercase_email"].start()
    with running(app):
        wait_for(lambda: job_state(conn, job.id) == "succeeded", "the example backfill")
    assert scalar(conn, "select count(*) from public.users where email <> lower(email)") == 0
    assert ledger(conn, "users.lowercase_email")["batches"] == 3


def test_the_cli_runs_a_backfill_idempotently_by_key(
        db_dsn: str, items: psycopg.Connection[Any]) -> None:
    target = "tests.backfill_example_app:app"
    first = cli_run(db_dsn, "run", "bf.pages", "--app", target, "--key", "release-1")
    again = cli_run(db_dsn, "run", "bf.pages", "--app", target, "--key", "release-1")
    assert first.exit_code == 0 and again.exit_code == 0, first.output + again.output
    assert "enqueued" in first.output and "already enqueued" in again.output
    assert scalar(items, "select count(*) from jobs.job where name = 'bf.pages'") == 1
    unknown = cli_run(db_dsn, "run", "bf.nope", "--app", target)
    assert unknown.exit_code == 2 and "no backfill named" in unknown.output
    app = example.make_app(db_dsn)
    with running(app):
        wait_for(lambda: scalar(items, "select state::text from jobs.job where name = "
                                       "'bf.pages'") == "succeeded", "the run")
    shown = json.loads(cli_run(db_dsn, "--json").output)
    assert [(b["name"], b["status"]) for b in shown["backfills"]] == [("bf.pages", "completed")]
