"""`app.webhook_receiver(...)`: inbound webhooks, an ASGI route whose every accepted
request is ONE job, keyed by the event's id.

The handle is itself an ASGI application: mount it (`Starlette(routes=[Mount("/hooks/
billing", receiver)])`, `fastapi_app.mount("/hooks/billing", receiver)`) or serve it bare
(`uvicorn myapp:receiver`). It needs no web framework. A request, in order:

1. the method: POST only (405);
2. the size: a Content-Length over `max_bytes` is refused before anything is read, and
   a body that grows past it while read is refused at the chunk that crosses it, which
   is dropped (413): at most `max_bytes` are ever held;
3. the signature, over the raw bytes, BEFORE anything parses them: Standard Webhooks
   (`webhook-id`, `webhook-timestamp`, `webhook-signature`, verified by the reference
   library against each of `secrets`, timestamps within its 5 minutes), or the
   declaration's `verify(headers, body)` for a provider with its own scheme (401);
4. the parse, `parse(body)` (JSON by default; 400 when it raises);
5. the event id: the `webhook-id` header, or `event_id(headers, parsed)`, 1 to 200 of
   letters, digits and `._:~-` (422 otherwise);
6. the enqueue of the job, keyed by the event id, so a redelivery of the same event is
   the same job (deduped); only then the answer, 200. If the enqueue fails (the database
   is down, refuses, or the pool times out) the answer is 503, so the sender retries.

The job's payload is `ReceivedEvent`: its `data` (the parsed body) and `headers` are
marked Sensitive, so every view of the job shows "[redacted]" in their place; the
handler gets them whole.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, Field

from sqljobs._app.webhooks import EVENT_ID, _extra
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle, RetryPolicy
from sqljobs._declare.redaction import Sensitive

logger = logging.getLogger("sqljobs.webhooks")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Verify = Callable[[Mapping[str, str], bytes], bool]
DEFAULT_MAX_BYTES = 1 << 20
KEPT_HEADERS = ("content-type", "user-agent", "webhook-id", "webhook-timestamp")
_ID = re.compile(EVENT_ID)
_GONE = b"\x00gone"  # _read's answer when the client disconnected (compared by identity)


class ReceivedEvent(BaseModel):
    """The payload of a received webhook's job: the event's `id` (the job's key), its
    `type` (the body's "type" when it has one), when it was received, the parsed body
    (`data`) and a few of the request's headers; `data` and `headers` are sensitive."""

    id: str = Field(pattern=EVENT_ID)
    type: str | None = None
    received_at: datetime
    data: Annotated[Any, Sensitive] = None
    headers: Annotated[dict[str, str], Sensitive] = Field(default_factory=dict)


class Host(ClientSource, Protocol):
    async def open_async(self) -> Any: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            retry: RetryPolicy | None = ..., timeout: float | None = ...,
            payload: type[BaseModel] | None = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


class WebhookReceiver:
    """What `app.webhook_receiver` returns: an ASGI application (module docstring) and
    the job each accepted event becomes (`.job`)."""

    def __init__(self, app: Host, name: str, job: JobHandle[Any], *,
                 secrets: Sequence[str], verify: Verify | None, max_bytes: int,
                 parse: Callable[[bytes], Any],
                 event_id: Callable[[Mapping[str, str], Any], str] | None,
                 tenant: str | None) -> None:
        self.app, self.name, self.job = app, name, job
        self.max_bytes = max_bytes
        self.tenant = tenant
        self._verify = verify
        self._parse = parse
        self._event_id = event_id
        self._signers: list[Any] = []
        if secrets:
            _, standardwebhooks = _extra()
            self._signers = [standardwebhooks.Webhook(s) for s in secrets]
        self._opening: asyncio.Lock | None = None
        self._open = False

    # -- the ASGI application -----------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        status, answer = await self._handle(scope, receive)
        body = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        if status == 503:
            headers.append((b"retry-after", b"5"))
        if status == 405:
            headers.append((b"allow", b"POST"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[int, dict[str, Any]]:
        if scope.get("method") != "POST":
            return 405, {"error": "POST only"}
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", []):
            headers[raw_name.decode("latin-1").lower()] = raw_value.decode("latin-1")
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                return 400, {"error": "bad content-length"}
            if int(declared) > self.max_bytes:
                return 413, {"error": f"the body is over {self.max_bytes} bytes"}
        body = await self._read(receive)
        if body is _GONE:
            return 400, {"error": "the client went away before the body ended"}
        if body is None:
            return 413, {"error": f"the body is over {self.max_bytes} bytes"}
        if not self._verified(headers, body):
            return 401, {"error": "the signature does not verify"}
        try:
            parsed = self._parse(body)
        except Exception:
            return 400, {"error": "the body does not parse"}
        try:
            event_id = (headers.get("webhook-id", "") if self._event_id is None
                        else self._event_id(headers, parsed))
        except Exception:
            event_id = ""
        if not isinstance(event_id, str) or not _ID.match(event_id):
            return 422, {"error": "the event id is missing or not 1 to 200 of "
                                  "[A-Za-z0-9._:~-]"}
        kind = parsed.get("type") if isinstance(parsed, dict) else None
        event = ReceivedEvent(
            id=event_id, type=kind if isinstance(kind, str) else None,
            received_at=datetime.now(UTC), data=parsed,
            headers={k: headers[k] for k in KEPT_HEADERS if k in headers})
        try:
            await self._ensure_open()
            enqueued = await self.job.enqueue_async(event, key=event_id, tenant=self.tenant)
        except Exception as error:  # the sender must retry: nothing was accepted
            logger.warning("webhook receiver %s: the enqueue of %s failed: %s", self.name,
                           event_id, type(error).__name__)
            return 503, {"error": "not accepted; retry later"}
        return 200, {"id": event_id, "deduped": enqueued.deduped}

    async def _read(self, receive: Receive) -> bytes | None:
        """The body, or None as soon as it would pass `max_bytes` (the crossing chunk is
        dropped and nothing more is read), or _GONE when the client left first."""
        parts: list[bytes] = []
        held = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _GONE
            chunk = message.get("body", b"")
            if held + len(chunk) > self.max_bytes:
                return None
            parts.append(chunk)
            held += len(chunk)
            if not message.get("more_body"):
                return b"".join(parts)

    def _verified(self, headers: Mapping[str, str], body: bytes) -> bool:
        if self._verify is not None:
            try:
                return self._verify(headers, body) is True
            except Exception:
                return False
        for signer in self._signers:
            try:
                signer.verify(body, dict(headers), json_parse=False)
            except Exception:
                continue
            return True
        return False

    async def _ensure_open(self) -> None:
        if self._open:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if not self._open:
                await self.app.open_async()
                self._open = True


def declare_receiver(app: Host, name: str, fn: Callable[..., Any], *,
                     secrets: Sequence[str], verify: Verify | None, max_bytes: int,
                     parse: Callable[[bytes], Any] | None,
                     event_id: Callable[[Mapping[str, str], Any], str] | None,
                     tenant: str | None, queue: str | None, retry: RetryPolicy | None,
                     timeout: float | None) -> WebhookReceiver:
    if bool(secrets) == (verify is not None):
        raise ConfigurationError(
            f"webhook receiver {name!r} needs exactly one of secrets= (Standard Webhooks) "
            "and verify=")
    if verify is not None and event_id is None:
        raise ConfigurationError(
            f"webhook receiver {name!r}: with verify=, say where the event id is "
            "(event_id=lambda headers, body: ...)")
    if not 1 <= max_bytes <= 64 << 20:
        raise ConfigurationError(f"webhook receiver {name!r}: max_bytes must be 1..64 MiB")
    for secret in secrets:
        _, standardwebhooks = _extra()
        try:
            standardwebhooks.Webhook(secret)
        except Exception as error:
            raise ConfigurationError(
                f"webhook receiver {name!r}: a secret is not a Standard Webhooks secret "
                f"(whsec_<base64>): {type(error).__name__}") from None
    job = app.job(name=name, queue=queue, retry=retry, timeout=timeout,
                  payload=ReceivedEvent)(fn)
    return WebhookReceiver(app, name, job, secrets=secrets, verify=verify,
                           max_bytes=max_bytes, parse=parse or json.loads,
                           event_id=event_id, tenant=tenant)


__all__ = ["DEFAULT_MAX_BYTES", "ReceivedEvent", "WebhookReceiver", "declare_receiver"]
