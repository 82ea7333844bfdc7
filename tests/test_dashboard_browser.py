"""The dashboard in a real browser: Playwright driving Debian's Chromium against the
dashboard served by uvicorn, on the real database. Open the overview, filter to the dead
jobs, open one, requeue it, let a worker run it, and see it succeeded. The screenshots go
to .ci/out/ (a CI artifact); docs/img/dashboard.png was taken of `sqljobs demo`'s data.

Chromium comes from apt (`apt-get install chromium`), never downloaded by Playwright.
Without it the test skips, unless SQLJOBS_REQUIRE_BROWSER=1 (.ci/run sets it): then it fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import uvicorn
from pydantic import BaseModel

from sqljobs import App
from sqljobs.client import queries
from sqljobs.client.connection import Client
from sqljobs.dashboard import app as dashboard
from tests.worker_helpers import running

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
ARTIFACT = ROOT / ".ci" / "out" / "dashboard.png"


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
        for _ in range(100):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


class Empty(BaseModel):
    pass


def report_app(dsn: str) -> App:
    app = App(dsn)

    @app.job(name="report.build", queue="default")
    async def build(ctx: Any, payload: Empty) -> dict[str, int]:
        return {"pages": 3}

    return app


def test_requeue_a_dead_job_from_the_browser(conn: psycopg.Connection[Any], db_dsn: str,
                                             served: str) -> None:
    _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    client = Client(conn)
    client.run(queries.enqueue("mail.send", "welcome", {"to": "ada"}, {"queue": "mail"}))
    dead = client.run(queries.enqueue("report.build", "q3", {}, {"max_attempts": 1})).id
    job = client.run(queries.claim(["default"], "w", 1))[0]
    client.run(queries.nack(job.id, job.claim, {"message": "printer on fire"}))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(served + "/")
        expect(page.locator("#queues")).to_contain_text("mail")
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACT), full_page=True)

        page.get_by_role("link", name="Jobs", exact=True).click()
        page.get_by_label("state").select_option("dead")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#jobs")).to_contain_text("printer on fire")
        page.get_by_role("link", name=str(dead), exact=True).click()
        expect(page.locator("#state")).to_have_text("dead")

        page.get_by_role("button", name="Requeue").click()
        expect(page.get_by_role("status")).to_contain_text("retry")
        expect(page.locator("#state")).to_have_text("ready")

        with running(report_app(db_dsn), queues=["default"]):
            for _ in range(100):
                if client.run(queries.get_job(dead)).state == "succeeded":  # type: ignore[union-attr]
                    break
                threading.Event().wait(0.1)
        page.reload()
        expect(page.locator("#state")).to_have_text("succeeded")
        expect(page.locator("#result")).to_contain_text("pages")
        page.screenshot(path=str(ARTIFACT.with_name("dashboard-job.png")), full_page=True)
        browser.close()
