"""`app.partitions(...)` end to end: native DDL on a real partitioned table, and
pg_partman's maintenance where the server has the extension."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from sqljobs import App, ConfigurationError, fresh_key
from sqljobs._app.partitions import Partitions, drop_partition, next_period, period_start
from tests.harness.server import make_dsn
from tests.processes import kill_and_wait_sessions, scalar, spawner, wait_for
from tests.worker_helpers import running

PARTMAN_DSN = os.environ.get("SQLJOBS_PARTMAN_DSN",
                             "postgresql://postgres@127.0.0.1:5432/postgres")


def children(conn: psycopg.Connection[Any], parent: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
        "where i.inhparent = %s::regclass order by 1", (parent,))]


def run(conn: psycopg.Connection[Any], app: App, name: str) -> tuple[str, Any]:
    with app:
        job = app.jobs[name].enqueue({}, key=fresh_key())
    with running(app):
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (job.id,)) in ("succeeded", "failed", "dead"), name)
    row = conn.execute("select state::text, coalesce(result, last_error) from jobs.job "
                       "where id = %s", (job.id,)).fetchone()
    assert row is not None
    return row[0], row[1]


def test_periods() -> None:
    assert period_start(date(2026, 12, 6), "week") == date(2026, 11, 30)
    assert period_start(date(2026, 12, 6), "month") == date(2026, 12, 1)
    assert next_period(date(2026, 12, 1), "month") == date(2027, 1, 1)
    assert next_period(date(2027, 1, 31), "day") == date(2027, 2, 1)
    with pytest.raises(ConfigurationError, match="day, week or month"):
        App("postgresql://unused").partitions("p", table="public.t", every="hour")  # type: ignore[arg-type]


def test_native_upkeep_creates_ahead_and_drops_past_retention(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("drop table if exists public.metrics")
    conn.execute("create table public.metrics (at timestamptz not null, v integer) "
                 "partition by range (at)")
    conn.execute("create table public.metrics_p20200101 partition of public.metrics "
                 "for values from ('2020-01-01 00:00+00') to ('2020-01-02 00:00+00')")
    conn.execute("create table public.metrics_legacy partition of public.metrics "
                 "for values from ('2019-01-01 00:00+00') to ('2019-02-01 00:00+00')")
    conn.execute("insert into public.metrics values ('2020-01-01 12:00+00', 1)")
    app = App(db_dsn)
    app.partitions("metrics.upkeep", table="public.metrics", every="day", ahead=2,
                   retention=timedelta(days=30))
    state, result = run(conn, app, "metrics.upkeep")
    assert state == "succeeded", result
    today = datetime.now(UTC).date()  # (a run across UTC midnight sees the next day)
    days = [today + timedelta(days=k) for k in range(3)]
    assert result["dropped"] == ["metrics_p20200101"]
    assert result["ensured"][:1] in ([f"metrics_p{days[0]:%Y%m%d}"],
                                     [f"metrics_p{days[1]:%Y%m%d}"])
    made = set(children(conn, "public.metrics"))
    assert "metrics_legacy" in made, "a partition of another name is never touched"
    assert "metrics_p20200101" not in made
    assert set(result["ensured"]) <= made and len(result["ensured"]) == 3
    assert scalar(conn, "select to_regclass('public.metrics_p20200101') is null"), "dropped"
    conn.execute("insert into public.metrics values (now(), 2), (now() + interval '1 day', 3)")
    steps = [r[0] for r in conn.execute(
        "select name from jobs.step where job_id = (select max(id) from jobs.job) "
        "order by ordinal")]
    assert steps == ["clock", "plan", *(f"create:{n}" for n in result["ensured"]),
                     "drop:metrics_p20200101"]
    again_state, again = run(conn, app, "metrics.upkeep")
    assert again_state == "succeeded" and again["dropped"] == []
    assert set(children(conn, "public.metrics")) == made, "a second run changes nothing"


def test_monthly_partitions_and_an_interrupted_drop(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("drop table if exists public.ticks")
    conn.execute("create table public.ticks (day date not null) partition by range (day)")
    conn.execute("create table public.ticks_p20200101 partition of public.ticks "
                 "for values from ('2020-01-01') to ('2020-02-01')")
    app = App(db_dsn)
    app.partitions("ticks.upkeep", table="public.ticks", every="month", ahead=0, retention=0)
    state, result = run(conn, app, "ticks.upkeep")
    assert state == "succeeded" and result["dropped"] == ["ticks_p20200101"]
    month = period_start(datetime.now(UTC).date(), "month")
    assert children(conn, "public.ticks") in ([f"ticks_p{month:%Y%m%d}"], [
        f"ticks_p{next_period(month, 'month'):%Y%m%d}"])
    # a crash between the drop step's detach and its drop: the retry's step finishes it
    conn.execute("create table public.ticks_p20200201 partition of public.ticks "
                 "for values from ('2020-02-01') to ('2020-03-01')")
    conn.execute("alter table public.ticks detach partition public.ticks_p20200201")
    drop_partition(conn, Partitions("x", "public.ticks", "month"), "ticks_p20200201")
    assert scalar(conn, "select to_regclass('public.ticks_p20200201') is null")


def test_a_table_not_partitioned_by_range_fails_at_once(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("create table if not exists public.flat (at timestamptz)")
    app = App(db_dsn)
    app.partitions("flat.upkeep", table="public.flat")
    state, error = run(conn, app, "flat.upkeep")
    assert state == "failed" and "not partitioned by range" in json.dumps(error)
    assert scalar(conn, "select attempt from jobs.job where name = 'flat.upkeep'") == 1


def _has_partman(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as probe:
            return bool(scalar(probe, "select count(*) from pg_available_extensions "
                                      "where name = 'pg_partman'"))
    except psycopg.OperationalError:
        return False


@pytest.fixture
def partman_dsn(db_dsn: str) -> Iterator[str]:
    """A migrated database on a server that has pg_partman: the test database when its
    server has it, else a fresh one on $SQLJOBS_PARTMAN_DSN's server (dropped after).
    Neither: a skip, or a failure under SQLJOBS_REQUIRE_PARTMAN=1 (CI installs it)."""
    if _has_partman(db_dsn):
        yield db_dsn
        return
    if not _has_partman(PARTMAN_DSN):
        reason = (f"no pg_partman on the test server nor on {PARTMAN_DSN} "
                  "($SQLJOBS_PARTMAN_DSN); Debian: apt-get install postgresql-<v>-partman")
        if os.environ.get("SQLJOBS_REQUIRE_PARTMAN") == "1":
            pytest.fail(reason + " (SQLJOBS_REQUIRE_PARTMAN=1)")
        pytest.skip(reason)
    from sqljobs._schema import migrate

    name = f"sqljobs_partman_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(PARTMAN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        dsn = make_dsn(PARTMAN_DSN, name)
        migrate.upgrade(dsn)
        yield dsn
    finally:
        with psycopg.connect(PARTMAN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(name)))


def test_with_pg_partman_the_upkeep_is_partmans_maintenance(partman_dsn: str) -> None:
    with psycopg.connect(partman_dsn, autocommit=True) as conn:
        conn.execute("create schema if not exists partman")
        conn.execute("create extension if not exists pg_partman schema partman")
        version = str(scalar(conn, "select extversion from pg_extension "
                                   "where extname = 'pg_partman'"))
        # 4.x: p_type 'native' and named intervals; 5.x: 'range' and intervals
        kind, every = ("native", "daily") if version.startswith("4.") else ("range", "1 day")
        conn.execute("drop table if exists public.pm_events")
        conn.execute("create table public.pm_events (at timestamptz not null, v integer) "
                     "partition by range (at)")
        conn.execute("select partman.create_parent(p_parent_table := 'public.pm_events', "
                     "p_control := 'at', p_type := %s, p_interval := %s, p_premake := 2)",
                     (kind, every))
        before = children(conn, "public.pm_events")
        conn.execute("update partman.part_config set retention = '1 day', "
                     "retention_keep_table = false where parent_table = 'public.pm_events'")
        app = App(partman_dsn)
        # declared without its schema: still found in part_config (as public.pm_events)
        app.partitions("pm.upkeep", table="pm_events", retention=timedelta(days=1))
        state, result = run(conn, app, "pm.upkeep")
        assert state == "succeeded" and result["by"] == "pg_partman", result
        after = children(conn, "public.pm_events")
        assert len(after) < len(before), "partman's retention dropped the oldest partition"
        oldest = min(name for name in before if not name.endswith("_default"))
        assert oldest not in after
        assert scalar(conn, "select string_agg(name, ',' order by ordinal) from jobs.step "
                            "where job_id = (select max(id) from jobs.job)") == \
            "clock,plan,partman", "one step runs partman's maintenance, no native DDL"


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from examples.partitions import app as module

    module.app.pools.given = db_dsn
    conn.execute("drop table if exists public.events")
    conn.execute(module.EVENTS)
    assert "events.partitions" in module.app.tasks
    state, result = run(conn, module.app, "events.partitions")
    assert state == "succeeded" and len(result["ensured"]) == 4
    conn.execute("insert into public.events values (now(), 'signup', '{}')")


@pytest.mark.slow
def test_sigkill_between_drop_steps_then_a_fresh_worker_leaves_exactly_the_expected_partitions(
        db_dsn: str, conn: psycopg.Connection[Any], tmp_path: Any) -> None:
    from examples.partitions import app as module

    module.app.pools.given = db_dsn
    conn.execute("drop table if exists public.events")
    conn.execute(module.EVENTS)
    for day in ("20200101", "20200102"):  # both past the example's 90-day retention
        start_day = datetime.strptime(day, "%Y%m%d").date()
        conn.execute(f"create table public.events_p{day} partition of public.events for values "
                     f"from ('{start_day} 00:00+00') to ('{start_day + timedelta(days=1)} "
                     "00:00+00')")
    conn.execute("create table public.events_legacy partition of public.events "
                 "for values from ('2019-01-01 00:00+00') to ('2019-02-01 00:00+00')")
    worker_args = ("examples.partitions.app:app", "--queue", "default", "--lease", "2",
                   "--poll-interval", "0.2", "--concurrency", "1")
    with psycopg.connect(db_dsn) as holder, spawner(db_dsn, tmp_path, "worker") as start:
        # the second drop step's detach waits for the test's lock on that partition
        holder.execute("lock table public.events_p20200102 in access share mode")
        with module.app:
            job = module.app.jobs["events.partitions"].enqueue({}, key=fresh_key())
        first = start(*worker_args)
        wait_for(lambda: scalar(conn, "select count(*) from jobs.step where job_id = %s "
                                      "and name = 'drop:events_p20200101'", (job.id,)) == 1
                 and scalar(conn, "select count(*) from pg_stat_activity where wait_event_type "
                                  "= 'Lock' and query ilike 'alter table%%detach%%'") == 1,
                 "the creates and the first drop stored, the second drop waiting")
        stored = conn.execute("select name, value, created_at from jobs.step where job_id = %s "
                              "order by ordinal", (job.id,)).fetchall()
        made = [v for n, v, _ in stored if n.startswith("create:")]
        assert len(made) == 4 and [n for n, _, _ in stored][:2] == ["clock", "plan"]
        first.kill()
        holder.rollback()
        kill_and_wait_sessions(conn, first)  # its orphaned detach, if any, has ended
        second = start(*worker_args)
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (job.id,)) == "succeeded", "the upkeep on the second worker")
        second.kill()
    result = scalar(conn, "select result from jobs.job where id = %s", (job.id,))
    assert result["ensured"] == made
    assert result["dropped"] == ["events_p20200101", "events_p20200102"]
    assert children(conn, "public.events") == sorted(["events_legacy", *made]), \
        "exactly the expected partitions"
    assert scalar(conn, "select to_regclass('public.events_p20200102') is null"), "dropped"
    assert conn.execute("select name, value, created_at from jobs.step where job_id = %s "
                        "and name <> 'drop:events_p20200102' order by ordinal",
                        (job.id,)).fetchall() == stored, "stored steps replayed, not rerun"
    assert scalar(conn, "select attempt from jobs.job where id = %s", (job.id,)) == 2
