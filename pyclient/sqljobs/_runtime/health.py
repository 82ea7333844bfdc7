"""`sqljobs worker --health-port N`: liveness and readiness over HTTP, for Kubernetes probes.

    GET /healthz   200 `ok` while the worker is alive. 503 and the reason when its event
                   loop has not run for `stall_s` seconds (a handler that blocks the loop,
                   a busy loop), or when it has not renewed its worker row within that
                   row's time to live (its database is unreachable or hangs).
    GET /readyz    200 once the worker has registered and claims jobs; 503 before that
                   and while it drains (after SIGTERM).

The server runs in a thread of its own, on an event loop of its own: a worker whose loop
is stuck cannot answer anything, this server still can, and says what is wrong. Only the
standard library: the probes need no extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Protocol

from sqljobs._client.errors import ConfigurationError

logger = logging.getLogger("sqljobs.health")

_READ_LIMIT_S = 5.0  # a client that sends no request line in this time is dropped


class Probed(Protocol):
    """What the probes read off a worker (sqljobs._runtime.worker.Worker has it)."""

    @property
    def running_loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def registered_at(self) -> float | None: ...

    @property
    def registration_ttl_s(self) -> float: ...

    @property
    def claiming(self) -> bool: ...


class WorkerHealth:
    """The /healthz and /readyz endpoints of one worker; `start()`, then `close()`."""

    def __init__(self, worker: Probed, port: int, host: str = "0.0.0.0", *,
                 stall_s: float = 30.0, ping_s: float = 1.0) -> None:
        if stall_s <= ping_s:
            raise ValueError("stall_s must be longer than ping_s")
        self.worker = worker
        self.host = host
        self.port = port
        self.stall_s = stall_s
        self.ping_s = ping_s
        self._last_tick: float | None = None  # when the worker's loop last ran our ping
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- what the probes answer ------------------------------------------------------

    def liveness(self) -> tuple[bool, str]:
        now = time.monotonic()
        if self._last_tick is not None and now - self._last_tick > self.stall_s:
            return False, (f"the worker's event loop has not run for "
                           f"{now - self._last_tick:.0f} s (more than {self.stall_s:g} s)")
        registered = self.worker.registered_at
        if registered is not None and now - registered > self.worker.registration_ttl_s:
            return False, (f"the worker has not renewed its registration for "
                           f"{now - registered:.0f} s (its database is unreachable or hangs)")
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        alive, reason = self.liveness()
        if not alive:
            return False, reason
        if self.worker.registered_at is None:
            return False, "starting: not registered yet"
        if not self.worker.claiming:
            return False, "not claiming (draining, or not started)"
        return True, "ready"

    # -- the server ------------------------------------------------------------------

    def start(self) -> int:
        """Serve in a background thread; answers the port it listens on."""
        self._thread = threading.Thread(target=self._run, name="sqljobs-health", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise ConfigurationError(f"cannot serve the health probes on {self.host}:"
                                     f"{self.port}: {self._error}") from self._error
        logger.info("health probes at http://%s:%d/healthz and /readyz", self.host, self.port)
        return self.port

    def close(self) -> None:
        if self._loop is not None and self._closing is not None:
            with contextlib.suppress(RuntimeError):  # its loop already ended
                self._loop.call_soon_threadsafe(self._closing.set)
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # reported by start() when it failed to bind
            self._error = error
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        server = await asyncio.start_server(self._answer, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            while not self._closing.is_set():
                self._ping()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), self.ping_s)

    def _ping(self) -> None:
        """Ask the worker's loop to note the time: if it is stuck, the note stays old."""
        loop = self.worker.running_loop
        if loop is None or loop.is_closed():
            return
        if self._last_tick is None:
            self._last_tick = time.monotonic()  # its first ping: the loop has just started
        with contextlib.suppress(RuntimeError):  # closed between the check and the call
            loop.call_soon_threadsafe(self._tick)

    def _tick(self) -> None:
        self._last_tick = time.monotonic()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), _READ_LIMIT_S)
            while (await asyncio.wait_for(reader.readline(), _READ_LIMIT_S)).strip():
                pass  # the headers: nothing in them matters here
            method, _, rest = request.decode("latin-1").partition(" ")
            path = rest.split(" ", 1)[0].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, body = "405 Method Not Allowed", "GET or HEAD"
            elif path in ("/healthz", "/readyz"):
                ok, body = self.liveness() if path == "/healthz" else self.readiness()
                status = "200 OK" if ok else "503 Service Unavailable"
            else:
                status, body = "404 Not Found", "try /healthz or /readyz"
            payload = (body + "\n").encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + (payload if method != "HEAD" else b""))
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


__all__ = ["Probed", "WorkerHealth"]
