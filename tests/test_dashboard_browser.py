"""The dashboard in a real browser: Playwright driving Debian's Chromium against the
dashboard served by uvicorn, on the real database, with jobs a real worker ran (a mail
retried once, a report that ends dead after three attempts with a traceback each, a
terminal failure, resizes that succeed).

It opens the overview and switches its ranges, checks the layout uses a 1400 px window,
sees the jobs list refresh itself, opens the dead job's page (its label, every attempt,
a traceback laid out as lines), requeues it and lets a worker run it. It takes the
documentation's screenshots (the overview, docs/img/dashboard.png, and the dead job's
page, docs/img/dashboard-job.png) into .ci/out/; `make screenshots` writes them into
docs/img/ (SQLJOBS_SCREENSHOTS_DIR), so a test run never changes the checkout.

Chromium comes from apt (`apt-get install chromium`), never downloaded by Playwright.
Without it the test skips, unless SQLJOBS_REQUIRE_BROWSER=1 (.ci/run sets it): then it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import uvicorn
from psycopg.conninfo import conninfo_to_dict
from pydantic import BaseModel

from sqljobs import App, JobContext, RetryPolicy, fresh_key
from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs.dashboard import app as dashboard
from tests.processes import wait_for
from tests.worker_helpers import running

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
SHOTS_DIR = Path(os.environ.get("SQLJOBS_SCREENSHOTS_DIR") or ROOT / ".ci" / "out")
SHOTS = {"overview": SHOTS_DIR / "dashboard.png", "job": SHOTS_DIR / "dashboard-job.png"}
QUEUES = ["mail", "reports", "media", "billing"]


def _browser_or_skip() -> None:
    if Path(CHROMIUM).exists() and shutil.which(CHROMIUM):
        return
    message = f"{CHROMIUM} is missing: apt-get install -y chromium"
    if os.environ.get("SQLJOBS_REQUIRE_BROWSER") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(db_dsn: str) -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(dashboard(db_dsn, allow_actions=True),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, "uvicorn to start", timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


class Mail(BaseModel):
    to: str
    flaky: bool = False


class Report(BaseModel):
    quarter: str


class Image(BaseModel):
    name: str


class PrinterOnFire(RuntimeError):
    pass


class Refused(RuntimeError):
    pass


def demo_app(dsn: str, healed: threading.Event) -> App:
    """Jobs like the demo's: a flaky mail, a report that fails until `healed` is set, a
    terminal refusal, resizes; the billing queue declared but idle."""
    app = App(dsn)

    @app.job(name="mail.send", queue="mail", retry=RetryPolicy(base_s=0.05, jitter="none"))
    def send(ctx: JobContext, mail: Mail) -> dict[str, str]:
        if mail.flaky and ctx.attempt == 1:
            raise ConnectionError(f"smtp.example.com refused the connection for {mail.to}")
        return {"sent_to": mail.to}

    @app.job(name="report.build", queue="reports",
             retry=RetryPolicy(max_attempts=3, base_s=0.05, jitter="none"))
    def build(ctx: JobContext, report: Report) -> dict[str, int]:
        if not healed.is_set():
            raise PrinterOnFire(f"printer on fire while printing {report.quarter}")
        return {"pages": 3}

    @app.job(name="billing.charge", queue="billing", terminal=(Refused,))
    def charge(ctx: JobContext, report: Report) -> None:
        raise Refused("the card issuer refused the charge")

    @app.job(name="media.resize", queue="media")
    async def resize(ctx: JobContext, image: Image) -> dict[str, str]:
        return {"thumbnail": f"{image.name}.small"}

    return app


def backfill(conn: psycopg.Connection[Any]) -> None:
    """The past hour's work, so the charts have a history: every few minutes, on the
    database clock of that moment, resizes and mails that succeed and now and then a
    refused charge (the engine's own functions, with jobs.fake_now set back)."""
    client = Client(conn)
    try:
        for slot, minutes_ago in enumerate(range(56, 1, -3)):
            conn.execute("select set_config('jobs.fake_now', (now() - make_interval(mins => %s))"
                         "::text, false)", (minutes_ago,))
            done = [("media.resize", "media", {"name": f"old-{slot}-{n}.png"})
                    for n in range(2 + (slot * 7) % 6)]
            done += [("mail.send", "mail", {"to": f"user{slot}@example.com"})] * (slot % 3)
            for n, (name, queue, payload) in enumerate(done):
                client.run(queries.enqueue(name, f"past-{slot}-{n}", payload, {"queue": queue}))
            for queue in ("media", "mail"):
                for job in client.run(queries.claim([queue], "w-past", 100)):
                    client.run(queries.ack(job.id, job.claim))
            if slot % 5 == 4:
                client.run(queries.enqueue("billing.charge", f"past-{slot}", {"quarter": "Q"},
                                           {"queue": "billing"}))
                job = client.run(queries.claim(["billing"], "w-past", 1))[0]
                client.run(queries.nack(job.id, job.claim, {"kind": "terminal",
                                                            "message": "refused"}, "fail"))
    finally:
        conn.execute("reset jobs.fake_now")


def state(client: Client, job_id: int) -> str:
    job = client.run(queries.get_job(job_id))
    assert job is not None
    return job.state.value


def test_the_dashboard_in_a_browser(conn: psycopg.Connection[Any], db_dsn: str,
                                    served: str) -> None:
    _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    client = Client(conn)
    healed = threading.Event()
    app = demo_app(db_dsn, healed)
    backfill(conn)
    mails = [app.job_handle("mail.send").enqueue({"to": to, "flaky": to == "ada@example.com"},
                                                 key=fresh_key()).id
             for to in ("ada@example.com", "grace@example.com", "linus@example.com")]
    report = app.job_handle("report.build").enqueue({"quarter": "2030-Q1"}, key="q1").id
    refused = app.job_handle("billing.charge").enqueue({"quarter": "2030-Q1"}, key="c1").id
    images = [app.job_handle("media.resize").enqueue({"name": f"cat-{n}.png"},
                                                     key=fresh_key()).id for n in range(4)]
    every = [*mails, report, refused, *images]
    with running(app, queues=QUEUES):
        wait_for(lambda: all(state(client, i) in ("succeeded", "failed", "dead") for i in every),
                 "every job to finish")
    assert state(client, report) == "dead" and state(client, refused) == "failed"
    succeeded = str(conn.execute("select count(*) from jobs.job where state = 'succeeded'")
                    .fetchone()[0])  # type: ignore[index]
    SHOTS_DIR.mkdir(parents=True, exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})

        # the overview: every queue, the header, the charts and their ranges
        page.goto(served + "/")
        for queue in QUEUES:
            expect(page.locator("#queues")).to_contain_text(queue)
        expect(page.locator("#database")).to_contain_text(f"/{conninfo_to_dict(db_dsn)['dbname']}")
        expect(page.locator("#mode")).to_have_text("actions enabled")
        expect(page.locator("#refreshed")).to_have_text(re.compile(r"\d\d:\d\d:\d\d UTC"))
        expect(page.locator("#chart-throughput")).to_contain_text("per minute")
        expect(page.locator("#chart-queue-reports")).to_be_visible()
        expect(page.locator("#succeeded")).to_have_text(succeeded)
        # the layout uses the window: the tables span it and nothing scrolls sideways
        width = page.evaluate("document.querySelector('#queues').getBoundingClientRect().width")
        assert width >= 0.9 * 1400, width
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(path=str(SHOTS["overview"]), full_page=True)
        page.get_by_role("link", name="6 h", exact=True).click()
        expect(page).to_have_url(re.compile(r"range=6h"))
        expect(page.locator("#chart-throughput")).to_contain_text("per 5 min")
        expect(page.locator("#succeeded")).to_have_text(succeeded)
        page.get_by_role("link", name="24 h", exact=True).click()
        expect(page.locator("#chart-throughput")).to_contain_text("per 15 min")

        # the jobs list refreshes itself: a job enqueued now appears without a reload
        page.get_by_role("link", name="Jobs", exact=True).click()
        expect(page.locator("#jobs")).to_contain_text("printer on fire")
        late = app.job_handle("media.resize").enqueue({"name": "late.png"}, key="late").id
        expect(page.locator("#jobs")).to_contain_text(f"{late}", timeout=30_000)

        # the dead report: what happened, every attempt, the traceback as lines
        page.get_by_label("state").select_option("dead")
        page.get_by_role("button", name="Filter").click()
        page.get_by_role("link", name=str(report), exact=True).click()
        expect(page.locator("#state")).to_have_text("dead")
        expect(page.locator("#label")).to_have_text("dead: retries exhausted after 3 of 3 attempts")
        rows = page.locator("#attempts tr")
        expect(rows).to_have_count(4)  # the header and three attempts
        expect(rows.nth(1)).to_contain_text("failed, retried")
        expect(rows.nth(3)).to_contain_text("dead-lettered")
        trace = page.locator("#last-error pre.traceback")
        expect(trace).to_contain_text("Traceback (most recent call last):")
        expect(trace).to_contain_text("PrinterOnFire: printer on fire while printing 2030-Q1")
        lines = page.evaluate("document.querySelector('#last-error pre.traceback')"
                              ".getClientRects()[0].height / 12")
        assert lines > 4, "the traceback shows as several lines"
        assert page.evaluate("(() => { const p = document.querySelector("
                             "'#last-error pre.traceback'); "
                             "return p.scrollWidth <= p.clientWidth; })()"), \
            "no horizontal scrollbar: long lines wrap"
        rows.nth(1).locator("summary").click()
        expect(rows.nth(1).locator("pre.traceback")).to_be_visible()
        page.screenshot(path=str(SHOTS["job"]), full_page=True)
        # the page refreshes itself, and a traceback opened stays open
        before = page.locator("#refreshed").inner_text()
        expect(page.locator("#refreshed")).not_to_have_text(before, timeout=30_000)
        expect(rows.nth(1).locator("pre.traceback")).to_be_visible()

        # requeue it; once healed, a worker runs it, and the page says so
        page.get_by_role("button", name="Requeue").click()
        expect(page.get_by_role("status")).to_contain_text("retry")
        expect(page.locator("#state")).to_have_text("ready")
        healed.set()
        with running(app, queues=QUEUES):
            wait_for(lambda: state(client, report) == "succeeded", "the requeued report to run")
        # the job page refreshes itself too
        expect(page.locator("#state")).to_have_text("succeeded", timeout=30_000)
        expect(page.locator("#result")).to_contain_text("pages")
        expect(page.locator("#label")).to_have_text(
            "succeeded on attempt 1 of 3 after a requeue (3 earlier attempts did not)")
        expect(page.locator("#attempts tr")).to_have_count(5)  # 3 failed, then the success
        browser.close()
