"""`app.webhook(...)` end to end: a real worker POSTing to a real local HTTP server
(uvicorn), every signature checked there by the Standard Webhooks reference library,
every attempt read back from `jobs.webhook_attempt`."""

from __future__ import annotations

import base64
import json
import threading
from typing import Annotated, Any

import psycopg
import pytest
from pydantic import BaseModel
from standardwebhooks import Webhook

from sqljobs import (
    App,
    ConfigurationError,
    InvalidPayload,
    RetryPolicy,
    Sensitive,
    WebhookDisabled,
)
from tests.http_server import Recorder, connected, serving, silent_listener
from tests.processes import scalar, wait_for
from tests.worker_helpers import running

SECRET = "whsec_" + base64.b64encode(b"a-signing-key-of-32-bytes-long!!").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"the-old-key-being-rotated-away!!").decode()
FAST = RetryPolicy(max_attempts=3, base_s=0.05, cap_s=0.05, jitter="none")


def ended(conn: psycopg.Connection[Any], job_id: int) -> tuple[str, Any, Any]:
    wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                            (job_id,)) in ("succeeded", "failed", "dead", "cancelled"),
             f"job {job_id} to end")
    row = conn.execute("select state::text, result, last_error from jobs.job where id = %s",
                       (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


class Card(BaseModel):
    holder: str
    number: Annotated[str, Sensitive]


# -- declaration -----------------------------------------------------------------------------

def test_declarations_and_events_are_checked_before_anything_is_written(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)
    with pytest.raises(ConfigurationError, match="http"):
        app.webhook("h.bad", url="ftp://x", secrets=SECRET)
    with pytest.raises(ConfigurationError, match="Standard Webhooks secret"):
        app.webhook("h.bad", url="http://x", secrets="whsec_")
    with pytest.raises(ConfigurationError, match="at least one"):
        app.webhook("h.bad", url="http://x", secrets=[])
    with pytest.raises(ConfigurationError, match="webhook's own"):
        app.webhook("h.bad", url="http://x", secrets=SECRET, headers={"Webhook-Id": "x"})
    hook = app.webhook("h.checked", url="http://127.0.0.1:9/in", secrets=SECRET, data=Card)
    before = scalar(conn, "select count(*) from jobs.job")
    with app:
        with pytest.raises(InvalidPayload, match="id"):
            hook.send("card.added", {"holder": "Ann", "number": "4242"}, id="not an id!")
        with pytest.raises(InvalidPayload, match="number"):
            hook.send("card.added", {"holder": "Ann"})
    assert scalar(conn, "select count(*) from jobs.job") == before


# -- delivery --------------------------------------------------------------------------------

def test_an_event_is_delivered_signed_and_its_attempt_recorded(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    recorder = Recorder(answers=[(200, b"thanks")])
    with serving(recorder) as base:
        app = App(db_dsn)
        hook = app.webhook("h.ok", url=f"{base}/in", secrets=[SECRET, OLD_SECRET], data=Card)
        with app, running(app):
            sent = hook.send("card.added", {"holder": "Ann", "number": "4242424242424242"},
                             id="evt_1")
            again = hook.send("card.added", {"holder": "Ann", "number": "4242424242424242"},
                              id="evt_1")
            state, result, _ = ended(conn, sent.id)
    assert again.id == sent.id and again.deduped, "the event id is the job's key"
    assert state == "succeeded" and result == {"status": 200, "attempt": 1}
    assert len(recorder.seen) == 1
    request = recorder.seen[0]
    assert request.path == "/in" and request.headers["webhook-id"] == "evt_1"
    # the reference library verifies it with either secret of the rotation
    for secret in (SECRET, OLD_SECRET):
        payload = Webhook(secret).verify(request.body, request.headers)
        assert payload["type"] == "card.added"
        assert payload["data"] == {"holder": "Ann", "number": "4242424242424242"}
    with pytest.raises(Exception, match="signature"):
        Webhook("whsec_" + base64.b64encode(b"x" * 32).decode()).verify(
            request.body, request.headers)
    [attempt] = hook.attempts(sent.id)
    assert (attempt.attempt, attempt.outcome, attempt.status, attempt.excerpt) == (
        1, "delivered", 200, "thanks")
    assert attempt.latency_ms >= 0


def test_retryable_answers_are_retried_by_the_policy_and_each_is_recorded(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    recorder = Recorder(answers=[(503, b"busy"), (429, b"slow down"), (200, b"ok")])
    with serving(recorder) as base:
        app = App(db_dsn)
        hook = app.webhook("h.retry", url=f"{base}/in", secrets=SECRET, retry=FAST)
        with app, running(app):
            sent = hook.send("ping", {"n": 1})
            state, _, _ = ended(conn, sent.id)
    assert state == "succeeded"
    assert [(a.attempt, a.outcome, a.status, a.excerpt) for a in hook.attempts(sent.id)] == [
        (1, "retry", 503, "busy"), (2, "retry", 429, "slow down"), (3, "delivered", 200, "ok")]
    ids = {r.headers["webhook-id"] for r in recorder.seen}
    assert ids == {recorder.seen[0].headers["webhook-id"]}, "every attempt carries one id"


def test_a_4xx_is_terminal_and_its_excerpt_is_bounded_and_redacted(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    def echo(request: Any) -> tuple[int, bytes]:  # a careless endpoint echoes everything
        return 400, (b"bad request: " + request.headers["webhook-signature"].encode() + b" "
                     + request.body + b" " + SECRET.encode() + b"x" * 2000)

    recorder = Recorder(decide=echo)
    with serving(recorder) as base:
        app = App(db_dsn)
        hook = app.webhook("h.reject", url=f"{base}/in", secrets=SECRET, data=Card, retry=FAST)
        with app, running(app):
            sent = hook.send("card.added", {"holder": "Ann", "number": "4242424242424242"})
            state, _, error = ended(conn, sent.id)
    assert state == "failed" and len(recorder.seen) == 1, "a 400 is not retried"
    assert error["type"].endswith("WebhookRejected")
    [attempt] = hook.attempts(sent.id)
    assert (attempt.outcome, attempt.status) == ("rejected", 400)
    assert attempt.excerpt is not None and len(attempt.excerpt) <= 512
    assert attempt.excerpt.startswith("bad request: [redacted] ")
    assert "4242424242424242" not in attempt.excerpt and "Ann" in attempt.excerpt
    assert SECRET not in attempt.excerpt and SECRET[6:] not in attempt.excerpt
    stored = conn.execute("select excerpt from jobs.webhook_attempt where job_id = %s",
                          (sent.id,)).fetchone()
    assert stored is not None and "4242424242424242" not in stored[0]


def test_no_answer_is_recorded_as_an_error_and_retried(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from tests.http_server import bound_socket

    closed = bound_socket()  # bound and never listening: every connect is refused
    app = App(db_dsn)
    hook = app.webhook("h.down", url=f"http://127.0.0.1:{closed.getsockname()[1]}/in",
                       secrets=SECRET, retry=RetryPolicy(max_attempts=2, base_s=0.05,
                                                         jitter="none", dead_letter=False))
    try:
        with app, running(app):
            sent = hook.send("ping")
            state, _, error = ended(conn, sent.id)
    finally:
        closed.close()
    assert state == "failed" and error["type"].endswith("WebhookFailed")
    attempts = hook.attempts(sent.id)
    assert [(a.attempt, a.outcome, a.status) for a in attempts] == [
        (1, "error", None), (2, "error", None)]
    assert all(a.excerpt and "Connect" in a.excerpt for a in attempts)


# -- the switch and the tenant -------------------------------------------------------------------

def test_a_disabled_endpoint_fails_fast_and_opens_no_socket(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    with silent_listener() as (base, sock):
        app = App(db_dsn)
        hook = app.webhook("h.off", url=f"{base}/in", secrets=SECRET, tenant="acme",
                           retry=FAST)
        with app:
            hook.disable("the customer removed it")
            assert hook.disabled() == "the customer removed it"
            with running(app):
                sent = hook.send("ping")
                state, _, error = ended(conn, sent.id)
            assert not connected(sock), "a disabled endpoint's job opened a socket"
            assert hook.enable() is True and hook.disabled() is None
    assert state == "failed" and error["type"].endswith("WebhookDisabled")
    assert [(a.outcome, a.status) for a in hook.attempts(sent.id)] == [("disabled", None)]
    assert issubclass(WebhookDisabled, Exception)


def test_an_event_of_another_tenant_is_refused_terminally(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    with silent_listener() as (base, sock):
        app = App(db_dsn)
        hook = app.webhook("h.acme", url=f"{base}/in", secrets=SECRET, tenant="acme",
                           retry=FAST)
        with app, running(app):
            other = hook.send("ping", tenant="globex")
            state, _, error = ended(conn, other.id)
            # the payload says acme, the job says globex: refused too
            mixed = hook.job.enqueue(hook.event("ping", tenant="acme"), key="mixed",
                                     tenant="globex")
            mixed_state, _, _ = ended(conn, mixed.id)
        assert not connected(sock)
    assert state == "failed" and error["type"].endswith("WebhookTenantRefused")
    assert mixed_state == "failed"
    assert [a.outcome for a in hook.attempts(other.id)] == ["refused"]
    assert scalar(conn, "select tenant from jobs.job where id = %s", (other.id,)) == "globex"


def test_a_cancelled_attempt_is_not_recorded(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    held = threading.Event()
    recorder = Recorder(hold=held)
    with serving(recorder) as base:
        app = App(db_dsn)
        hook = app.webhook("h.cancel", url=f"{base}/in", secrets=SECRET, timeout=120)
        with app, running(app):
            sent = hook.send("ping")
            assert held.wait(60), "the request did not arrive"
            conn.execute("select jobs.cancel(%s)", (sent.id,))
            state, _, _ = ended(conn, sent.id)
            recorder.release.set()
    assert state == "cancelled"
    assert hook.attempts(sent.id) == []


def test_the_payload_and_excerpt_views_redact_sensitive_data(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    recorder = Recorder(answers=[(200, b"ok")])
    with serving(recorder) as base:
        app = App(db_dsn)
        hook = app.webhook("h.view", url=f"{base}/in", secrets=SECRET, data=Card)
        with app, running(app):
            sent = hook.send("card.added", {"holder": "Bo", "number": "5555444433331111"})
            ended(conn, sent.id)
    viewed = conn.execute("select payload from jobs.job_view where id = %s",
                          (sent.id,)).fetchone()
    assert viewed is not None
    assert viewed[0]["data"] == {"holder": "Bo", "number": "[redacted]"}
    assert json.loads(recorder.seen[0].body)["data"]["number"] == "5555444433331111"


def test_the_how_to_example_goes_round_once(db_dsn: str, conn: psycopg.Connection[Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    from tests.http_server import bound_socket

    sock = bound_socket()
    monkeypatch.setenv("PARTNER_URL",
                       f"http://127.0.0.1:{sock.getsockname()[1]}/hooks/orders/")
    sys.modules.pop("examples.webhooks.app", None)
    module = importlib.import_module("examples.webhooks.app")
    example = module.app
    example.pools.given = db_dsn
    with serving(module.web, sock=sock), example, running(example):
        sent = module.order_paid.send(
            "order.paid", module.Paid(order_id=7, amount_cents=4200, email="ada@example.com"),
            id="order-7-paid")
        state, result, _ = ended(conn, sent.id)
        assert state == "succeeded" and result["status"] == 200
        received = wait_for(lambda: scalar(
            conn, "select id from jobs.job where name = 'orders.received' and key = %s",
            ("order-7-paid",)), "the receiver's job")
        state, result, _ = ended(conn, received)
    assert state == "succeeded" and result == {"order_id": 7, "type": "order.paid"}
    shown = conn.execute("select payload from jobs.job_view where id = %s", (sent.id,)
                         ).fetchone()
    assert shown is not None and shown[0]["data"]["email"] == "[redacted]"


def test_the_cli_switches_an_endpoint_and_shows_attempts(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from typer.testing import CliRunner

    from sqljobs._cli.main import app as cli

    runner = CliRunner()
    off = runner.invoke(cli, ["webhooks", "disable", "h.cli", "--reason", "410 gone",
                              "--dsn", db_dsn])
    assert off.exit_code == 0, off.output
    listed = runner.invoke(cli, ["webhooks", "--dsn", db_dsn, "--json"])
    assert [(e["name"], e["reason"]) for e in json.loads(listed.output)["disabled"]] == [
        ("h.cli", "410 gone")]
    with silent_listener() as (base, sock):
        app = App(db_dsn)
        hook = app.webhook("h.cli", url=f"{base}/in", secrets=SECRET, retry=FAST)
        with app, running(app):
            state, _, _ = ended(conn, hook.send("ping").id)
        assert not connected(sock)
    assert state == "failed"
    job_id = scalar(conn, "select id from jobs.job where name = 'h.cli'")
    shown = runner.invoke(cli, ["webhooks", "attempts", str(job_id), "--dsn", db_dsn,
                                "--json"])
    assert [a["outcome"] for a in json.loads(shown.output)["attempts"]] == ["disabled"]
    on = runner.invoke(cli, ["webhooks", "enable", "h.cli", "--dsn", db_dsn])
    assert on.exit_code == 0 and "enabled" in on.output
    assert json.loads(runner.invoke(cli, ["webhooks", "--dsn", db_dsn, "--json"]
                                    ).output)["disabled"] == []
