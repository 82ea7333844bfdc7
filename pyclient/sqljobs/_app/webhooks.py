"""`app.webhook(...)`: outbound webhooks, ONE event to ONE endpoint per job.

The job's payload is the event (`WebhookEvent`: id, type, data, tenant, timestamp);
each attempt of the job is ONE HTTP POST, so the job's retry policy is the delivery's:
no steps, nothing to replay. The wire format is the Standard Webhooks specification
(https://www.standardwebhooks.com): the body is `{"type", "timestamp", "data"}`, the
headers `webhook-id` (the event id: a receiver dedupes on it), `webhook-timestamp`
(this attempt's, in seconds) and `webhook-signature` (`v1,<base64 HMAC-SHA256>` of
`<id>.<timestamp>.<body>`), signed by the reference library `standardwebhooks`. With
several secrets (a rotation) every one signs, space-separated, so a receiver holding
either verifies.

An attempt, in order:

1. the tenant: the event's (its payload's `tenant`, else its job's) must be the
   endpoint's, else `WebhookTenantRefused` (terminal), and no request;
2. the switch: an endpoint an operator disabled (`jobs.webhook_disable`) fails the job
   with `WebhookDisabled` (terminal) before any socket opens;
3. the POST, with httpx: a 2xx delivers; 408, 429, 5xx and any other non-2xx raise
   `WebhookFailed` (retried by the policy); another 4xx raises `WebhookRejected`
   (terminal); no answer (connect error, timeout) raises `WebhookFailed`.

Every attempt but a cancelled one is recorded in `jobs.webhook_attempt` BEFORE its
error is raised (fenced on the job's claim): its outcome, status, latency and the first
`EXCERPT_BYTES` of the answer, with the signing secrets, the signatures and the event's
sensitive values replaced by "[redacted]".

Needs the `webhooks` extra: `pip install 'sqljobs[webhooks]'` (httpx, standardwebhooks).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from pydantic import BaseModel, Field, create_model

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import (
    ConfigurationError,
    SqljobsError,
    WebhookDisabled,
    WebhookRejected,
    WebhookTenantRefused,
)
from sqljobs._client.records import Enqueued, WebhookAttempt, WebhookEndpointState
from sqljobs._client.redaction import REDACTED, redact_text
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle
from sqljobs._declare.redaction import payload_json, redaction_of

if TYPE_CHECKING:
    import httpx
    from standardwebhooks import Webhook

    from sqljobs._declare.jobs import RetryPolicy

EVENT_ID = r"^[A-Za-z0-9][A-Za-z0-9._:~-]{0,199}$"
"""What an event id may be (the job's key, a receiver's dedupe key): 1 to 200 of letters,
digits and `._:~-`."""
EXCERPT_BYTES = 512
RETRIED_4XX = frozenset({408, 429})


class WebhookFailed(SqljobsError):
    """An attempt that did not deliver and may next time (no answer, 408, 429, 5xx or
    another non-2xx): the job's retry policy decides. `status` is None for no answer."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class WebhookEvent(BaseModel):
    """The payload of a webhook job: ONE event. `id` is the `webhook-id` header and the
    job's key (a second send of the same id is the same job); `timestamp` when the event
    happened (set by `send`); `tenant` the tenant it belongs to (checked against the
    endpoint's at each attempt)."""

    id: str = Field(pattern=EVENT_ID)
    type: str = Field(min_length=1, max_length=200)
    timestamp: datetime
    data: Any = None
    tenant: str | None = None


def _extra() -> tuple[Any, Any]:
    try:
        import httpx
        import standardwebhooks
    except ImportError:  # pragma: no cover - the extra is part of the test install
        raise ConfigurationError(
            "webhooks need httpx and standardwebhooks: pip install 'sqljobs[webhooks]'"
        ) from None
    return httpx, standardwebhooks


def new_event_id() -> str:
    """A fresh event id: `evt_` and 22 random URL-safe characters."""
    return "evt_" + secrets.token_urlsafe(16).replace("-", "x").replace("_", "y")


def _secret_texts(secret: str) -> list[str]:
    """What of a secret may appear in an answer: the whole `whsec_...` and its key part."""
    bare = secret.removeprefix("whsec_")
    return [s for s in (secret, bare) if len(s) >= 8]


@dataclass(frozen=True)
class Endpoint:
    """Where a webhook goes and how it is signed: `secrets` are Standard Webhooks secrets
    (`whsec_<base64>`), each of which signs (several while one is rotated); `tenant` the
    tenant the endpoint belongs to; `timeout` seconds per request."""

    url: str
    secrets: tuple[str, ...]
    tenant: str | None = None
    timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not re.match(r"^https?://[^\s]+$", self.url):
            raise ConfigurationError(f"webhook url {self.url!r} is not an http(s) URL")
        if not self.secrets:
            raise ConfigurationError("a webhook needs at least one signing secret")
        _, standardwebhooks = _extra()
        for secret in self.secrets:
            try:
                standardwebhooks.Webhook(secret)
            except Exception as error:
                raise ConfigurationError(
                    f"a webhook secret is not a Standard Webhooks secret (whsec_<base64>): "
                    f"{type(error).__name__}") from None
        if not 0 < self.timeout <= 300:
            raise ConfigurationError("webhook timeout must be in (0, 300] seconds")
        reserved = {h.lower() for h in self.headers} & {
            "webhook-id", "webhook-timestamp", "webhook-signature", "content-type"}
        if reserved:
            raise ConfigurationError(f"headers {sorted(reserved)} are the webhook's own")

    def signers(self) -> list[Webhook]:
        _, standardwebhooks = _extra()
        return [standardwebhooks.Webhook(s) for s in self.secrets]


def body_of(event: WebhookEvent, data: Any) -> bytes:
    """The request body: the Standard Webhooks payload `{"type", "timestamp", "data"}`."""
    return json.dumps({"type": event.type,
                       "timestamp": event.timestamp.astimezone(UTC).isoformat(),
                       "data": data}, separators=(",", ":"), default=str).encode()


def sign(endpoint: Endpoint, event_id: str, at: datetime, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt at `at`."""
    signatures = " ".join(w.sign(event_id, at, body) for w in endpoint.signers())
    return {"webhook-id": event_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signatures, "content-type": "application/json"}


class Host(ClientSource, Protocol):
    @property
    def dsn(self) -> str: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            retry: RetryPolicy | None = ..., timeout: float | None = ...,
            terminal: tuple[type[BaseException], ...] = ...,
            payload: type[BaseModel] | None = ...,
            concurrency: int | None = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


# One httpx client per event loop (a worker's): its connection pool keeps the endpoint's
# connections alive between jobs.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = \
    weakref.WeakKeyDictionary()


def _http() -> httpx.AsyncClient:
    httpx, _ = _extra()
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = httpx.AsyncClient(follow_redirects=False,
                                   limits=httpx.Limits(max_keepalive_connections=50))
        _clients[loop] = client
    return client


async def close_http_clients() -> None:
    """Close this event loop's webhook HTTP client (a test's or a script's teardown)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


class WebhookHandle:
    """What `app.webhook` returns: the endpoint's job, how to send an event to it, and
    the operator's switch."""

    def __init__(self, app: Host, name: str, endpoint: Endpoint, job: JobHandle[Any],
                 model: type[WebhookEvent]) -> None:
        self.app, self.name, self.endpoint, self.job, self.model = (
            app, name, endpoint, job, model)

    def event(self, type: str, data: Any = None, *, id: str | None = None,
              tenant: str | None = None, timestamp: datetime | None = None) -> WebhookEvent:
        """The event as the job stores it (validated: InvalidPayload otherwise); `tenant`
        defaults to the endpoint's."""
        from sqljobs._client.errors import InvalidPayload
        try:
            return self.model.model_validate({
                "id": id or new_event_id(), "type": type, "data": data,
                "tenant": self.endpoint.tenant if tenant is None else tenant,
                "timestamp": timestamp or datetime.now(UTC)})
        except ValueError as error:
            raise InvalidPayload(f"webhook {self.name}: the event does not validate: "
                                 f"{error}") from None

    def send(self, type: str, data: Any = None, *, id: str | None = None,
             tenant: str | None = None, conn: Any = None, **options: Any) -> Enqueued:
        """Enqueue the event's delivery; keyed by its id, so sending the same id again
        answers the same job (deduped). With `conn` it is written in that transaction.
        The job's tenant is the event's. Other options are `enqueue`'s (delay, ...)."""
        event = self.event(type, data, id=id, tenant=tenant)
        return self.job.enqueue(event, key=event.id, tenant=event.tenant, conn=conn,
                                **options)

    async def send_async(self, type: str, data: Any = None, *, id: str | None = None,
                         tenant: str | None = None, conn: Any = None,
                         **options: Any) -> Enqueued:
        """`send` for asyncio code."""
        event = self.event(type, data, id=id, tenant=tenant)
        return await self.job.enqueue_async(event, key=event.id, tenant=event.tenant,
                                            conn=conn, **options)

    def disable(self, reason: str) -> None:
        """Disable the endpoint: its jobs fail fast (WebhookDisabled) until `enable`."""
        self.app.client.run(queries.webhook_disable(self.name, self.endpoint.tenant, reason))

    def enable(self) -> bool:
        """Enable the endpoint again; True when it was disabled."""
        return self.app.client.run(queries.webhook_enable(self.name))

    def disabled(self) -> str | None:
        """Why the endpoint is disabled, or None."""
        return self.app.client.run(queries.webhook_disabled(self.name))

    def attempts(self, job_id: int) -> list[WebhookAttempt]:
        """The recorded attempts of one of this endpoint's jobs, in order."""
        return self.app.client.run(queries.webhook_attempts(job_id))


def webhook_endpoints(app: ClientSource) -> list[WebhookEndpointState]:
    return app.client.run(queries.webhook_endpoints())


def _excerpt(raw: bytes, hidden: Sequence[str]) -> str:
    text = raw[:EXCERPT_BYTES].decode("utf-8", errors="replace")
    return redact_text(text, hidden)


def declare_webhook(app: Host, name: str, endpoint: Endpoint, *,
                    data: type[BaseModel] | None, queue: str | None,
                    retry: RetryPolicy | None, concurrency: int | None) -> WebhookHandle:
    """Declare the endpoint's job (module docstring)."""
    model: type[WebhookEvent] = WebhookEvent if data is None else create_model(
        f"WebhookEvent[{data.__name__}]", __base__=WebhookEvent, data=(data, ...))
    redaction = redaction_of(model)
    request_timeout = endpoint.timeout

    async def deliver(ctx: Any, event: WebhookEvent) -> dict[str, Any]:
        stored = payload_json(event)
        tenant = event.tenant if event.tenant is not None else ctx.tenant
        hidden = sorted({t for s in endpoint.secrets for t in _secret_texts(s)}
                        | set(redaction.secrets_of(stored)), key=len, reverse=True)
        started = time.monotonic()

        def elapsed_ms() -> int:
            return int((time.monotonic() - started) * 1000)

        if ctx.has_engine:  # a worker's run: its pool
            return await attempt(ctx, event, stored, tenant, hidden, elapsed_ms,
                                 ctx.engine_call)
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            return await attempt(ctx, event, stored, tenant, hidden, elapsed_ms,
                                 AsyncClient(conn).run)

    async def attempt(ctx: Any, event: WebhookEvent, stored: Any, tenant: str | None,
                      hidden: list[str], elapsed_ms: Callable[[], int],
                      run: Callable[[queries.Call[Any]], Awaitable[Any]]) -> dict[str, Any]:
        """One attempt (module docstring), its engine calls made by `run`."""
        httpx, _ = _extra()

        async def record(outcome: str, status: int | None, excerpt: str | None) -> None:
            await run(queries.webhook_attempt_put(
                ctx.job_id, ctx.claim, name, outcome, status, elapsed_ms(), excerpt))

        if tenant != endpoint.tenant or (event.tenant is not None and ctx.tenant
                                         is not None and event.tenant != ctx.tenant):
            await record("refused", None, None)
            raise WebhookTenantRefused(
                f"webhook {name} belongs to tenant {endpoint.tenant!r}; this event "
                f"names {tenant!r}")
        reason = await run(queries.webhook_disabled(name))
        if reason is not None:
            await record("disabled", None, None)
            raise WebhookDisabled(f"webhook endpoint {name} is disabled: {reason}",
                                  hint="jobs.webhook_enable, or WebhookHandle.enable()")
        body = body_of(event, stored.get("data"))
        headers = {**endpoint.headers, **sign(endpoint, event.id, datetime.now(UTC), body)}
        signature_texts = headers["webhook-signature"].split(" ")
        hidden = sorted(set(hidden) | set(signature_texts), key=len, reverse=True)
        try:
            async with _http().stream("POST", endpoint.url, content=body, headers=headers,
                                      timeout=request_timeout) as response:
                raw = b""
                async for chunk in response.aiter_raw():
                    raw += chunk
                    if len(raw) >= EXCERPT_BYTES:
                        break
                status = response.status_code
        except httpx.HTTPError as error:
            detail = redact_text(f"{type(error).__name__}: {error}", hidden)
            await record("error", None, detail[:EXCERPT_BYTES])
            raise WebhookFailed(f"webhook {name}: no answer ({detail})") from None
        excerpt = _excerpt(raw, hidden)
        if 200 <= status < 300:
            number = await run(queries.webhook_attempt_put(
                ctx.job_id, ctx.claim, name, "delivered", status, elapsed_ms(), excerpt))
            return {"status": status, "attempt": number}
        if 400 <= status < 500 and status not in RETRIED_4XX:
            await record("rejected", status, excerpt)
            rejected = WebhookRejected(f"webhook {name}: the endpoint answered {status}",
                                       detail=excerpt or None)
            rejected.status = status
            raise rejected
        await record("retry", status, excerpt)
        raise WebhookFailed(f"webhook {name}: the endpoint answered {status}",
                            status=status)


    deliver.__qualname__ = f"webhook[{name}]"
    job = app.job(name=name, queue=queue, retry=retry, payload=model,
                  terminal=(WebhookDisabled, WebhookRejected, WebhookTenantRefused),
                  concurrency=concurrency)(deliver)
    return WebhookHandle(app, name, endpoint, job, model)


__all__ = ["EVENT_ID", "EXCERPT_BYTES", "REDACTED", "Endpoint", "WebhookEvent",
           "WebhookFailed", "WebhookHandle", "body_of", "close_http_clients",
           "declare_webhook", "new_event_id", "sign", "webhook_endpoints"]
