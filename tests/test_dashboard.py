"""The dashboard's pages and actions (sqljobs.dashboard) against the real database,
through Starlette's TestClient, mounted under a prefix as a host application would:
the queues (the same set as the metrics), the charts and their ranges, the header
(database, mode, refresh time), live refresh, what each state's label says, the attempt
history and tracebacks, and the actions behind their flag."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from sqljobs import App, fresh_key
from sqljobs._app.maintenance import Empty
from sqljobs._client import introspection, queries
from sqljobs._client.connection import Client
from sqljobs.dashboard import _charts as charts
from sqljobs.dashboard import _present as present
from sqljobs.dashboard import app
from sqljobs.dashboard._web import RANGES, window_start
from tests.processes import wait_for
from tests.worker_helpers import running

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

def cell_texts(page: str, table_id: str, column: int = 0) -> list[str]:
    """The text of one column of a table's body rows."""
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert table, f"no table {table_id}"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
    return [html.unescape(re.sub(r"<[^>]+>", "", c[column])).strip() for c in cells if c]


def test_overview_shows_queues_charts_and_links_under_the_prefix(
        jobs_db: dict[str, int], web: TestClient) -> None:
    page = web.get(PREFIX + "/")
    assert page.status_code == 200
    assert ">mail<" in page.text and ">default<" in page.text
    # throughput and failures, and one chart per queue that finished something
    assert 'id="chart-throughput"' in page.text and 'id="chart-failures"' in page.text
    assert 'id="chart-queue-default"' in page.text and 'id="chart-queue-mail"' not in page.text
    assert page.text.count("<svg") == 3  # all drawn on the server
    assert "Succeeded: 1 in the last 1 h" in page.text
    assert "Failed or dead: 1 in the last 1 h" in page.text
    assert 'id="failure-rate">50.0%' in page.text
    assert f'href="{PREFIX}/jobs?queue=mail"' in page.text
    live = web.get(PREFIX + "/live/overview")
    assert live.status_code == 200 and "<nav>" not in live.text and 'id="queues"' in live.text


def test_charts_have_a_time_axis_a_count_axis_and_a_rate_axis(jobs_db: dict[str, int],
                                                              web: TestClient) -> None:
    page = web.get(PREFIX + "/").text
    chart = re.search(r'<figure class="chart" id="chart-throughput">.*?</figure>', page, re.S)
    assert chart
    svg = chart.group(0)
    assert "per minute" in svg and "/min" in svg and "UTC" in svg  # both axes' titles
    times = re.findall(r">(\d\d:\d\d)</text>", svg)
    assert len(times) >= 4, "the time axis is labelled"
    assert all(int(t[3:]) % 10 == 0 for t in times), "at round times (1 h: every 10 minutes)"
    counts = re.findall(r'text-anchor="end">(\d+)</text>', svg)
    assert counts[0] == "0" and len(counts) >= 2, "the count axis is labelled from 0"
    assert "<title>" in svg and "succeeded" in svg  # each bucket's numbers on hover


@pytest.mark.parametrize(("key", "bucket", "every"), [("15m", "per minute", 5),
                                                      ("1h", "per minute", 10),
                                                      ("6h", "per 5 min", 60),
                                                      ("24h", "per 15 min", 240)])
def test_every_range_has_its_buckets_and_labels(jobs_db: dict[str, int], web: TestClient,
                                                key: str, bucket: str, every: int) -> None:
    page = web.get(PREFIX + "/", params={"range": key}).text
    chosen = RANGES[key]
    assert re.search(rf'class="chosen" aria-current="true">{re.escape(chosen.label)}<', page)
    assert f"Succeeded: 1 in the last {chosen.label}" in page
    svg = re.search(r'id="chart-throughput">.*?</figure>', page, re.S)
    assert svg and bucket in svg.group(0)
    bars = re.findall(r'fill="transparent"><title>', svg.group(0))
    assert len(bars) == chosen.minutes // chosen.bucket_minutes, "one bucket per bar slot"
    times = re.findall(r">(\d\d):(\d\d)</text>", svg.group(0))
    assert times and all((int(h) * 60 + int(m)) % every == 0 for h, m in times)
    assert f"every {chosen.refresh_s} s" in page
    assert f"last {chosen.label}" in web.get(PREFIX + "/live/overview",
                                             params={"range": key}).text
    fallback = web.get(PREFIX + "/", params={"range": "3 weeks"}).text
    assert "Succeeded: 1 in the last 1 h" in fallback  # an unknown range: the default


def test_window_start_matches_the_sql_buckets(conn: psycopg.Connection[Any]) -> None:
    """The dashboard lays out the buckets jobs.finished_by_queue answers for: a job
    finished now falls in the last bucket of every range."""
    client = Client(conn)
    conn.execute("set jobs.fake_now = '2030-01-01 10:07:30+00'")
    try:
        client.run(queries.enqueue("now.job", "n", {}, {"queue": "now"}))
        job = client.run(queries.claim(["now"], "w", 1))[0]
        client.run(queries.ack(job.id, job.claim))
        now = client.run(queries.database_now())
        for chosen in RANGES.values():
            start = window_start(now, chosen)
            bucket = timedelta(minutes=chosen.bucket_minutes)
            last = start + bucket * (chosen.minutes // chosen.bucket_minutes - 1)
            rows = conn.execute("select bucket from jobs.finished_by_queue(%s, %s)",
                                (chosen.minutes, chosen.bucket_minutes)).fetchall()
            assert rows == [(last,)], chosen
            assert start.timestamp() % (chosen.bucket_minutes * 60) == 0, chosen
            assert start.tzinfo is not None and start.astimezone(UTC) == start
    finally:
        conn.execute("reset jobs.fake_now")


def test_rates_read_as_people_read_them() -> None:
    assert present.rate(0) == "0" and present.rate(None) == "0"
    assert present.rate(1 / 3600) == "1/h"
    assert present.rate(3 / 60) == "3/min"
    assert present.rate(12.5) == "12.5/s" and present.rate(250) == "250/s"
    assert present.rate(0.5 / 60, "/min") == "0.5/min"
    assert present.age(0.25) == "250ms" and present.age(90) == "90.0s" and present.age(None) == "-"
    assert charts.nice_top(0) == (1, 1) and charts.nice_top(7) == (8, 2)
    assert charts.nice_top(130) == (150, 50)


def test_queue_table_shows_readable_rates_not_zero_per_second(
        conn: psycopg.Connection[Any], web: TestClient) -> None:
    client = Client(conn)
    # declared, as a worker declares its jobs' queues
    conn.execute("select jobs.job_type_put('slow.job', '{\"queue\": \"slow\"}')")
    for key in ("a", "b", "c"):
        client.run(queries.enqueue("slow.job", key, {}, {"queue": "slow"}))
    for job in client.run(queries.claim(["slow"], "w", 3)):
        client.run(queries.ack(job.id, job.claim))
    page = web.get(PREFIX + "/").text
    queues = cell_texts(page, "queues")
    row = queues.index("slow")
    assert cell_texts(page, "queues", 9)[row] == "3"  # succeeded in the range
    assert cell_texts(page, "queues", 10)[row] == "3/h"  # 3 in an hour, not 0.001/s
    assert cell_texts(page, "throughput", 5)[cell_texts(page, "throughput").index("slow")] == "3/h"
    assert "0.000" not in page


# -- the header: which database, which mode, when -------------------------------------

def test_header_names_the_database_the_mode_and_the_refresh_time(
        jobs_db: dict[str, int], db_dsn: str) -> None:
    given = conninfo_to_dict(db_dsn)
    with_password = make_conninfo(db_dsn, password="hunter2-not-shown")
    with mounted(with_password) as web:
        for path in ("/", "/jobs", f"/jobs/{jobs_db['r1']}", "/workers", "/schedules",
                     "/outbox", "/dead", "/jobs/999999"):
            page = web.get(PREFIX + path).text
            database = re.search(r'<code id="database">([^<]+)</code>', page)
            assert database, path
            assert database.group(1).endswith(f":{given.get('port', 5432)}/{given['dbname']}")
            assert "hunter2" not in page, "never the password"
            assert '<span id="mode" class="mode">read-only</span>' in page
            assert re.search(r'refreshed <span id="refreshed">\d\d:\d\d:\d\d UTC</span>', page)
    with mounted(db_dsn, allow_actions=True) as web:
        assert 'class="mode actions">actions enabled<' in web.get(PREFIX + "/").text
    with mounted(db_dsn, token="s3cret") as web:
        assert ">read-only: log in for actions<" in web.get(PREFIX + "/").text


def test_overview_jobs_and_job_pages_refresh_their_live_part(
        jobs_db: dict[str, int], web: TestClient) -> None:
    for path, marker in (("/?range=6h", 'id="queues"'), ("/jobs?state=dead", 'id="jobs"'),
                         (f"/jobs/{jobs_db['r1']}", 'id="attempts"')):
        page = web.get(PREFIX + path)
        assert page.headers["cache-control"] == "no-store"
        found = re.search(r'<div id="live" data-src="([^"]+)">', page.text)
        assert found and html.unescape(found.group(1)) == PREFIX + path, path
        assert 'id="auto-refresh" checked' in page.text and "setInterval" in page.text
        live = web.get(PREFIX + path, headers={"x-sqljobs-live": "1"})
        assert live.status_code == 200 and marker in live.text
        assert "<header" not in live.text and "<script" not in live.text
        assert re.search(r'data-refreshed="\d\d:\d\d:\d\d UTC"', live.text)
        assert live.headers["vary"] == "x-sqljobs-live"
    # pages without live data do not refresh
    assert "setInterval" not in web.get(PREFIX + "/outbox").text


def test_layout_is_fluid_with_a_maximum_width(jobs_db: dict[str, int], web: TestClient) -> None:
    page = web.get(PREFIX + "/").text
    assert "max-width: 1800px" in page and "width: 100%" in page
    assert "600px" not in page  # no fixed-width chart


# -- the queues: the metrics' set -----------------------------------------------------

def test_the_overview_lists_the_same_queues_as_the_metrics(conn: psycopg.Connection[Any],
                                                           db_dsn: str,
                                                           web: TestClient) -> None:
    from sqljobs.metrics import QueueGaugeCollector

    client = Client(conn)
    conn.execute("select jobs.job_type_put('typed.job', '{\"queue\": \"typed\"}')")
    client.run(queries.worker_heartbeat("w-set", ["served", "typed"], ["typed.job"], 2, 30.0))
    client.run(queries.pause_queue("paused"))
    client.run(queries.limit_put("q-lim", {"scope": "queue", "target": "limited",
                                           "concurrency": 1}))
    client.run(queries.enqueue("loose.job", "l1", {}, {"queue": "loose"}))  # live, undeclared
    done = client.run(queries.enqueue("typed.job", "t1", {}, {"queue": "typed"})).id
    for job in client.run(queries.claim(["typed"], "w-set", 1)):
        client.run(queries.ack(job.id, job.claim))  # typed: every job finished
    assert state_of(conn, done) == "succeeded"
    gauges = QueueGaugeCollector(db_dsn, cache_s=0)
    try:
        metrics = {m.name: m for m in gauges.collect()}
        scraped = sorted(s.labels["queue"] for s in metrics["sqljobs_queue_ready_jobs"].samples)
    finally:
        gauges.close()
    listed = cell_texts(web.get(PREFIX + "/").text, "queues")
    assert listed == scraped == ["limited", "loose", "paused", "served", "typed"]
    typed = listed.index("typed")
    assert cell_texts(web.get(PREFIX + "/").text, "queues", 9)[typed] == "1"  # its finished job


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


def test_job_page_shows_the_actor(conn: psycopg.Connection[Any], web: TestClient) -> None:
    client = Client(conn)
    asked = client.run(queries.enqueue("report.build", "by-actor", {},
                                       {"actor": {"user": "42", "via": "<api>"}}))
    nobody = client.run(queries.enqueue("report.build", "by-nobody", {}, {}))
    page = web.get(f"{PREFIX}/jobs/{asked.id}")
    found = re.search(r'<td id="actor"[^>]*>(.*?)</td>', page.text, re.S)
    assert found and html.unescape(found.group(1)) == '{"user": "42", "via": "<api>"}'
    assert "<api>" not in page.text, "escaped: the actor is the caller's word"
    empty = re.search(r'<td id="actor"[^>]*>(.*?)</td>', web.get(f"{PREFIX}/jobs/{nobody.id}").text)
    assert empty and empty.group(1) == ""


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


# -- what a job's state means, its attempts, its errors -------------------------------

TRACEBACK = ('Traceback (most recent call last):\n  File "app.py", line 7, in send\n'
             '    smtp.send(to)\nConnectionError: <smtp.example.com> refused')


def label_of(web: TestClient, job_id: int) -> str:
    page = web.get(f"{PREFIX}/jobs/{job_id}")
    assert page.status_code == 200, page.text[-500:]
    found = re.search(r'<p class="label" id="label">(.*?)</p>', page.text, re.S)
    assert found
    return html.unescape(found.group(1))


def take(client: Client, queue: str, worker: str = "w", lease_s: float = 30.0) -> Any:
    claimed = client.run(queries.claim([queue], worker, 1, lease_s))
    assert len(claimed) == 1, f"nothing to claim in {queue}"
    return claimed[0]


def lapse_leases(conn: psycopg.Connection[Any], queue: str) -> None:
    """Recover the queue's running jobs as if their leases had lapsed: a claim an hour
    ahead on the database clock, with the queue paused so that it takes nothing."""
    client = Client(conn)
    client.run(queries.pause_queue(queue))
    conn.execute("select set_config('jobs.fake_now', (now() + interval '1 hour')::text, false)")
    try:
        assert client.run(queries.claim([queue], "w-recover", 1)) == []
    finally:
        conn.execute("reset jobs.fake_now")
        client.run(queries.resume_queue(queue))


def test_every_state_says_what_happened_to_this_job(conn: psycopg.Connection[Any],
                                                     jobs_db: dict[str, int],
                                                     web: TestClient) -> None:
    client = Client(conn)

    def new(key: str, **options: Any) -> int:
        return client.run(queries.enqueue("label.job", key, {}, {"queue": f"l-{key}",
                                                                 **options})).id

    fresh = new("fresh")
    assert re.fullmatch(r"ready: waits for its first attempt \(of 25\), as soon as a worker "
                        r"takes it", label_of(web, fresh))

    retried = new("retried")
    job = take(client, "l-retried")
    client.run(queries.nack(job.id, job.claim, {"message": "busy"}, "retry", 3600))
    assert re.fullmatch(r"ready: attempt 1 of 25 failed; attempt 2 runs at \S+ \S+ UTC "
                        r"\(in \d+m\)", label_of(web, retried))

    lost = new("lost")
    take(client, "l-lost", "w-gone", lease_s=1)
    lapse_leases(conn, "l-lost")
    assert label_of(web, lost).startswith(
        "ready: attempt 1 of 25 was lost (the lease of worker w-gone expired); attempt 2 runs")

    running = new("running")
    take(client, "l-running", "w-busy")
    assert label_of(web, running).startswith("running: attempt 1 of 25 on worker w-busy for ")

    sleeper = new("sleeper")
    job = take(client, "l-sleeper")
    client.run(queries.step_sleep(job.id, job.claim, "nap", delay_s=3600))
    assert re.fullmatch(r"parked: sleeps until \S+ \S+ UTC \(in \d+m\)", label_of(web, sleeper))

    waiter = new("waiter")
    job = take(client, "l-waiter")
    client.run(queries.step_wait(job.id, job.claim, "paid", [{"event": "order.paid"}]))
    assert label_of(web, waiter).startswith("parked: waits for the event order.paid")

    first = new("first")
    job = take(client, "l-first")
    client.run(queries.ack(job.id, job.claim))
    assert label_of(web, first) == "succeeded on its first attempt"

    third = new("third")
    for _ in range(2):
        job = take(client, "l-third")
        client.run(queries.nack(job.id, job.claim, {"message": "flaky"}, "retry", 0))
    job = take(client, "l-third")
    client.run(queries.ack(job.id, job.claim))
    assert label_of(web, third) == "succeeded on attempt 3 of 25, after 2 that did not"

    terminal = new("terminal")
    job = take(client, "l-terminal")
    client.run(queries.nack(job.id, job.claim, {"kind": "terminal", "message": "no"}, "fail"))
    assert label_of(web, terminal) == ("failed: terminal error on attempt 1 (of 25 allowed), "
                                       "not retried")

    exhausted = new("exhausted", max_attempts=1, dead_letter=False)
    job = take(client, "l-exhausted")
    client.run(queries.nack(job.id, job.claim, {"message": "still down"}))
    assert label_of(web, exhausted) == ("failed: retries exhausted after 1 of 1 attempts "
                                        "(dead-lettering is off for this job)")

    assert label_of(web, jobs_db["r1"]) == "dead: retries exhausted after 1 of 1 attempts"
    dead_lost = new("dead-lost", max_attempts=1)
    take(client, "l-dead-lost", lease_s=1)
    lapse_leases(conn, "l-dead-lost")
    assert label_of(web, dead_lost) == ("dead: retries exhausted after 1 of 1 attempts; "
                                        "the last one's lease expired")

    unstarted = new("unstarted")
    client.run(queries.cancel(unstarted))
    assert label_of(web, unstarted) == "cancelled before any attempt ran"
    stopped = new("stopped")
    take(client, "l-stopped")
    client.run(queries.cancel(stopped))
    assert label_of(web, stopped) == "cancelled after 1 attempt (of 25)"

    interrupted = new("interrupted")
    job = take(client, "l-interrupted", "w-drain")
    client.run(queries.nack(job.id, job.claim, None, "interrupt"))
    assert label_of(web, interrupted) == (
        "interrupted: a draining worker (w-drain) sent it back, not counted as an attempt; "
        "attempt 1 of 25 runs as soon as a worker takes it")
    for job_id in (fresh, retried, lost, running, sleeper, terminal, jobs_db["r1"]):
        assert "dead letter after" not in label_of(web, job_id)


def test_job_page_shows_every_attempt_with_its_worker_duration_outcome_and_traceback(
        conn: psycopg.Connection[Any], web: TestClient) -> None:
    client = Client(conn)
    job_id = client.run(queries.enqueue("mail.send", "hist", {"to": "ada"},
                                        {"queue": "hist", "max_attempts": 3})).id
    job = take(client, "hist", "w-one")
    client.run(queries.nack(job.id, job.claim, {"kind": "error", "type": "ConnectionError",
                                                "message": "refused", "traceback": TRACEBACK},
                            "retry", 0))
    take(client, "hist", "w-two", lease_s=1)
    lapse_leases(conn, "hist")
    take(client, "hist", "w-three")
    page = web.get(f"{PREFIX}/jobs/{job_id}").text
    numbers = cell_texts(page, "attempts", 0)
    outcomes = cell_texts(page, "attempts", 1)
    workers = cell_texts(page, "attempts", 2)
    took = cell_texts(page, "attempts", 4)
    assert numbers == ["1", "2", "3"]
    assert outcomes == ["failed, retried", "lost: its lease expired", "running"]
    assert workers == ["w-one", "w-two", "w-three"]
    assert re.fullmatch(r"\d+ms|\d+\.\ds", took[0]) and took[2].startswith("running for")
    assert took[1] == "1.0s"  # from its start to its lease's expiry
    # the traceback as its lines: newlines kept, escaped as HTML, in a monospace block
    block = re.search(r'<pre class="traceback">(.*?)</pre>', page, re.S)
    assert block and html.unescape(block.group(1)) == TRACEBACK
    assert "\\n" not in block.group(1) and "&lt;smtp.example.com&gt;" in block.group(1)
    assert "ConnectionError: refused" in cell_texts(page, "attempts", 5)[0]
    last = re.search(r'<div class="error" id="last-error">(.*?)</div>', page, re.S)
    assert last and "lease_expired" in last.group(1) and "w-two" in last.group(1)
    # through the client: the detail's attempts, as the CLI reads them too
    detail = Client(conn).run(introspection.job_detail(job_id))
    assert detail is not None
    assert [(a.attempt, a.outcome, a.worker) for a in introspection.attempts_of(detail)] == [
        (1, "retry", "w-one"), (2, "lease_expired", "w-two"), (3, "running", "w-three")]


def test_attempts_of_joins_the_history_and_the_run_the_columns_describe() -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)

    def detail(state: str, attempt: int, claim: int, history: list[dict[str, Any]],
               **job: Any) -> dict[str, Any]:
        return {"job": {"state": state, "attempt": attempt, "claim": claim, "worker": "w",
                        "started_at": start.isoformat(), "finished_at": None,
                        "last_error": None, **job}, "attempts": history}

    retry = {"attempt": 1, "claim": 1, "worker": "w", "outcome": "retry",
             "started_at": start.isoformat(), "ended_at": start.isoformat(),
             "error": {"message": "x"}}
    # waiting for its retry: the history holds its last run (same claim): nothing added
    assert [a.outcome for a in introspection.attempts_of(detail("ready", 1, 1, [retry]))] == [
        "retry"]
    # succeeded on the next attempt: that run is added, ended when the job finished
    done = introspection.attempts_of(detail("succeeded", 2, 2, [retry],
                                            finished_at=(start + timedelta(seconds=2)).isoformat()))
    assert [(a.attempt, a.outcome, a.duration_s) for a in done] == [(1, "retry", 0.0),
                                                                    (2, "succeeded", 2.0)]
    # parked: its attempt was given back, so it shows as the attempt it runs again as
    parked = introspection.attempts_of(detail("parked", 0, 1, []))
    assert [(a.attempt, a.outcome, a.ended_at) for a in parked] == [(1, "parked", None)]
    # never started, or no history and no run: nothing
    assert introspection.attempts_of(detail("ready", 0, 0, [], started_at=None)) == []
    assert introspection.attempts_of({"job": {"state": "ready", "attempt": 0, "claim": 0}}) == []
    assert introspection.AttemptRecord(attempt=1, outcome="running").duration_s is None


def test_errors_are_laid_out_as_tracebacks() -> None:
    view = present.error_view({"kind": "error", "type": "ValueError", "message": "bad",
                               "traceback": TRACEBACK, "attempt": 2, "at": "x", "code": 7})
    assert view is not None
    assert view["headline"] == "error · ValueError: bad" and view["trace"] == TRACEBACK
    assert view["extra"] == '{\n  "code": 7\n}'  # the other keys; attempt and at are shown apart
    other = present.error_view({"kind": "error", "message": "boom",
                                "detail": "at Foo.bar (foo.js:1)\nat main (main.js:9)"})
    assert other is not None and other["trace"] == "at Foo.bar (foo.js:1)\nat main (main.js:9)"
    assert present.error_view(None) is None
    plain = present.error_view("connection refused")
    assert plain is not None and plain["headline"] == "connection refused"
    assert present.error_message({"message": "a\n b"}) == "a b"


def test_job_page_shows_steps_in_order_and_children(conn: psycopg.Connection[Any],
                                                    web: TestClient) -> None:
    client = Client(conn)
    parent = client.run(queries.enqueue("flow.parent", "steps", {}, {"queue": "flow"}))
    job = take(client, "flow")
    for name in ("fetch", "transform", "load"):
        client.run(queries.step_put(job.id, job.claim, name, {"step": name}))
    conn.execute("select * from jobs.step_invoke(%s, %s, '{kid}', "
                 "'[{\"name\": \"flow.child\", \"key\": \"kid-1\"}]')", (job.id, job.claim))
    page = web.get(f"{PREFIX}/jobs/{parent.id}").text
    assert cell_texts(page, "steps", 1)[:3] == ["fetch", "transform", "load"]
    assert cell_texts(page, "steps", 0)[:3] == ["1", "2", "3"]
    assert cell_texts(page, "children", 1) == ["flow.child"]
    assert label_of(web, parent.id) == "parked: waits for 1 child job(s) to finish"


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


def test_fork_a_finished_job_from_a_step(conn: psycopg.Connection[Any], web: TestClient) -> None:
    client = Client(conn)
    job = client.run(queries.enqueue("flow.order", fresh_key(), {}, {"queue": "forks"}))
    held = take(client, "forks")
    for name in ("reserve", "charge", "ship"):
        client.run(queries.step_put(held.id, held.claim, name, {"step": name}))
    client.run(queries.nack(held.id, held.claim, {"message": "no"}, "fail"))
    page = web.get(f"{PREFIX}/jobs/{job.id}").text
    assert page.count("Fork from here") == 3
    done = post(web, f"/jobs/{job.id}/fork", step="charge")
    assert done.status_code == 303 and "done=fork" in done.headers["location"]
    fork = int(done.headers["location"].split("?")[0].rsplit("/", 1)[1])
    assert [r[0] for r in conn.execute("select name from jobs.job_steps(%s)", (fork,))] == [
        "reserve"]
    missing = post(web, f"/jobs/{job.id}/fork", step="nope")
    assert missing.status_code == 409 and "nope" in missing.text


def test_fork_is_absent_and_refused_with_actions_off(conn: psycopg.Connection[Any],
                                                     db_dsn: str) -> None:
    client = Client(conn)
    job = client.run(queries.enqueue("flow.order", fresh_key(), {}, {"queue": "forks"}))
    held = take(client, "forks")
    for name in ("reserve", "charge"):
        client.run(queries.step_put(held.id, held.claim, name, {"step": name}))
    client.run(queries.nack(held.id, held.claim, {"message": "no"}, "fail"))
    with mounted(db_dsn) as web:
        page = web.get(f"{PREFIX}/jobs/{job.id}").text
        assert "reserve" in page and "Fork from here" not in page
        assert f"/jobs/{job.id}/fork" not in page
        web.get(PREFIX + "/")
        cookie = web.cookies.get("sqljobs_csrf")
        refused = web.post(f"{PREFIX}/jobs/{job.id}/fork",
                           data={"csrf": cookie or "", "step": "charge"})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert conn.execute("select count(*)::int from jobs.job_fork").fetchone() == (0,)


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


def test_backfills_page_shows_progress_and_pauses_resumes_cancels(
        conn: psycopg.Connection[Any], web: TestClient) -> None:
    client = Client(conn)
    job = client.run(queries.enqueue("bf.web", "k", {"scope": ""}, {"queue": "bf_web"}))
    claimed = client.run(queries.claim(["bf_web"], "w", 1))[0]
    client.run(queries.backfill_begin(job.id, claimed.claim, "bf.web", "", "production", None,
                                      [], "sum", 400, False, "ci@deploy"))
    client.run(queries.backfill_advance(job.id, claimed.claim, "bf.web", "", "production", 1,
                                        [100], 100))
    page = web.get(PREFIX + "/backfills").text
    assert "bf.web" in page and "100/400 (25%)" in page and "ci@deploy" in page
    assert "/backfills/production/bf.web/pause" in page
    assert post(web, "/backfills/production/bf.web/pause", scope="").status_code == 303
    assert client.run(queries.backfills("production"))[0].status == "paused"
    assert "/backfills/production/bf.web/resume" in web.get(PREFIX + "/backfills").text
    assert post(web, "/backfills/production/bf.web/pause", scope="").status_code == 400
    assert post(web, "/backfills/production/bf.web/resume", scope="").status_code == 303
    assert post(web, "/backfills/production/bf.web/cancel", scope="").status_code == 303
    assert client.run(queries.backfills("production"))[0].status == "cancelled"
    assert post(web, "/backfills/staging/bf.web/pause", scope="").status_code == 400


def test_the_factories_page_and_a_jobs_page_show_the_factory_that_declared_it(
        db_dsn: str, conn: psycopg.Connection[Any], web: TestClient) -> None:
    declared = App(db_dsn)
    declared.rollup("sales.daily", target="public.daily_sales", key=("day", "shop"),
                    source="select 1 as day, 'a' as shop")
    declared.export_rows("orders.export", source="select id from public.orders", key="id",
                         url="s3://KEY:SECRET@bucket/orders?token=SECRET")
    declared.partitions("events.partitions", table="public.events", retention=timedelta(days=90))

    @declared.job(name="plain.job")
    def plain(ctx: Any, payload: Empty) -> None: ...

    with running(declared):  # a worker registers the job types it serves as it starts
        wait_for(lambda: sum(1 for t in Client(conn).run(introspection.job_types())
                             if t.factory) == 3, "the factories' job types registered")
    kinds = {t.name: t.factory for t in Client(conn).run(introspection.job_types())}
    assert kinds["plain.job"] is None
    assert kinds["orders.export"] == {"kind": "export", "url": "s3://bucket/orders",
                                      "format": "jsonl", "page": 1000, "tenant_column": None}
    page = web.get(PREFIX + "/factories")
    assert page.status_code == 200
    rows = dict(re.findall(r'>([a-z.]+)</a></td>\s*<td class="factory-kind">([a-z_]+)<',
                           page.text))
    assert rows == {"sales.daily": "rollup", "orders.export": "export",
                    "events.partitions": "partitions"}
    assert "SECRET" not in page.text, "a URL's credentials and query are never stored"
    assert "public.daily_sales" in html.unescape(page.text) and "plain.job" not in page.text
    assert f'href="{PREFIX}/factories"' in web.get(PREFIX + "/").text, "in the navigation"
    client = Client(conn)
    rollup = client.run(queries.enqueue("sales.daily", fresh_key(), {}, {}))
    other = client.run(queries.enqueue("plain.job", fresh_key(), {}, {}))
    assert re.search(r'<td id="factory"><a href="[^"]+/factories">rollup</a>',
                     web.get(f"{PREFIX}/jobs/{rollup.id}").text)
    assert 'id="factory"' not in web.get(f"{PREFIX}/jobs/{other.id}").text
