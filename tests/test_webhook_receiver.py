"""`app.webhook_receiver(...)` end to end: the receiver mounted in a Starlette app served
by a real uvicorn, requests signed by the Standard Webhooks reference library, the jobs
run by a real worker; the database refusal is a real one (the receiver's login role loses
its grant)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.routing import Mount

from sqljobs import App, ConfigurationError, ReceivedEvent
from tests.http_server import serving
from tests.processes import scalar, wait_for
from tests.worker_helpers import running

SECRET = "whsec_" + base64.b64encode(b"receiver-key-of-thirty-two-bytes").decode()


def signed(body: bytes, event_id: str, secret: str = SECRET) -> dict[str, str]:
    now = datetime.now(UTC)
    return {"webhook-id": event_id, "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(secret).sign(event_id, now, body),
            "content-type": "application/json"}


def jobs_named(conn: psycopg.Connection[Any], name: str) -> int:
    return int(scalar(conn, "select count(*) from jobs.job where name = %s", (name,)))


def mounted(receiver: Any) -> Starlette:
    return Starlette(routes=[Mount("/hooks/billing", app=receiver)])


def test_a_signed_event_is_enqueued_once_and_run(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)
    handled: list[ReceivedEvent] = []

    @app.webhook_receiver("in.billing", secrets=SECRET, tenant="acme")
    def billing(ctx: Any, event: ReceivedEvent) -> dict[str, Any]:
        handled.append(event)
        return {"amount": event.data["data"]["amount"]}

    body = json.dumps({"type": "invoice.paid", "data": {"amount": 42, "email": "a@b.c"}}
                      ).encode()
    with serving(mounted(billing)) as base, httpx.Client(base_url=base) as http:
        first = http.post("/hooks/billing/", content=body, headers=signed(body, "evt_9"))
        again = http.post("/hooks/billing/", content=body, headers=signed(body, "evt_9"))
        assert (first.status_code, first.json()) == (200, {"id": "evt_9", "deduped": False})
        assert (again.status_code, again.json()) == (200, {"id": "evt_9", "deduped": True})
        assert http.get("/hooks/billing/").status_code == 405
    assert jobs_named(conn, "in.billing") == 1, "a redelivery is the same job"
    job = conn.execute("select id, key, tenant from jobs.job where name = 'in.billing'"
                       ).fetchone()
    assert job is not None and job[1:] == ("evt_9", "acme")
    with app, running(app):
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (job[0],)) == "succeeded", "the received event's job")
    assert handled[0].type == "invoice.paid" and handled[0].data["data"]["amount"] == 42
    viewed = conn.execute("select payload from jobs.job_view where id = %s", (job[0],)
                          ).fetchone()
    assert viewed is not None
    assert viewed[0]["data"] == "[redacted]" and viewed[0]["headers"] == "[redacted]"
    assert "a@b.c" not in json.dumps(viewed[0])


def test_a_bad_signature_never_reaches_the_parser(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)
    parsed: list[bytes] = []

    def parse(body: bytes) -> Any:
        parsed.append(body)
        return json.loads(body)

    receiver = app.webhook_receiver("in.strict", secrets=SECRET, parse=parse)(
        lambda ctx, event: None)
    body = b'{"type": "x"}'
    other = "whsec_" + base64.b64encode(b"o" * 32).decode()
    with serving(receiver) as base, httpx.Client(base_url=base) as http:
        forged = http.post("/", content=body, headers=signed(body, "evt_1", other))
        unsigned = http.post("/", content=body, headers={"webhook-id": "evt_1"})
        tampered_headers = signed(body, "evt_1")
        tampered = http.post("/", content=b'{"type": "y"}', headers=tampered_headers)
        stale = signed(body, "evt_1")
        stale["webhook-timestamp"] = str(int(datetime.now(UTC).timestamp()) - 3600)
        old = http.post("/", content=body, headers=stale)
        assert [r.status_code for r in (forged, unsigned, tampered, old)] == [401] * 4
        assert parsed == [], "the parser ran on an unverified body"
        assert jobs_named(conn, "in.strict") == 0
        # a verified body that does not parse is a 400, after the parser ran
        junk = b"not json"
        assert http.post("/", content=junk, headers=signed(junk, "evt_2")).status_code == 400
        assert parsed == [junk]


def test_the_body_is_read_under_the_byte_limit(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)
    receiver = app.webhook_receiver("in.small", secrets=SECRET, max_bytes=1000)(
        lambda ctx, event: None)
    big = json.dumps({"type": "x", "pad": "p" * 2000}).encode()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 100):
            yield big[i:i + 100]

    with serving(receiver) as base, httpx.Client(base_url=base) as http:
        declared = http.post("/", content=big, headers=signed(big, "evt_big"))
        streamed = http.post("/", content=chunks(), headers={
            k: v for k, v in signed(big, "evt_big").items()})
        small = json.dumps({"type": "x"}).encode()
        fits = http.post("/", content=small, headers=signed(small, "evt_small"))
    assert declared.status_code == 413 and streamed.status_code == 413
    assert streamed.request.headers.get("transfer-encoding") == "chunked"
    assert fits.status_code == 200
    assert jobs_named(conn, "in.small") == 1


def test_the_receiver_stops_reading_at_the_chunk_that_crosses_the_limit(
        db_dsn: str) -> None:
    # driven through its ASGI interface directly: how many chunks it asked for
    app = App(db_dsn)
    receiver = app.webhook_receiver("in.count", secrets=SECRET, max_bytes=250)(
        lambda ctx, event: None)
    asked = 0

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return {"type": "http.request", "body": b"x" * 100, "more_body": True}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(receiver({"type": "http", "method": "POST", "headers": []}, receive, send))
    assert sent[0]["status"] == 413
    assert asked == 3, "it read past the chunk that crossed the limit"


def test_the_event_id_is_bounded(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)
    receiver = app.webhook_receiver("in.ids", secrets=SECRET)(lambda ctx, event: None)
    body = b'{"type": "x"}'
    with serving(receiver) as base, httpx.Client(base_url=base) as http:
        long_id = "e" * 201
        spaced = "evt 1"
        answers = [http.post("/", content=body, headers=signed(body, i)).status_code
                   for i in (long_id, spaced, "e" * 200)]
    assert answers == [422, 422, 200]
    assert jobs_named(conn, "in.ids") == 1


def test_a_provider_scheme_verifies_with_its_own_function(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    key = b"provider-key"

    def verify(headers: Any, body: bytes) -> bool:
        expected = hmac.new(key, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(headers.get("x-provider-signature", ""), expected)

    app = App(db_dsn)
    with pytest.raises(ConfigurationError, match="exactly one"):
        app.webhook_receiver("in.none")(lambda ctx, event: None)
    with pytest.raises(ConfigurationError, match="event_id"):
        app.webhook_receiver("in.noid", verify=verify)(lambda ctx, event: None)
    receiver = app.webhook_receiver("in.provider", verify=verify,
                                    event_id=lambda headers, body: body["id"])(
        lambda ctx, event: None)
    body = b'{"id": "ch_123", "type": "charge.succeeded"}'
    good = {"x-provider-signature": hmac.new(key, body, hashlib.sha256).hexdigest()}
    with serving(receiver) as base, httpx.Client(base_url=base) as http:
        assert http.post("/", content=body, headers=good).status_code == 200
        assert http.post("/", content=body, headers={"x-provider-signature": "0" * 64}
                         ).status_code == 401
    assert scalar(conn, "select key from jobs.job where name = 'in.provider'") == "ch_123"


@pytest.fixture
def producer_role(conn: psycopg.Connection[Any]) -> Iterator[str]:
    role = f"recv_{secrets.token_hex(4)}"
    conn.execute(f"create role {role} login")
    conn.execute(f"grant sqljobs_producer to {role}")
    try:
        yield role
    finally:
        conn.execute(f"drop owned by {role}")
        conn.execute(f"drop role {role}")


def test_503_when_the_database_refuses_then_the_redelivery_is_accepted(
        db_dsn: str, conn: psycopg.Connection[Any], producer_role: str) -> None:
    app = App(make_conninfo(db_dsn, user=producer_role), min_size=0, max_size=2)
    receiver = app.webhook_receiver("in.refused", secrets=SECRET)(lambda ctx, event: None)
    body = b'{"type": "x"}'
    with serving(receiver) as base, httpx.Client(base_url=base) as http:
        assert http.post("/", content=body, headers=signed(body, "evt_a")).status_code == 200
        conn.execute(f"revoke sqljobs_producer from {producer_role}")
        refused = http.post("/", content=body, headers=signed(body, "evt_b"))
        assert refused.status_code == 503 and refused.headers["retry-after"]
        assert scalar(conn, "select count(*) from jobs.job where key = 'evt_b'") == 0
        conn.execute(f"grant sqljobs_producer to {producer_role}")
        assert http.post("/", content=body, headers=signed(body, "evt_b")).status_code == 200
    assert jobs_named(conn, "in.refused") == 2


def test_a_client_that_leaves_mid_body_enqueues_nothing(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(db_dsn)
    receiver = app.webhook_receiver("in.gone", secrets=SECRET)(lambda ctx, event: None)
    messages = iter([{"type": "http.request", "body": b'{"ty', "more_body": True},
                     {"type": "http.disconnect"}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(receiver({"type": "http", "method": "POST", "headers": []}, receive, send))
    assert sent[0]["status"] == 400
    assert jobs_named(conn, "in.gone") == 0


def test_mounted_in_a_fastapi_app_it_accepts_a_signed_request(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from fastapi import FastAPI

    app = App(db_dsn)
    receiver = app.webhook_receiver("in.fastapi", secrets=SECRET)(lambda ctx, event: None)
    api = FastAPI()
    api.mount("/hooks/billing", receiver)

    @api.get("/health")
    def health() -> dict[str, str]:  # the app's own routes beside it
        return {"ok": "yes"}

    body = b'{"type": "invoice.paid"}'
    with serving(api) as base, httpx.Client(base_url=base) as http:
        assert http.get("/health").json() == {"ok": "yes"}
        forged = http.post("/hooks/billing/", content=body,
                           headers=signed(body, "evt_f", secret="whsec_" + base64.b64encode(
                               b"x" * 32).decode()))
        assert forged.status_code == 401
        accepted = http.post("/hooks/billing/", content=body, headers=signed(body, "evt_f"))
        assert (accepted.status_code, accepted.json()) == (
            200, {"id": "evt_f", "deduped": False})
    assert conn.execute("select key, state::text from jobs.job where name = 'in.fastapi'"
                        ).fetchall() == [("evt_f", "ready")]
