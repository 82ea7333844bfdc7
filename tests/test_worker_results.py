"""`app.result(job_id, timeout=...)`: wait for a job's outcome, woken by NOTIFY on settle."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sqljobs import (
    App,
    JobCancelled,
    JobDead,
    JobFailed,
    JobNotFound,
    ResultTimeout,
    fresh_key,
)
from sqljobs._client import results
from tests.processes import wait_for
from tests.worker_example_app import make_app
from tests.worker_helpers import running


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    example = make_app(db_dsn)
    yield example
    example.close()


def enqueue(app: App, name: str, payload: dict[str, Any]) -> int:
    return app.job_handle(name).enqueue(payload, key=fresh_key()).id


def test_result_answers_the_stored_return_value(app: App) -> None:
    job_id = enqueue(app, "example.echo", {"n": 5})
    with running(app):
        assert app.result(job_id, timeout=10) == {"n": 5, "attempt": 1, "queue": "example",
                                                  "tenant": None}
        # A finished job answers at once.
        assert app.result(job_id, timeout=0.01)["n"] == 5


def test_result_async(app: App) -> None:
    job_id = enqueue(app, "example.echo", {"n": 6})
    with running(app):
        value = asyncio.run(app.result_async(job_id, timeout=10))
    assert value["n"] == 6


def test_result_raises_the_jobs_error_class(app: App, conn: psycopg.Connection[Any]) -> None:
    failed = enqueue(app, "example.terminal", {})
    dead = enqueue(app, "example.not_json", {})
    cancelled = enqueue(app, "example.echo", {"n": 1})
    conn.execute("select jobs.cancel(%s)", (cancelled,))
    with running(app):
        with pytest.raises(JobFailed) as failure:
            app.result(failed, timeout=10)
        with pytest.raises(JobDead) as death:
            asyncio.run(app.result_async(dead, timeout=10))
    assert failure.value.kind == "terminal" and failure.value.job_id == failed
    assert "the account is closed" in str(failure.value)
    assert death.value.kind == "result_not_json"
    with pytest.raises(JobCancelled):
        app.result(cancelled, timeout=1)


def test_result_times_out_while_the_job_waits(app: App) -> None:
    job_id = enqueue(app, "example.echo", {"n": 1})  # no worker runs
    with pytest.raises(ResultTimeout) as timeout:
        app.result(job_id, timeout=0.4)
    assert timeout.value.state == "ready" and "within 0.4 s" in str(timeout.value)
    assert isinstance(timeout.value, TimeoutError)
    with pytest.raises(ResultTimeout):
        asyncio.run(app.result_async(job_id, timeout=0.2))


def test_result_of_an_unknown_job(app: App) -> None:
    with pytest.raises(JobNotFound):
        app.result(10**12, timeout=1)


def _ack_once_watched(dsn: str, job_id: int) -> threading.Thread:
    """Ack the job once its waiter has read it (watch_outcome marked it watched)."""
    def ack() -> None:
        with psycopg.connect(dsn, autocommit=True) as other:
            wait_for(lambda: other.execute("select settle_watched from jobs.job where id = %s",
                                           (job_id,)).fetchone() == (True,), "the waiter")
            claim = other.execute("select claim from jobs.claim(array['example'], 'w', 1, 30)"
                                  ).fetchone()
            assert claim is not None
            other.execute("select jobs.ack(%s, %s, '\"done\"')", (job_id, claim[0]))

    thread = threading.Thread(target=ack)
    thread.start()
    return thread


def test_result_wakes_on_the_settle_notification_not_the_poll(
        app: App, db_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The waiter reads once, then would poll again only after 600 s: within the 60 s
    # timeout only the settle notification can tell it the job succeeded.
    monkeypatch.setattr(results, "FIRST_POLL_S", 600.0)
    job_id = enqueue(app, "example.echo", {"n": 1})
    thread = _ack_once_watched(db_dsn, job_id)
    assert app.result(job_id, timeout=60) == "done"
    thread.join()


def test_only_watched_settlements_notify_once_per_call(conn: psycopg.Connection[Any],
                                                       db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("listen jobs_settled")
        ids = [conn.execute("select id from jobs.enqueue('n.x', %s, '{}', '{\"queue\": \"qn\"}')",
                            (fresh_key(),)).fetchone()[0] for _ in range(5)]  # type: ignore[index]
        watched = ids[:2] + ids[3:5]
        for job_id in watched:  # what app.result does before it waits
            conn.execute("select id from jobs.watch_outcome(%s)", (job_id,))
        claims = dict(conn.execute("select id, claim from jobs.claim(array['qn'], 'w', 5, 30)"
                                   ).fetchall())
        # ack ids[0..2]: ids[2] is not watched, so the one notification names ids[0], ids[1]
        conn.execute("select * from jobs.ack_many(%s, %s)",
                     (ids[:3], [claims[i] for i in ids[:3]]))
        # a retry is not a settlement: no notification for watched ids[3]
        conn.execute("select * from jobs.nack_many(%s, %s)", ([ids[3]], [claims[ids[3]]]))
        # a terminal failure of watched ids[4] is
        conn.execute("select jobs.nack(%s, %s, null, 'fail')", (ids[4], claims[ids[4]]))
        # an operator's cancel of a watched job notifies too; ids[3] is ready again
        conn.execute("select jobs.cancel(%s)", (ids[3],))
        conn.execute("select jobs.notify_settled(array(select generate_series(1, 2000)::bigint))")
        conn.execute("set jobs.notify = off")
        conn.execute("select jobs.notify_settled(array[1::bigint])")
        conn.execute("reset jobs.notify")
        conn.execute("select pg_notify('jobs_settled', 'end')")  # delivered in commit order
        got = []
        for notify in listener.notifies(timeout=10):
            if notify.payload == "end":
                break
            got.append(notify.payload)
    token = {job_id: conn.execute("select jobs.watch_token(%s)", (job_id,)).fetchone()[0]  # type: ignore[index]
             for job_id in ids}
    # each names the watched jobs by their watch tokens, never their ids
    assert got == [f"{token[ids[0]]},{token[ids[1]]}", token[ids[4]], token[ids[3]], "*"]
