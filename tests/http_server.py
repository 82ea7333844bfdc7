"""A real local HTTP server for the webhook tests: uvicorn serving an ASGI app in a
thread, on a port the kernel picks (127.0.0.1 only). No network beyond localhost."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

ASGI = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                 Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]


@dataclass
class Seen:
    """One request the recording endpoint got."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """An ASGI endpoint that records every request and answers from a script: the next
    (status, body) of `answers` (the last one repeats), or a callable of the request.
    `hold` makes it wait (in the server's loop) until `release` is set."""

    answers: list[tuple[int, bytes]] = field(default_factory=lambda: [(200, b"ok")])
    seen: list[Seen] = field(default_factory=list)
    hold: threading.Event | None = None
    release: threading.Event = field(default_factory=threading.Event)
    decide: Callable[[Seen], tuple[int, bytes]] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = Seen(scope["path"], {k.decode(): v.decode() for k, v in scope["headers"]},
                       body)
        self.seen.append(request)
        if self.hold is not None:
            self.hold.set()
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        if self.decide is not None:
            status, answer = self.decide(request)
        else:
            status, answer = self.answers[min(len(self.seen), len(self.answers)) - 1]
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": answer})


@contextmanager
def serving(app: ASGI, *, limit_concurrency: int | None = None,
            sock: socket.socket | None = None) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a free port, or the bound `sock`) until the block ends;
    yields its base URL."""
    sock = sock or bound_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                            limit_concurrency=limit_concurrency)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="test-http", daemon=True)
    thread.start()
    try:
        deadline = 600
        while not server.started and deadline:
            threading.Event().wait(0.05)
            deadline -= 1
        assert server.started, "the local HTTP server did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def bound_socket() -> socket.socket:
    """A socket bound to a free port of 127.0.0.1 (for a URL needed before serving)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def silent_listener() -> Iterator[tuple[str, socket.socket]]:
    """A listening socket nobody accepts on: a TCP connect to it completes in the
    kernel's backlog, so `connected(sock)` tells whether anyone connected at all."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", sock
    finally:
        sock.close()


def connected(sock: socket.socket) -> bool:
    try:
        peer, _ = sock.accept()
    except BlockingIOError:
        return False
    peer.close()
    return True
