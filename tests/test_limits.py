"""Limits, debounce, singleton and throttle from Python (sqljobs._declare.limits, JobHandle).

Declared limits reach the database when a worker starts, and a limit set at run time
is not overwritten by them; `app.limits` sets, lists and removes; bad declarations are
refused where they are written and write nothing; enqueue's `group`, `singleton`,
`debounce` and `throttle` map onto the engine's fields; a key limit with
`when_busy="fail"` surfaces as KeyBusy from `app.result`; and the CLI shows limits,
their use and the jobs they hold back.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from sqljobs import (
    App,
    ConfigurationError,
    InvalidArgument,
    JobContext,
    JobFailed,
    KeyBusy,
    LimitNotFound,
    fresh_key,
    key,
    queries,
)
from sqljobs._cli import app as cli
from sqljobs._runtime.worker.worker import SPLIT_FLOOR
from tests.processes import scalar, wait_for
from tests.worker_helpers import running


class Customer(BaseModel):
    id: int


class Capture(BaseModel):
    account: str


class Sync(BaseModel):
    customer: Customer
    note: str = ""


def make_app(dsn: str) -> App:
    app = App(dsn)
    app.limit("stripe", scope="global", rate=(25, 1))

    @app.job(name="crm.sync", queue="crm", concurrency=5, rate=(100, timedelta(minutes=1)),
             limit=key(("customer", "id"), 2))
    def sync(ctx: JobContext, payload: Sync) -> None:
        return None

    return app


def test_declared_limits_are_written_when_a_worker_starts(db_dsn: str,
                                                          conn: psycopg.Connection[Any]) -> None:
    app = make_app(db_dsn)
    assert sorted(app.declared_limits) == ["crm.sync", "crm.sync:customer.id", "stripe"]
    with app:
        assert app.limits.list() == []
        with running(app):
            wait_for(lambda: len(app.limits.list()) == 3, "the declared limits")
        by_name = {r.name: r for r in app.limits.list()}
    assert (by_name["crm.sync"].scope, by_name["crm.sync"].target, by_name["crm.sync"].concurrency,
            by_name["crm.sync"].rate_n, by_name["crm.sync"].rate_per_s) == (
        "name", "crm.sync", 5, 100, 60.0)
    keyed = by_name["crm.sync:customer.id"]
    assert (keyed.scope, keyed.key_path, keyed.concurrency, keyed.when_busy) == (
        "key", ["customer", "id"], 2, "wait")
    assert (by_name["stripe"].scope, by_name["stripe"].rate_n) == ("global", 25)
    assert {r.origin for r in by_name.values()} == {"declared"}


def test_a_worker_held_back_by_a_full_limit_claims_again_once_its_own_settles_commit(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A claim that a full limit cut short is taken up again when the worker's own
    settles free the limit, not at the next poll or wake-up: with LISTEN off and an hour
    between polls, the queue still drains (every claim after the first is one of those)."""
    app = App(db_dsn)

    @app.job(name="held.job", queue="held", concurrency=3)
    def job(ctx: JobContext, payload: Capture) -> None:
        return None

    with app:
        job.enqueue_many([({"account": str(i)}, fresh_key()) for i in range(12)])
        with running(app, concurrency=10, listen=False, poll_interval=3600.0):
            wait_for(lambda: scalar(conn, "select count(*) = 12 from jobs.job where name = "
                                          "'held.job' and state = 'succeeded'"),
                     "the twelve jobs to run, three at a time")


def test_under_a_full_limit_a_worker_settles_in_halves_of_its_largest_claim(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Short jobs under a global limit the worker fills: each claim brings back what the
    limit has room for, and every one of its jobs finishes before its settle is written.
    Written whole, that settle would free the limit all at once and the next claim would
    wait for it; the worker writes at most half its largest claim at a time instead, so
    the next claim takes the first half's slots while the rest is written. A claim's jobs
    share their started_at (the admission's time), a write's their finished_at (its
    transaction's)."""
    app = App(db_dsn)
    app.limit("split.all", scope="global", concurrency=60)

    @app.job(name="split.job", queue="split")
    def job(ctx: JobContext, payload: Capture) -> None:
        return None

    with app:
        job.enqueue_many([({"account": str(i)}, fresh_key()) for i in range(600)])
        with running(app, concurrency=10, prefetch=200):
            wait_for(lambda: scalar(conn, "select count(*) = 600 from jobs.job where name = "
                                          "'split.job' and state = 'succeeded'"),
                     "the jobs to run, sixty at a time")
    largest_claim = scalar(conn, "select max(n) from (select count(*) as n from jobs.job "
                                 "where name = 'split.job' group by started_at) c")
    largest_write = scalar(conn, "select max(n) from (select count(*) as n from jobs.job "
                                 "where name = 'split.job' group by finished_at) w")
    assert largest_claim == 60  # the first claim filled the limit
    assert largest_write <= max(SPLIT_FLOOR, (largest_claim + 1) // 2)


def test_a_limit_set_at_run_time_wins_over_the_declared_one(db_dsn: str,
                                                            conn: psycopg.Connection[Any]) -> None:
    app = make_app(db_dsn)
    with app:
        assert app.limits.set("stripe", scope="global", rate=(5, 1)) is True
        assert app.limits.sync_declared() == 2  # the two job limits; stripe is the api's
        assert app.limits.sync_declared() == 0  # nothing changed: nothing written
        [stripe] = [r for r in app.limits.list() if r.name == "stripe"]
        assert (stripe.rate_n, stripe.origin) == (5, "api")
        app.limits.remove("stripe")
        with pytest.raises(LimitNotFound, match="no limit named 'stripe'"):
            app.limits.remove("stripe")
        assert app.limits.sync_declared() == 1  # back to what the code declares


def test_bad_limits_are_refused_where_they_are_written(db_dsn: str,
                                                       conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)

    def job(**options: Any) -> None:
        @app.job(name=fresh_key(), **options)
        def handler(ctx: JobContext, payload: Sync) -> None:
            return None

    with pytest.raises(ConfigurationError, match="key 'customer_id' names no field of Sync"):
        job(limit=key("customer_id", 2))
    with pytest.raises(ConfigurationError, match=r"'customer\.name' names no field of Customer"):
        job(limit=key(("customer", "name"), 2))
    with pytest.raises(ConfigurationError, match="concurrency must be a whole number of at least"):
        job(concurrency=0)
    with pytest.raises(ConfigurationError, match="concurrency must be a whole number"):
        job(limit=key("note", -1))
    with pytest.raises(ConfigurationError, match="the interval must be positive"):
        job(rate=(10, 0))
    with pytest.raises(ConfigurationError, match="starts must be a whole number of at least 1"):
        job(rate=(0, 1))
    with pytest.raises(ConfigurationError, match="when_busy='fail' needs a concurrency"):
        key("note", rate=(1, 1), when_busy="fail")
    with pytest.raises(ConfigurationError, match="scope must be one of"):
        app.limit("x", scope="planet", concurrency=1)
    with pytest.raises(ConfigurationError, match="a limit needs a concurrency, a rate, or both"):
        app.limit("x", scope="global")
    app.limit("once", scope="global", concurrency=1)
    with pytest.raises(ConfigurationError, match="already declared"):
        app.limit("once", scope="global", concurrency=2)
    with app:
        # what only the engine knows is refused by it, typed, and nothing is written
        with pytest.raises(InvalidArgument, match="a queue limit needs a target"):
            app.limits.set("q", scope="queue", concurrency=1)
        with pytest.raises(InvalidArgument, match="a global limit takes no target"):
            app.limits.set("q", scope="global", target="mail", concurrency=1)
        assert app.limits.list() == []


def test_enqueue_debounce_singleton_and_throttle(db_dsn: str,
                                                 conn: psycopg.Connection[Any]) -> None:
    app = make_app(db_dsn)
    sync = app.job_handle("crm.sync")
    with app:
        first = sync.enqueue({"customer": {"id": 1}, "note": "a"}, key=fresh_key(),
                             group="customer-1", debounce=5)
        second = sync.enqueue({"customer": {"id": 1}, "note": "b"}, key=fresh_key(),
                              group="customer-1", debounce=timedelta(seconds=5))
        assert (first.outcome, second.outcome, second.id) == ("created", "debounced", first.id)
        assert scalar(conn, "select payload->>'note' from jobs.job where id = %s",
                      (first.id,)) == "b"
        solo = sync.enqueue({"customer": {"id": 2}}, key=fresh_key(), singleton=True)
        again = sync.enqueue({"customer": {"id": 3}}, key=fresh_key(), singleton=True)
        assert again.deduped and again.id == solo.id
        throttled = sync.enqueue({"customer": {"id": 4}}, key=fresh_key(), throttle=(2, 60))
        row = conn.execute("select throttle_n, throttle_per_s, group_key, singleton from jobs.job "
                           "where id = %s", (throttled.id,)).fetchone()
        assert row == (2, 60.0, None, False)
        with pytest.raises(ConfigurationError, match="throttle: the interval must be positive"):
            sync.enqueue({"customer": {"id": 5}}, key=fresh_key(), throttle=(2, 0))
        with pytest.raises(InvalidArgument, match="give debounce_s, or run_at / delay_s"):
            sync.enqueue({"customer": {"id": 5}}, key=fresh_key(), debounce=1, delay=1)


def test_a_busy_key_with_when_busy_fail_raises_key_busy_from_result(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)

    @app.job(name="pay.capture", queue="pay", limit=key("account", 1, when_busy="fail"))
    def capture(ctx: JobContext, payload: Capture) -> None:
        return None

    with app:
        app.limits.sync_declared()
        first = capture.enqueue({"account": "acme"}, key=fresh_key())
        [held] = app.client.run(queries.claim(["pay"], "another-worker", 1, 30))
        assert held.id == first.id
        second = capture.enqueue({"account": "acme"}, key=fresh_key())
        assert app.client.run(queries.claim(["pay"], "w", 1, 30)) == []
        with pytest.raises(KeyBusy, match="another run holds key 'acme'") as raised:
            app.result(second.id, timeout=5)
        assert isinstance(raised.value, JobFailed) and raised.value.kind == "key_busy"
        assert raised.value.sqlstate == "SJ012"


def test_the_cli_sets_lists_and_removes_limits_and_shows_what_they_hold_back(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    runner = CliRunner()

    def sqljobs(*args: str) -> Any:
        return runner.invoke(cli, [*args, "--dsn", db_dsn], env={"COLUMNS": "200"})

    made = sqljobs("limits", "set", "mail", "--scope", "queue", "--target", "mail",
                   "--concurrency", "1")
    assert made.exit_code == 0 and "created limit mail" in made.output, made.output
    assert "replaced limit mail" in sqljobs("limits", "set", "mail", "--scope", "queue",
                                            "--target", "mail", "--concurrency", "1").output
    bad = sqljobs("limits", "set", "x", "--scope", "planet", "--concurrency", "1")
    assert bad.exit_code == 2 and "scope must be one of" in bad.output
    refused = sqljobs("limits", "set", "x", "--scope", "queue", "--concurrency", "1")
    assert refused.exit_code == 1 and "needs a target" in refused.output
    for i in range(3):
        conn.execute("select jobs.enqueue('mail.send', %s, '{}', '{\"queue\": \"mail\"}')",
                     (f"m{i}",))
    conn.execute("select jobs.claim('{mail}', 'w', 10, 30)")
    queues = sqljobs("queues", "list")
    assert queues.exit_code == 0, queues.output
    line = next(row for row in queues.output.splitlines() if row.startswith("mail\t"))
    assert line.split("\t")[2] == "2" and line.split("\t")[12] == "2", (
        "two ready, both held back by the limit")
    assert "1 / 1" in queues.output, "the queue's group: one running of one allowed"
    listed = sqljobs("limits", "list")
    assert "mail" in listed.output and "queue" in listed.output and "limits in use" in listed.output
    assert "removed limit mail" in sqljobs("limits", "remove", "mail").output
    gone = sqljobs("limits", "remove", "mail")
    assert gone.exit_code == 1 and "no limit named 'mail'" in gone.output
    conn.execute("select jobs.lease_acquire('export', 'me', 30)")
    leases = sqljobs("leases")
    assert "export" in leases.output and "me" in leases.output
