"""`app.purge`, `app.rollup` and `app.refresh_view` end to end: real tables, a real worker.

The declarations are in tests/upkeep_example_app.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from sqljobs import App, ConfigurationError, PurgeTable, fresh_key
from sqljobs._app.maintenance import view_lock_key
from sqljobs._cli.main import app as cli
from tests import upkeep_example_app as example
from tests.processes import scalar, wait_for, wait_for_lock_wait
from tests.worker_helpers import running

runner = CliRunner()


@pytest.fixture
def tables(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    example.reset(conn)
    yield conn


def finished(conn: psycopg.Connection[Any], job_id: int) -> Any:
    wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                            (job_id,)) in ("succeeded", "failed", "dead"), f"job {job_id}")
    state, result = conn.execute("select state::text, result from jobs.job where id = %s",
                                 (job_id,)).fetchone() or (None, None)
    assert state == "succeeded", conn.execute(
        "select last_error from jobs.job where id = %s", (job_id,)).fetchone()
    return result


def seed_old_and_new(conn: psycopg.Connection[Any]) -> None:
    """app_events: 25 old, 5 old audit (kept by `where`), 7 recent; app_logs: 12 old, 3 recent."""
    conn.execute("insert into public.app_events (created_at, kind) "
                 "select now() - interval '40 days', 'click' from generate_series(1, 25)")
    conn.execute("insert into public.app_events (created_at, kind) "
                 "select now() - interval '40 days', 'audit' from generate_series(1, 5)")
    conn.execute("insert into public.app_events (created_at, kind) "
                 "select now() - interval '1 day', 'click' from generate_series(1, 7)")
    conn.execute("insert into public.app_logs (at) "
                 "select now() - interval '8 days' from generate_series(1, 12)")
    conn.execute("insert into public.app_logs (at) "
                 "select now() - interval '1 hour' from generate_series(1, 3)")


# -- purge ---------------------------------------------------------------------------------

def test_a_purge_is_refused_at_declaration_when_it_is_ambiguous() -> None:
    app = App("postgresql://unused")
    with pytest.raises(ConfigurationError, match="names no table"):
        app.purge("p0", [])
    app.purge("p1", [PurgeTable("public.t", "at", 60)])
    with pytest.raises(ConfigurationError, match="already purged"):
        app.purge("p2", [PurgeTable("public.t", "at", 3600)])
    with pytest.raises(ConfigurationError, match="already purged"):
        app.purge("p3", [PurgeTable("public.u", "at", 1), PurgeTable("public.u", "at", 2)])
    with pytest.raises(ConfigurationError, match="already declared"):
        app.purge("p1", [PurgeTable("public.v", "at", 60)])
    with pytest.raises(ConfigurationError, match="batch"):
        PurgeTable("public.t", "at", 60, batch=0)
    with pytest.raises(ConfigurationError, match="not a table name"):
        PurgeTable("a.b.c", "at", 60)
    app.purge("p4", [PurgeTable("public.w", "at", 60)], cron="0 * * * *")
    assert "p4" in app.tasks and "p1" in app.jobs and "p1" not in app.tasks


def test_a_purge_deletes_old_rows_one_table_per_step_on_one_clock(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    seed_old_and_new(tables)
    app = example.make_app(db_dsn)
    assert app.purges["app.retention"].dry_run() == {"public.app_events": 25,
                                                     "public.app_logs": 12}
    with app:
        job = app.jobs["app.retention"].enqueue({}, key=fresh_key())
    with running(app):
        result = finished(tables, job.id)
    assert result == {"public.app_events": 25, "public.app_logs": 12}
    assert scalar(tables, "select count(*) from public.app_events") == 12  # 5 audit + 7 new
    assert scalar(tables, "select count(*) from public.app_logs") == 3
    steps = [r[0] for r in tables.execute(
        "select name from jobs.step where job_id = %s order by ordinal", (job.id,))]
    assert steps == ["clock", "table:public.app_events", "table:public.app_logs"]


def test_a_purge_resumed_after_a_failure_keeps_its_clock_and_done_tables(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    seed_old_and_new(tables)
    tables.execute("alter table public.app_logs rename to app_logs_away")
    app = example.make_app(db_dsn)
    with app:
        job = app.jobs["app.retention"].enqueue({}, key=fresh_key())
    with running(app):
        wait_for(lambda: scalar(tables, "select attempt >= 1 and state = 'ready' from jobs.job "
                                        "where id = %s", (job.id,)), "the first attempt to fail")
        clock = scalar(tables, "select value from jobs.step where job_id = %s and name = "
                               "'clock'", (job.id,))
        # rows that became old after the first pass's clock reading are not this pass's
        tables.execute("insert into public.app_events (created_at, kind) "
                       "select now() - interval '40 days', 'late' from generate_series(1, 4)")
        tables.execute("update public.app_events set created_at = %s::timestamptz "
                       "+ interval '1 second' where kind = 'late'", (clock,))
        tables.execute("alter table public.app_logs_away rename to app_logs")
        tables.execute("update jobs.job set run_at = now() where id = %s", (job.id,))
        result = finished(tables, job.id)
    assert result == {"public.app_events": 25, "public.app_logs": 12}
    assert scalar(tables, "select value from jobs.step where job_id = %s and name = 'clock'",
                  (job.id,)) == clock
    assert scalar(tables, "select count(*) from public.app_events where kind = 'late'") == 4


def test_sqljobs_purge_dry_run_joins_the_apps_tables(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    seed_old_and_new(tables)
    shown = runner.invoke(cli, ["purge", "--dry-run", "--app", "tests.upkeep_example_app:app",
                                "--dsn", db_dsn])
    assert shown.exit_code == 0, shown.output
    assert "app.retention\tpublic.app_events\tcreated_at\t30d\t25" in shown.output
    assert "app.retention\tpublic.app_logs\tat\t1w\t12" in shown.output
    assert scalar(tables, "select count(*) from public.app_events") == 37, "nothing deleted"
    purged = runner.invoke(cli, ["purge", "--app", "tests.upkeep_example_app:app",
                                 "--dsn", db_dsn])
    assert purged.exit_code == 0, purged.output
    assert scalar(tables, "select count(*) from public.app_events") == 12
    assert scalar(tables, "select count(*) from public.app_logs") == 3


# -- rollup --------------------------------------------------------------------------------

def test_a_rollup_is_one_upsert_that_writes_only_what_changed(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    tables.execute("insert into public.sales (at, shop, amount) values "
                   "('2026-12-01 10:00Z', 'a', 5), ('2026-12-01 11:00Z', 'a', 7), "
                   "('2026-12-01 12:00Z', 'b', 1), ('2026-12-02 09:00Z', 'a', 2)")
    app = example.make_app(db_dsn)
    with app, running(app):
        first = finished(tables, app.jobs["sales.daily"].enqueue({}, key=fresh_key()).id)
        assert first == {"rows": 3}
        assert tables.execute("select day::text, shop, total, n from public.daily_sales "
                              "order by 1, 2").fetchall() == [
            ("2026-12-01", "a", 12, 2), ("2026-12-01", "b", 1, 1), ("2026-12-02", "a", 2, 1)]
        tables.execute("insert into public.sales (at, shop, amount) values "
                       "('2026-12-02 10:00Z', 'a', 3), ('2026-12-03 10:00Z', 'c', 4)")
        second = finished(tables, app.jobs["sales.daily"].enqueue({}, key=fresh_key()).id)
        assert second == {"rows": 2}, "one changed row, one new; the others not written"
        assert scalar(tables, "select total from public.daily_sales where day = '2026-12-02' "
                              "and shop = 'a'") == 5


def test_a_rollup_refuses_a_key_its_source_does_not_have(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)
    app.rollup("sales.bad", target="public.daily_sales", key=("day", "region"),
               source="select at::date as day, shop, sum(amount) as total, count(*) as n "
                      "from public.sales group by 1, 2")
    with app:
        job = app.jobs["sales.bad"].enqueue({}, key=fresh_key())
    with running(app):
        wait_for(lambda: scalar(tables, "select last_error is not null from jobs.job "
                                        "where id = %s", (job.id,)), "the refusal")
    assert "region" in str(scalar(tables, "select last_error from jobs.job where id = %s",
                                  (job.id,)))


# -- refresh_view --------------------------------------------------------------------------

def test_a_refresh_skips_while_another_holds_the_views_lock(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    tables.execute("insert into public.sales (at, shop, amount) values (now(), 'a', 5)")
    app = example.make_app(db_dsn)
    refresh = app.jobs["refresh:public.shop_totals"]
    with psycopg.connect(db_dsn) as holder, app, running(app):
        holder.execute("select pg_advisory_xact_lock(%s)", (view_lock_key("public.shop_totals"),))
        skipped = finished(tables, refresh.enqueue({}, key=fresh_key()).id)
        assert skipped == {"refreshed": False}
        assert scalar(tables, "select count(*) from public.shop_totals") == 0
        holder.rollback()  # another refresh ends
        done = finished(tables, refresh.enqueue({}, key=fresh_key()).id)
        assert done == {"refreshed": True}
        assert tables.execute("select shop, total from public.shop_totals").fetchall() == [
            ("a", 5)]


def test_upkeep_jobs_with_cron_are_tasks() -> None:
    app = App("postgresql://unused")
    app.rollup("r", target="public.t", source="select 1 as id", key="id", cron="*/5 * * * *")
    app.refresh_view("public.mv", cron="0 * * * *", concurrently=False)
    assert set(app.tasks) == {"r", "refresh:public.mv"}
    with pytest.raises(ConfigurationError, match="needs key"):
        app.rollup("r2", target="public.t", source="select 1 as id", key=())


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from examples.upkeep import app as module

    app = module.app
    app.pools.given = db_dsn
    conn.execute(module.TABLES)
    conn.execute("truncate public.page_views, public.daily_views")
    conn.execute("insert into public.page_views (viewed_at, page) values "
                 "(now() - interval '100 days', '/old'), (now(), '/a'), (now(), '/a'), "
                 "(now(), '/b')")
    assert {"views.retention", "views.daily", "refresh:public.top_pages"} <= set(app.tasks)
    with app, running(app):
        for name in ("views.retention", "views.daily", "refresh:public.top_pages"):
            finished(conn, app.jobs[name].enqueue({}, key=fresh_key()).id)
    assert scalar(conn, "select count(*) from public.page_views") == 3
    assert conn.execute("select page, views from public.daily_views order by page").fetchall() \
        == [("/a", 2), ("/b", 1)]
    assert conn.execute("select page, views from public.top_pages order by page").fetchall() \
        == [("/a", 2), ("/b", 1)]


def test_describe_lists_each_factory_with_its_kind() -> None:
    described = runner.invoke(cli, ["describe", "--app", "tests.upkeep_example_app:app",
                                    "--json"])
    assert described.exit_code == 0, described.output
    kinds = {f["name"]: f["kind"] for f in json.loads(described.output)["factories"]}
    assert kinds == {"app.retention": "purge", "sales.daily": "rollup",
                     "refresh:public.shop_totals": "refresh_view"}
    table = runner.invoke(cli, ["describe", "--app", "tests.upkeep_example_app:app"]).output
    assert "# data factories" in table and "public.app_logs" in table


@pytest.mark.slow
def test_sigkill_mid_purge_resumes_without_repeating_a_finished_table(
        db_dsn: str, tables: psycopg.Connection[Any], tmp_path: Any) -> None:
    from tests.processes import spawner

    seed_old_and_new(tables)
    app = example.make_app(db_dsn)
    args = ("tests.upkeep_example_app:app", "--queue", "default", "--lease", "2",
            "--poll-interval", "0.2", "--concurrency", "1")
    with psycopg.connect(db_dsn) as holder, spawner(db_dsn, tmp_path, "worker") as start:
        holder.execute("lock table public.app_logs in access exclusive mode")
        with app:
            job = app.jobs["app.retention"].enqueue({}, key=fresh_key())
        first = start(*args)
        wait_for_lock_wait(tables, 'delete from "public"."app_logs"%',
                           "the purge of the second table waiting for the test's lock")
        done_first = tables.execute("select value, created_at from jobs.step where job_id = %s "
                                    "and name in ('clock', 'table:public.app_events') "
                                    "order by ordinal", (job.id,)).fetchall()
        assert [v for v, _ in done_first][1:] == [25], "the first table was done and stored"
        first.kill()
        holder.rollback()
        second = start(*args)
        result = finished(tables, job.id)
        second.kill()
    assert result == {"public.app_events": 25, "public.app_logs": 12}
    assert tables.execute("select value, created_at from jobs.step where job_id = %s and name "
                          "in ('clock', 'table:public.app_events') order by ordinal",
                          (job.id,)).fetchall() == done_first, "replayed, not run again"
    assert scalar(tables, "select attempt from jobs.job where id = %s", (job.id,)) == 2
    assert scalar(tables, "select count(*) from public.app_logs") == 3


@pytest.mark.slow
def test_sigkill_mid_rollup_then_a_fresh_worker_leaves_the_summary_equal_to_its_source(
        db_dsn: str, tables: psycopg.Connection[Any], tmp_path: Any) -> None:
    from tests.processes import kill_and_wait_sessions, spawner

    tables.execute("insert into public.sales (at, shop, amount) select "
                   "'2026-12-01 00:00Z'::timestamptz + i * interval '1 hour', "
                   "(array['a', 'b', 'c'])[1 + mod(i, 3)], i from generate_series(1, 200) i")
    tables.execute("insert into public.daily_sales values ('2026-12-01', 'a', -1, -1)")
    app = example.make_app(db_dsn)
    args = ("tests.upkeep_example_app:app", "--queue", "default", "--lease", "2",
            "--poll-interval", "0.2", "--concurrency", "1")
    with psycopg.connect(db_dsn) as holder, spawner(db_dsn, tmp_path, "worker") as start:
        holder.execute("lock table public.daily_sales in share mode")
        with app:
            job = app.jobs["sales.daily"].enqueue({}, key=fresh_key())
        first = start(*args)
        wait_for_lock_wait(tables, 'insert into "public"."daily_sales"%',
                           "the rollup's upsert waiting for the test's lock")
        first.kill()
        # rows the killed run may or may not have seen: the next run must fold them in
        tables.execute("insert into public.sales (at, shop, amount) values "
                       "('2026-12-01 05:30Z', 'a', 1000), ('2026-12-20 00:00Z', 'd', 7)")
        holder.rollback()
        kill_and_wait_sessions(tables, first)  # its orphaned upsert, if any, has ended
        second = start(*args)
        finished(tables, job.id)  # (the killed run's upsert may have committed: at least once)
        second.kill()
    assert scalar(tables, "select attempt from jobs.job where id = %s", (job.id,)) == 2
    summary = tables.execute("select day, shop, total, n from public.daily_sales "
                             "order by 1, 2").fetchall()
    source = tables.execute("select at::date, shop, sum(amount), count(*) from public.sales "
                            "group by 1, 2 order by 1, 2").fetchall()
    assert summary == source, "every group once, with the source's aggregate"


def test_a_rollup_keeps_the_summary_rows_of_groups_whose_source_rows_are_gone(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    tables.execute("insert into public.sales (at, shop, amount) values "
                   "('2026-12-01 10:00Z', 'a', 5), ('2026-12-01 11:00Z', 'b', 7)")
    app = example.make_app(db_dsn)
    with app, running(app):
        assert finished(tables, app.jobs["sales.daily"].enqueue({}, key=fresh_key()).id) \
            == {"rows": 2}
        tables.execute("delete from public.sales where shop = 'b'")
        assert finished(tables, app.jobs["sales.daily"].enqueue({}, key=fresh_key()).id) \
            == {"rows": 0}, "an upsert: nothing to insert or change, nothing deleted"
    assert tables.execute("select shop, total from public.daily_sales order by 1").fetchall() \
        == [("a", 5), ("b", 7)], "the vanished group's summary row is kept as it was"
