"""The worker, in-process against the real database: what each handler outcome writes.

A `Worker` runs on its own event loop in a thread (signals are tested with real
processes in test_worker_processes.py); the test enqueues, waits for the database to
show the outcome, then drains the worker.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from sqljobs import App, ConfigurationError, Worker, fresh_key
from sqljobs._client.encoding import ResultNotJSON, json_result
from sqljobs._runtime.context import JobContext
from sqljobs._runtime.worker import error_record
from tests.processes import wait_for
from tests.worker_example_app import QUEUE, RUNS_TABLE, make_app
from tests.worker_helpers import running


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    conn.execute(RUNS_TABLE)
    conn.execute("truncate public.worker_runs")
    example = make_app(db_dsn)
    yield example
    example.close()


def job_row(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "select state::text, attempt, result, last_error, progress, run_at, jobs.now() as now "
        "from jobs.job where id = %s", (job_id,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True))


def enqueue(app: App, name: str, payload: dict[str, Any]) -> int:
    return app.job_handle(name).enqueue(payload, key=fresh_key()).id


def settled(conn: psycopg.Connection[Any], job_id: int, *states: str) -> Callable[[], Any]:
    def check() -> Any:
        row = job_row(conn, job_id)
        return row if row["state"] in states else None
    return check


def test_success_stores_the_result_and_ctx_describes_the_job(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.echo", {"n": 7})
    with running(app):
        row = wait_for(settled(conn, job_id, "succeeded"), "the echo job")
    assert row["result"] == {"n": 7, "attempt": 1, "queue": QUEUE, "tenant": None}
    assert row["attempt"] == 1


def test_a_finished_run_is_freed_without_the_garbage_collector(app: App, conn: Any) -> None:
    """A run and its context must not hold each other once the run is over: each such
    cycle waits for a collection, and collections were a third of a drain's Python time."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable stays in gc.garbage
    try:
        ids = [r.id for r in app.job_handle("example.echo").enqueue_many(
            [({"n": i}, fresh_key()) for i in range(20)])]
        with running(app, concurrency=4):
            wait_for(lambda: conn.execute(
                "select count(*) = 20 from jobs.job where id = any(%s) and state = 'succeeded'",
                (ids,)).fetchone()[0], "20 jobs")
        gc.collect()
        cyclic = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic["Run"] == 0 and cyclic["JobContext"] == 0, cyclic.most_common(8)


def test_sync_handlers_run_in_the_worker_thread_pool(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.slow_sync", {"seconds": 0.05})
    with running(app):
        row = wait_for(settled(conn, job_id, "succeeded"), "the sync job")
    assert row["result"]["thread"].startswith("sqljobs-")


def test_many_jobs_all_succeed_with_batched_settles(app: App, conn: Any) -> None:
    ids = [r.id for r in app.job_handle("example.echo").enqueue_many(
        [({"n": i}, fresh_key()) for i in range(60)])]
    with running(app, concurrency=10) as worker:
        wait_for(lambda: conn.execute(
            "select count(*) = 60 from jobs.job where id = any(%s) and state = 'succeeded'",
            (ids,)).fetchone()[0], "60 jobs")
    assert worker.counts.get("succeeded") == 60
    assert worker._settler is not None and worker._settler.batches < 60


def test_a_result_json_cannot_hold_fails_the_attempt_with_a_clear_error(app: App, conn: Any
                                                                        ) -> None:
    job_id = enqueue(app, "example.not_json", {})
    with running(app):
        row = wait_for(settled(conn, job_id, "dead"), "the not_json job to be dead-lettered")
    error = row["last_error"]
    assert error["kind"] == "result_not_json"
    assert error["type"] == "sqljobs._client.encoding.ResultNotJSON"
    assert "JSON cannot hold" in error["message"] and "object" in error["message"]
    assert row["result"] is None


def test_json_result_refuses_nan_and_nul_and_dumps_models() -> None:
    with pytest.raises(ResultNotJSON):
        json_result(float("nan"))
    with pytest.raises(ResultNotJSON, match="NUL"):
        json_result({"s": "a\x00b"})
    assert json_result(QUEUE) == QUEUE
    record = error_record("error", ValueError("bad\x00value"))
    assert record["message"] == "bad\\0value" and "ValueError" in record["traceback"]


def test_a_payload_that_no_longer_validates_fails_with_invalid_payload(app: App, conn: Any
                                                                       ) -> None:
    # Written with plain SQL, as an older producer (or another language) might.
    job_id = conn.execute(
        "select id from jobs.enqueue('example.echo', 'stale', '{\"n\": \"seven\"}', "
        "'{\"queue\": \"example\"}')").fetchone()[0]
    with running(app):
        row = wait_for(settled(conn, job_id, "failed"), "the invalid job to fail")
    assert row["last_error"]["kind"] == "invalid_payload"
    assert row["last_error"]["type"] == "sqljobs.InvalidPayload"
    assert "n" in row["last_error"]["detail"]
    assert row["attempt"] == 1


def test_a_declared_terminal_exception_fails_at_once(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.terminal", {})
    with running(app):
        row = wait_for(settled(conn, job_id, "failed"), "the terminal job to fail")
    error = row["last_error"]
    assert error["kind"] == "terminal"
    assert error["type"].endswith("Refused")
    assert error["message"] == "the account is closed"
    assert "Traceback" in error["traceback"] and "raise Refused" in error["traceback"]


def test_any_other_exception_is_retried_by_the_policy(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.flaky", {})
    with running(app):
        row = wait_for(lambda: (r := job_row(conn, job_id))["state"] == "ready"
                       and r["attempt"] == 1 and r, "the flaky job to be retried")
    assert row["last_error"]["kind"] == "error"
    assert row["last_error"]["message"] == "boom on attempt 1"
    # base_s = 60, full jitter: the retry is scheduled by SQL, somewhere in [now, now + 60 s].
    assert (row["run_at"] - row["now"]).total_seconds() <= 60


def test_retry_in_reruns_after_the_delay_and_counts_an_attempt(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.retry_once", {})
    with running(app):
        row = wait_for(settled(conn, job_id, "succeeded"), "the retried job")
    assert row["result"] == {"attempt": 2}
    assert row["last_error"]["kind"] == "retry"
    assert row["last_error"]["message"] == "not yet"


def test_snooze_puts_the_job_back_without_counting_an_attempt(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.snooze_once", {})
    with running(app):
        row = wait_for(settled(conn, job_id, "succeeded"), "the snoozed job")
    assert row["result"] == {"attempt": 1, "saved": {"snoozed": True}}
    assert row["last_error"] is None


def test_a_timeout_cancels_the_run_and_retries_the_attempt(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.timeout", {"seconds": 30})
    with running(app):
        # the handler sleeps 30 s: an error before then is the 0.5 s timeout's
        row = wait_for(lambda: (r := job_row(conn, job_id))["last_error"] is not None and r,
                       "the timeout", timeout=25)
    assert row["state"] == "ready" and row["attempt"] == 1
    assert row["last_error"]["kind"] == "timeout"
    assert "0.5 s" in row["last_error"]["message"]


def test_a_sync_handler_past_its_timeout_is_told_to_stop(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.sync_timeout", {"seconds": 30})
    with running(app):
        row = wait_for(lambda: (r := job_row(conn, job_id))["last_error"] is not None and r,
                       "the timeout")
        wait_for(lambda: conn.execute(
            "select 1 from public.worker_runs where job_id = %s and event = 'cancelled'",
            (job_id,)).fetchone(), "the thread to see ctx.cancelled")
    assert row["state"] == "ready" and row["last_error"]["kind"] == "timeout"


def test_progress_is_recorded_under_the_claim(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.progress", {"n": 3})
    with running(app):
        row = wait_for(settled(conn, job_id, "succeeded"), "the progress job")
    assert row["progress"] == {"done": 3, "of": 3}
    assert row["result"] == 3


def test_a_cancelled_job_stops_its_run_and_writes_nothing_more(app: App, conn: Any) -> None:
    job_id = enqueue(app, "example.until_cancelled", {"seconds": 60})
    with running(app) as worker:
        wait_for(lambda: conn.execute("select 1 from public.worker_runs where job_id = %s",
                                      (job_id,)).fetchone(), "the run to start")
        conn.execute("select jobs.cancel(%s)", (job_id,))
        wait_for(lambda: conn.execute(
            "select 1 from public.worker_runs where job_id = %s and event = 'cancelled'",
            (job_id,)).fetchone(), "the run to be cancelled (next heartbeat)", timeout=5)
        wait_for(lambda: worker.counts.get("lost") == 1, "the run to end")
    row = job_row(conn, job_id)
    assert row["state"] == "cancelled"
    assert row["last_error"] is None and row["result"] is None


def test_unknown_job_names_wait_for_a_worker_that_knows_them(app: App, conn: Any) -> None:
    unknown = conn.execute(
        "select id from jobs.enqueue('example.from_the_future', 'k', '{}', "
        "'{\"queue\": \"example\"}')").fetchone()[0]
    known = enqueue(app, "example.echo", {"n": 1})
    with running(app) as worker:
        wait_for(settled(conn, known, "succeeded"), "the known job")
        # a later claim passes over the older unknown job for a newer known one
        later = enqueue(app, "example.echo", {"n": 2})
        wait_for(settled(conn, later, "succeeded"), "the later known job")
        live = conn.execute("select id, names from jobs.workers()").fetchall()
        unserved = conn.execute("select queue, name, waiting from jobs.unserved_jobs()").fetchall()
    assert job_row(conn, unknown)["state"] == "ready"
    assert [(w[0]) for w in live] == [worker.id]
    assert "example.echo" in live[0][1] and "example.from_the_future" not in live[0][1]
    assert unserved == [(QUEUE, "example.from_the_future", 1)]
    # A clean exit deregisters the worker.
    assert conn.execute("select count(*) from jobs.worker").fetchone()[0] == 0


def test_a_worker_refuses_an_app_without_jobs(db_dsn: str) -> None:
    with pytest.raises(ConfigurationError, match="declares no jobs"):
        Worker(App(db_dsn))


def test_ctx_progress_from_the_loop_thread_points_to_the_async_form() -> None:
    import asyncio
    import logging

    async def scenario() -> None:
        async def report(value: Any) -> bool:
            return True

        ctx = JobContext(job_id=1, name="n", queue="q", tenant=None, key="k", attempt=1,
                         max_attempts=1, claim=1, worker_id="w",
                         logger=logging.LoggerAdapter(logging.getLogger("t"), {}),
                         loop=asyncio.get_running_loop(), report_progress=report)
        with pytest.raises(RuntimeError, match="progress_async"):
            ctx.progress(1)
        assert await ctx.progress_async(1) is True
        ctx._stop("timeout")
        assert await ctx.progress_async(2) is False

    asyncio.run(scenario())


def started(conn: Any, ids: list[int]) -> int:
    row = conn.execute("select count(*) from public.worker_runs "
                       "where job_id = any(%s) and event = 'start'", (ids,)).fetchone()
    return int(row[0])


def test_prefetch_holds_claimed_jobs_in_a_local_queue_and_runs_them_in_order(
        app: App, conn: Any) -> None:
    ids = [enqueue(app, "example.slow", {"seconds": 0.4}) for _ in range(3)]
    with running(app, concurrency=1, prefetch=2) as worker:
        # All three are claimed by this worker (their leases held), one runs at a time.
        wait_for(lambda: conn.execute(
            "select count(*) = 3 from jobs.job where id = any(%s) and state = 'running' "
            "and worker = %s", (ids, worker.id)).fetchone()[0], "three jobs claimed")
        assert started(conn, ids) <= 1
        wait_for(lambda: conn.execute(
            "select count(*) = 3 from jobs.job where id = any(%s) and state = 'succeeded'",
            (ids,)).fetchone()[0], "three jobs run")
    order = [r[0] for r in conn.execute(
        "select job_id from public.worker_runs where job_id = any(%s) and event = 'start' "
        "order by at", (ids,)).fetchall()]
    assert order == ids  # claim order is the queue's order: oldest first
    ends = conn.execute("select max(at) filter (where event = 'end'), "
                        "min(at) filter (where event = 'start') from public.worker_runs "
                        "where job_id = any(%s)", (ids,)).fetchone()
    assert ends[0] - ends[1] >= timedelta(seconds=1.2)  # one after another, not at once


def test_a_drain_hands_back_jobs_that_never_started_without_counting_an_attempt(
        app: App, conn: Any) -> None:
    ids = [enqueue(app, "example.slow", {"seconds": 0.5}) for _ in range(3)]
    with running(app, concurrency=1, prefetch=5) as worker:
        wait_for(lambda: started(conn, ids) == 1, "the first job started")
        assert conn.execute("select count(*) from jobs.job where id = any(%s) and worker = %s "
                            "and state = 'running'", (ids, worker.id)).fetchone()[0] == 3
    rows = conn.execute("select id, state::text, attempt, last_error->>'kind' from jobs.job "
                        "where id = any(%s) order by id", (ids,)).fetchall()
    assert rows[0][1:3] == ("succeeded", 1)
    for _, state, attempt, kind in rows[1:]:
        assert (state, attempt, kind) == ("interrupted", 0, "interrupted")
    assert started(conn, ids) == 1  # the handed-back jobs never ran


def test_prefetch_zero_claims_only_for_free_slots(app: App, conn: Any) -> None:
    ids = [enqueue(app, "example.slow", {"seconds": 0.5}) for _ in range(3)]
    with running(app, concurrency=1, prefetch=0) as worker:
        wait_for(lambda: started(conn, ids) == 1, "the first job started")
        held = conn.execute("select count(*) from jobs.job where id = any(%s) and worker = %s "
                            "and state = 'running'", (ids, worker.id)).fetchone()[0]
        assert held == 1


def test_prefetch_must_not_be_negative(app: App) -> None:
    with pytest.raises(ConfigurationError, match="prefetch"):
        Worker(app, prefetch=-1)


def test_a_waiting_job_keeps_its_lease_while_it_waits_for_a_slot(app: App, conn: Any) -> None:
    first = enqueue(app, "example.slow", {"seconds": 2.0})
    second = enqueue(app, "example.slow", {"seconds": 0.0})
    with running(app, concurrency=1, prefetch=1, lease_s=0.8):
        wait_for(settled(conn, second, "succeeded"), "the second job", timeout=20)
    # Waiting 2 s behind the first job, past its 0.8 s lease: renewed, never recovered
    # and claimed again (claim would be 2), and run once.
    assert conn.execute("select claim >> 32, attempt from jobs.job where id = %s",
                        (second,)).fetchone() == (1, 1)
    assert job_row(conn, first)["state"] == "succeeded"
    assert started(conn, [second]) == 1
