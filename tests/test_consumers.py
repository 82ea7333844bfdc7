"""`app.consumer(...)` end to end over a PostgreSQL table source: turns whose effects and
cursor commit together; a failing turn that leaves nothing; the self-enqueue refusal; and
a SIGKILL mid-turn after which the turn repeats and nothing is lost or applied twice."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from sqljobs import App, ConsumerBatch, ConsumerSelfEnqueue, RetryPolicy, TableSource
from sqljobs.testing import drain, fire_due
from tests.processes import kill_and_wait_sessions, scalar, spawner, wait_for
from tests.worker_helpers import running

SCHEMA = """
create table if not exists public.cons_in (id bigint primary key, at timestamptz not null,
                                           v integer not null);
create table if not exists public.cons_out (src bigint not null, v integer not null,
                                            turn integer not null);
"""

app = App()  # the worker processes' app: `tests.test_consumers:app` ($SQLJOBS_DSN)


@app.consumer("cons.crash", source=TableSource("public.cons_in"), batch=10, cron=None)
def crash_handler(batch: ConsumerBatch) -> None:
    for row in batch.rows:
        batch.conn.execute("insert into public.cons_out values (%s, %s, %s)",
                           (row["id"], row["v"], batch.turn))
    if any(row["id"] > 20 for row in batch.rows):  # the third turn waits for the test
        batch.conn.execute("select pg_advisory_xact_lock(4242)")


def ended(conn: psycopg.Connection[Any], job_id: int) -> tuple[str, Any, Any]:
    wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                            (job_id,)) in ("succeeded", "failed", "dead"), f"job {job_id}")
    row = conn.execute("select state::text, result, last_error from jobs.job where id = %s",
                       (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


@pytest.fixture
def tables(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute(SCHEMA)
    conn.execute("truncate public.cons_in, public.cons_out")
    conn.execute("delete from jobs.consumer")
    conn.execute("insert into public.cons_in select i, '2030-01-01'::timestamptz "
                 "+ (i / 4) * interval '1 second', i * 10 from generate_series(1, 25) i")
    return conn


def applied(conn: psycopg.Connection[Any]) -> list[int]:
    return [r[0] for r in conn.execute("select src from public.cons_out order by src, turn")]


def test_turns_commit_effects_with_the_cursor_and_a_later_run_goes_on(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    local = App(db_dsn)

    @local.consumer("cons.copy", source=TableSource("public.cons_in", columns=("v",)),
                    batch=10)
    def copy(batch: ConsumerBatch) -> None:
        with batch.conn.cursor() as cur:
            cur.executemany("insert into public.cons_out values (%s, %s, %s)",
                            [(r["id"], r["v"], batch.turn) for r in batch.rows])

    assert "cons.copy.supervisor" in local.jobs, "the supervisor task is declared"
    with local:
        first = copy.start()
        assert copy.start().id == first.id, "a second start while one is live is the same run"
        with running(local):
            state, result, _ = ended(tables, first.id)
            assert state == "succeeded" and result == {"turns": 3, "rows": 25}
            tables.execute("insert into public.cons_in select i, now(), i from "
                           "generate_series(26, 30) i")
            state, result, _ = ended(tables, copy.start().id)
        assert result == {"turns": 1, "rows": 5}
        position = copy.position()
    assert applied(tables) == list(range(1, 31))
    assert position is not None and position["turn"] == 4 and position["rows_done"] == 30
    assert position["cursor"] == [30]


def test_the_supervisor_fired_on_its_schedule_starts_a_run(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    def declared(dsn: str) -> tuple[App, Any]:
        local = App(dsn)

        @local.consumer("cons.sup", source=TableSource("public.cons_in", columns=("v",)),
                        batch=10, cron="*/5 * * * *")
        def copy(batch: ConsumerBatch) -> None:
            with batch.conn.cursor() as cur:
                cur.executemany("insert into public.cons_out values (%s, %s, %s)",
                                [(r["id"], r["v"], batch.turn) for r in batch.rows])
        return local, copy

    now, _ = declared(db_dsn)
    tables.execute("delete from jobs.schedule where name = 'cons.sup.supervisor'")
    assert fire_due(now) == 0, "registered; its first occurrence is still ahead"
    watermark = scalar(tables, "select watermark from jobs.schedules()"
                               " where name = 'cons.sup.supervisor'")
    # five minutes on, by the engine's clock (jobs.fake_now, the testing kit's clock)
    later, _ = declared(make_conninfo(db_dsn, options="-c jobs.fake_now="
                                         f"{(watermark + timedelta(minutes=5)).isoformat()}"))
    drained = drain(later, cron=True)
    assert drained.fired == 1
    assert [(o.name, o.outcome) for o in drained.outcomes] == [
        ("cons.sup.supervisor", "succeeded"), ("cons.sup", "succeeded")]
    [run] = drained.of("cons.sup")
    assert scalar(tables, "select result from jobs.job where id = %s", (run.job_id,)) == {
        "turns": 3, "rows": 25}
    assert applied(tables) == list(range(1, 26))
    assert scalar(tables, "select result->>'run' from jobs.job where name ="
                          " 'cons.sup.supervisor'") == str(run.job_id)


def test_a_column_key_with_a_tiebreaker_skips_no_row(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    local = App(db_dsn)

    @local.consumer("cons.by_time", source=TableSource("public.cons_in", key=("at", "id")),
                    batch=3, cron=None)
    def by_time(batch: ConsumerBatch) -> None:
        for r in batch.rows:
            batch.conn.execute("insert into public.cons_out values (%s, %s, %s)",
                               (r["id"], r["v"], batch.turn))

    with local, running(local):
        state, result, _ = ended(tables, by_time.start().id)
    assert state == "succeeded" and result["rows"] == 25
    assert applied(tables) == list(range(1, 26)), "rows sharing a timestamp were skipped"


def test_a_failing_turn_leaves_neither_effects_nor_a_moved_cursor(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    local = App(db_dsn)

    @local.consumer("cons.fails", source=TableSource("public.cons_in"), batch=10, cron=None,
                    retry=RetryPolicy(max_attempts=1))
    def fails(batch: ConsumerBatch) -> None:
        for r in batch.rows:
            batch.conn.execute("insert into public.cons_out values (%s, %s, %s)",
                               (r["id"], r["v"], batch.turn))
        if batch.turn == 2:
            raise RuntimeError("the second turn fails")

    with local, running(local):
        job = fails.start()
        state, _, _ = ended(tables, job.id)
    assert state in ("failed", "dead")
    assert applied(tables) == list(range(1, 11)), "only the committed first turn"
    assert fails.position() is not None and fails.position()["turn"] == 1  # type: ignore[index]


def test_a_consumer_refuses_to_enqueue_itself(
        db_dsn: str, tables: psycopg.Connection[Any]) -> None:
    local = App(db_dsn)
    refused: list[BaseException] = []

    @local.consumer("cons.loop", source=TableSource("public.cons_in"), batch=10, cron=None)
    def loop(batch: ConsumerBatch) -> None:
        try:
            loop_handle.start()
        except ConsumerSelfEnqueue as error:
            refused.append(error)
            raise

    loop_handle = loop
    with local, running(local):
        job = loop.start()
        state, _, error = ended(tables, job.id)
    assert refused and state == "failed" and error["type"].endswith("ConsumerSelfEnqueue")
    assert scalar(tables, "select count(*) from jobs.job where name = 'cons.loop'") == 1
    assert applied(tables) == []


@pytest.mark.slow
def test_sigkill_mid_turn_repeats_that_turn_and_nothing_is_lost_or_doubled(
        db_dsn: str, tables: psycopg.Connection[Any], tmp_path: Path) -> None:
    app.pools.given = db_dsn
    with app:
        job = crash_handler.start()
    holder = psycopg.connect(db_dsn, autocommit=True)
    holder.execute("select pg_advisory_lock(4242)")
    args = ("tests.test_consumers:app", "--queue", "default", "--lease", "2",
            "--poll-interval", "0.2", "--concurrency", "1")
    try:
        with spawner(db_dsn, tmp_path, "worker") as start:
            # the backend waiting on the lock must notice its client died (see test_ledger)
            first = start(*args, env={"PGOPTIONS": "-c client_connection_check_interval=100"})
            wait_for(lambda: scalar(tables, "select count(*) from jobs.consumer where name = "
                                            "'cons.crash' and turn = 2"), "two turns committed")
            wait_for(lambda: scalar(
                tables, "select count(*) from pg_stat_activity where wait_event_type = "
                        "'Lock' and query like '%%pg_advisory_xact_lock%%'"), "turn 3 held")
            kill_and_wait_sessions(tables, first)
            assert applied(tables) == list(range(1, 21)), "turn 3's effects outlived the kill"
            holder.execute("select pg_advisory_unlock(4242)")
            start(*args)
            state, result, _ = ended(tables, job.id)
    finally:
        holder.close()
    assert state == "succeeded" and result == {"turns": 1, "rows": 5}
    assert applied(tables) == list(range(1, 26)), "a row lost or applied twice"
    assert scalar(tables, "select turn from jobs.consumer where name = 'cons.crash'") == 3


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from examples.consumers import app as module

    example = module.app
    example.pools.given = db_dsn
    conn.execute(module.TABLES)
    conn.execute("truncate public.orders, public.customer_totals")
    conn.execute("insert into public.orders (customer, amount_cents) select "
                 "case when i % 2 = 0 then 'ann' else 'bob' end, i from "
                 "generate_series(1, 1200) i")
    with example, running(example):
        state, result, _ = ended(conn, module.add_to_totals.start().id)
    assert state == "succeeded" and result == {"turns": 3, "rows": 1200}
    totals = dict(conn.execute("select customer, total_cents from public.customer_totals"
                               ).fetchall())
    assert totals == {"ann": sum(range(2, 1201, 2)), "bob": sum(range(1, 1201, 2))}
