"""The dashboard's pages and actions (sqljobs.dashboard) against the real database,
through Starlette's TestClient, mounted under a prefix as a host application would."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from sqljobs.client import queries
from sqljobs.client.connection import Client
from sqljobs.dashboard import app

PREFIX = "/ops/jobs"


def seed(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Two ready mail jobs (one with a card number), a dead report job, a succeeded one."""
    conn.execute("select jobs.job_type_put('mail.send', '{\"sensitive\": [\"card\"]}')")
    client = Client(conn)
    ids = {}
    for key in ("m1", "m2"):
        ids[key] = client.run(queries.enqueue(
            "mail.send", key, {"to": key, "card": "4111-1111"},
            {"queue": "mail", "tenant": "acme",
             "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})).id
    for key in ("r1", "r2"):
        ids[key] = client.run(queries.enqueue("report.build", key, {}, {"max_attempts": 1})).id
    for job in client.run(queries.claim(["default"], "w", 2)):
        if job.key == "r1":
            client.run(queries.nack(job.id, job.claim, {"message": "disk full"}))
        else:
            client.run(queries.ack(job.id, job.claim, {"pages": 3}))
    return ids


def mounted(dsn: str, **options: Any) -> TestClient:
    host = Starlette(routes=[Mount(PREFIX, app=app(dsn, **options))])
    return TestClient(host, base_url="http://testserver", follow_redirects=False)


@pytest.fixture
def jobs_db(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return seed(conn)


@pytest.fixture
def web(db_dsn: str) -> Iterator[TestClient]:
    with mounted(db_dsn, allow_actions=True) as client:
        yield client


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


def state_of(conn: psycopg.Connection[Any], job_id: int) -> str | None:
    row = conn.execute("select state::text from jobs.job where id = %s", (job_id,)).fetchone()
    return row[0] if row else None


# -- pages ----------------------------------------------------------------------------

def test_overview_shows_queues_charts_and_links_under_the_prefix(
        jobs_db: dict[str, int], web: TestClient) -> None:
    page = web.get(PREFIX + "/")
    assert page.status_code == 200
    assert ">mail<" in page.text and ">default<" in page.text
    assert page.text.count("<svg") == 2  # throughput and failures, drawn on the server
    assert "succeeded: 1 in the last 60 min" in page.text
    assert "failed or dead: 1 in the last 60 min" in page.text
    assert 'id="failure-rate">50.0%' in page.text
    assert f'href="{PREFIX}/jobs?queue=mail"' in page.text
    live = web.get(PREFIX + "/live/overview")
    assert live.status_code == 200 and "<nav>" not in live.text and 'id="queues"' in live.text


def test_jobs_page_filters_and_pages_by_keyset(conn: psycopg.Connection[Any], db_dsn: str,
                                               web: TestClient) -> None:
    client = Client(conn)
    ids = [client.run(queries.enqueue("bulk.job", f"k{i}", {}, {"queue": "bulk"})).id
           for i in range(60)]
    first = web.get(PREFIX + "/jobs", params={"queue": "bulk"})
    assert first.status_code == 200
    assert f">{ids[-1]}</a>" in first.text and f">{ids[10]}</a>" in first.text
    assert f">{ids[9]}</a>" not in first.text
    after = re.search(r'id="next" href="[^"]*after=(\d+)"', first.text)
    assert after and int(after.group(1)) == ids[10]
    second = web.get(PREFIX + "/jobs", params={"queue": "bulk", "after": after.group(1)})
    assert f">{ids[9]}</a>" in second.text and f">{ids[0]}</a>" in second.text
    assert 'id="next"' not in second.text
    by_key = web.get(PREFIX + "/jobs", params={"key": "k7"})
    assert f">{ids[7]}</a>" in by_key.text and f">{ids[8]}</a>" not in by_key.text
    bad = web.get(PREFIX + "/jobs", params={"created_after": "not a time"})
    assert bad.status_code == 400 and "ISO 8601" in bad.text


def test_jobs_page_filters_by_state_tenant_and_name(jobs_db: dict[str, int],
                                                    web: TestClient) -> None:
    dead = web.get(PREFIX + "/jobs", params={"state": "dead"})
    assert f">{jobs_db['r1']}</a>" in dead.text and f">{jobs_db['m1']}</a>" not in dead.text
    assert "disk full" in dead.text
    tenant = web.get(PREFIX + "/jobs", params={"tenant": "acme", "name": "mail.send"})
    assert f">{jobs_db['m1']}</a>" in tenant.text and f">{jobs_db['r1']}</a>" not in tenant.text
    letters = web.get(PREFIX + "/dead")
    assert "Dead letters" in letters.text and f">{jobs_db['r1']}</a>" in letters.text
    assert f">{jobs_db['r2']}</a>" not in letters.text


def test_job_page_redacts_and_shows_trace_error_and_result(jobs_db: dict[str, int],
                                                           web: TestClient) -> None:
    mail = web.get(f"{PREFIX}/jobs/{jobs_db['m1']}")
    assert mail.status_code == 200
    assert "4111" not in mail.text and "[redacted]" in mail.text
    assert 'id="trace-id">0af7651916cd43dd8448eb211c80319c<' in mail.text
    dead = web.get(f"{PREFIX}/jobs/{jobs_db['r1']}")
    assert "disk full" in dead.text and "Requeue" in dead.text
    done = web.get(f"{PREFIX}/jobs/{jobs_db['r2']}")
    assert '"pages": 3' in html.unescape(done.text)
    assert web.get(f"{PREFIX}/jobs/999999").status_code == 404


def test_job_page_shows_steps_children_and_waits(conn: psycopg.Connection[Any],
                                                 web: TestClient) -> None:
    client = Client(conn)
    parent = client.run(queries.enqueue("flow.parent", "p", {}, {}))
    job = client.run(queries.claim(["default"], "w", 1))[0]
    client.run(queries.step_put(job.id, job.claim, "fetch", {"rows": 2}))
    client.run(queries.step_wait(job.id, job.claim, "approval",
                                 [{"event": "order.approved", "match": {}}]))
    page = web.get(f"{PREFIX}/jobs/{parent.id}")
    assert page.status_code == 200
    assert "<strong>fetch</strong>" in page.text and "order.approved" in page.text


def test_workers_schedules_and_outbox_pages(conn: psycopg.Connection[Any],
                                            web: TestClient) -> None:
    client = Client(conn)
    client.run(queries.worker_heartbeat("web-test-worker", ["mail"], [], 4, 30.0))
    client.run(queries.schedule_put("nightly", {"job": "report.build", "cron": "0 3 * * *"}))
    client.run(queries.stage_many([{"name": "mail.send", "key": "o1", "payload": {}}]))
    assert "web-test-worker" in web.get(PREFIX + "/workers").text
    schedules = web.get(PREFIX + "/schedules").text
    assert "nightly" in schedules and "0 3 * * *" in schedules
    outbox = web.get(PREFIX + "/outbox").text
    assert re.search(r"staged, not yet published</th><td>1<", outbox)


# -- actions --------------------------------------------------------------------------

def post(web: TestClient, path: str, **form: str) -> Any:
    web.get(PREFIX + "/jobs")  # sets the CSRF cookie: a form sends the same value
    token = web.cookies.get("sqljobs_csrf") or ""
    return web.post(PREFIX + path, data={"csrf": token, **form})


def test_requeue_a_dead_job_and_refuse_it_twice(conn: psycopg.Connection[Any],
                                                jobs_db: dict[str, int],
                                                web: TestClient) -> None:
    done = post(web, f"/jobs/{jobs_db['r1']}/retry")
    assert done.status_code == 303 and done.headers["location"].startswith(PREFIX + "/jobs/")
    assert state_of(conn, jobs_db["r1"]) == "ready"
    again = post(web, f"/jobs/{jobs_db['r1']}/retry")  # ready now: not a finished job
    assert again.status_code == 409 and 'role="alert"' in again.text


def test_actions_on_finished_and_unknown_jobs_are_refused(conn: psycopg.Connection[Any],
                                                          jobs_db: dict[str, int],
                                                          web: TestClient) -> None:
    finished = post(web, f"/jobs/{jobs_db['r2']}/cancel")
    assert finished.status_code == 409 and "succeeded" in finished.text
    assert state_of(conn, jobs_db["r2"]) == "succeeded"
    unknown = post(web, "/jobs/999999/cancel")
    assert unknown.status_code == 404 and "999999" in unknown.text
    assert post(web, f"/jobs/{jobs_db['m1']}/explode").status_code == 404


def test_cancel_promote_remove(conn: psycopg.Connection[Any], jobs_db: dict[str, int],
                               web: TestClient) -> None:
    assert post(web, f"/jobs/{jobs_db['m1']}/promote").status_code == 303
    assert post(web, f"/jobs/{jobs_db['m1']}/cancel").status_code == 303
    assert state_of(conn, jobs_db["m1"]) == "cancelled"
    assert post(web, f"/jobs/{jobs_db['m2']}/remove").status_code == 303
    assert state_of(conn, jobs_db["m2"]) is None


def test_pause_and_resume_a_queue(conn: psycopg.Connection[Any], jobs_db: dict[str, int],
                                  web: TestClient) -> None:
    assert post(web, "/queues/mail/pause").status_code == 303
    assert conn.execute("select paused from jobs.queue where name = 'mail'").fetchone() == (True,)
    assert "resume" in web.get(PREFIX + "/").text
    assert post(web, "/queues/mail/resume").status_code == 303
    assert conn.execute("select paused from jobs.queue where name = 'mail'").fetchone() == (False,)


def test_pause_and_resume_a_schedule(conn: psycopg.Connection[Any], web: TestClient) -> None:
    Client(conn).run(queries.schedule_put("hourly", {"job": "report.build", "cron": "0 * * * *"}))
    assert post(web, "/schedules/hourly/pause").status_code == 303
    assert Client(conn).run(queries.schedules())[0].paused
    assert post(web, "/schedules/hourly/resume").status_code == 303
    assert not Client(conn).run(queries.schedules())[0].paused
    assert post(web, "/schedules/missing/pause").status_code == 400


def test_bulk_requeue_counts_then_asks_then_acts(conn: psycopg.Connection[Any],
                                                 jobs_db: dict[str, int],
                                                 web: TestClient) -> None:
    asked = post(web, "/bulk/retry", state="dead")
    assert asked.status_code == 200
    assert re.search(r"would touch <strong>1</strong> job", asked.text)
    assert state_of(conn, jobs_db["r1"]) == "dead"  # counting moved nothing
    done = web.post(PREFIX + "/bulk/retry",
                    data={"csrf": csrf_of(asked.text), "state": "dead", "confirm": "yes"})
    assert done.status_code == 303 and "retry+1+job" in done.headers["location"]
    assert state_of(conn, jobs_db["r1"]) == "ready"
    assert post(web, "/bulk/cancel").status_code == 400  # no filter: refused
    by_key = post(web, "/bulk/cancel", key="m1")  # the verbs do not filter on keys
    assert by_key.status_code == 400 and "filter must be" in by_key.text
    assert state_of(conn, jobs_db["m1"]) == "ready"
    listed = web.get(PREFIX + "/jobs", params={"state": "dead"}).text
    assert f'action="{PREFIX}/bulk/retry"' in listed
    assert "/bulk/" not in web.get(PREFIX + "/jobs", params={"key": "m1"}).text


def test_csrf_token_missing_or_wrong_is_refused(conn: psycopg.Connection[Any],
                                                jobs_db: dict[str, int], db_dsn: str,
                                                web: TestClient) -> None:
    web.get(PREFIX + "/")  # sets the cookie
    missing = web.post(f"{PREFIX}/jobs/{jobs_db['r1']}/retry")
    assert missing.status_code == 403 and "CSRF" in missing.text
    token = csrf_of(web.get(PREFIX + "/").text)
    forged = token.split(".")[0] + ".0000"
    wrong = web.post(f"{PREFIX}/jobs/{jobs_db['r1']}/retry", data={"csrf": forged})
    assert wrong.status_code == 403
    with mounted(db_dsn, allow_actions=True) as other:
        other.get(PREFIX + "/")
        foreign = other.post(f"{PREFIX}/jobs/{jobs_db['r1']}/retry", data={"csrf": token})
        assert foreign.status_code == 403  # the other app's key did not sign it
    assert state_of(conn, jobs_db["r1"]) == "dead"


def test_actions_disabled_by_default(conn: psycopg.Connection[Any], jobs_db: dict[str, int],
                                     db_dsn: str) -> None:
    with mounted(db_dsn) as web:
        page = web.get(f"{PREFIX}/jobs/{jobs_db['r1']}").text
        assert "Requeue" not in page and 'name="csrf"' not in page
        web.get(PREFIX + "/")
        cookie = web.cookies.get("sqljobs_csrf")
        refused = web.post(f"{PREFIX}/jobs/{jobs_db['r1']}/retry", data={"csrf": cookie or ""})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert state_of(conn, jobs_db["r1"]) == "dead"


def test_a_token_enables_actions_for_those_who_present_it(conn: psycopg.Connection[Any],
                                                          jobs_db: dict[str, int],
                                                          db_dsn: str) -> None:
    with mounted(db_dsn, token="s3cret") as web:
        page = web.get(PREFIX + "/").text
        assert "Log in for actions" in page and "Requeue" not in page
        token = web.cookies.get("sqljobs_csrf") or ""
        refused = web.post(f"{PREFIX}/jobs/{jobs_db['r1']}/retry", data={"csrf": token})
        assert refused.status_code == 403 and "token" in refused.text
        login = PREFIX + "/login"
        assert web.post(login, data={"csrf": token, "token": "nope"}).status_code == 403
        assert web.post(login, data={"csrf": token, "token": "s3cret"}).status_code == 303
        assert "Requeue" in web.get(f"{PREFIX}/jobs/{jobs_db['r1']}").text
        assert web.post(f"{PREFIX}/jobs/{jobs_db['r1']}/retry",
                        data={"csrf": token}).status_code == 303
    assert state_of(conn, jobs_db["r1"]) == "ready"


def test_read_only_mode_runs_no_write_statement(conn: psycopg.Connection[Any],
                                                jobs_db: dict[str, int], db_dsn: str,
                                                pg_admin_dsn: str) -> None:
    """As a login role holding only sqljobs_reader, whose every transaction is read-only
    (a write would fail the page), every page answers."""
    conn.execute("drop role if exists dashboard_reader")
    conn.execute("create role dashboard_reader login")
    conn.execute("alter role dashboard_reader set default_transaction_read_only = on")
    conn.execute("grant sqljobs_reader to dashboard_reader")
    # (keywords, not a URL: under the embedded server the host is a socket directory)
    reader = make_conninfo(db_dsn, user="dashboard_reader")
    try:
        with mounted(reader) as web:
            for path in ("/", "/live/overview", "/jobs", "/jobs?state=dead", "/dead", "/workers",
                         "/schedules", "/outbox", f"/jobs/{jobs_db['r1']}"):
                page = web.get(PREFIX + path)
                assert page.status_code == 200, (path, page.text[-500:])
    finally:
        conn.execute("drop role dashboard_reader")


# -- jobs.finished_per_minute (sql/97_dashboard.sql) ------------------------------------

def test_finished_per_minute_buckets_the_window_with_zeros(conn: psycopg.Connection[Any]) -> None:
    client = Client(conn)
    for key in ("a", "b", "c"):
        client.run(queries.enqueue("t.job", key, {}, {"max_attempts": 1}))
    conn.execute("set jobs.fake_now = '2030-01-01 10:00:30+00'")
    first, second, third = client.run(queries.claim(["default"], "w", 3))
    client.run(queries.ack(first.id, first.claim, None))  # succeeded at 10:00
    client.run(queries.nack(second.id, second.claim, {"message": "x"}))  # dead at 10:00
    conn.execute("set jobs.fake_now = '2030-01-01 10:02:10+00'")
    client.run(queries.ack(third.id, third.claim, None))  # succeeded at 10:02
    rows = conn.execute("select to_char(minute at time zone 'utc', 'HH24:MI'), succeeded, failed"
                        " from jobs.finished_per_minute(4)").fetchall()
    conn.execute("reset jobs.fake_now")
    assert rows == [("09:59", 0, 0), ("10:00", 1, 1), ("10:01", 0, 0), ("10:02", 1, 0)]
    with pytest.raises(psycopg.Error, match="between 1 and 1440"):
        conn.execute("select jobs.finished_per_minute(0)")
