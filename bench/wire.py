"""A counting proxy for the PostgreSQL wire protocol: how many round trips and
transactions a system spends per job, whatever its language or driver.

The runner points a driver at the proxy instead of the server for one extra, untimed
run of each workload (the proxy's own hop would distort timings). The proxy forwards
bytes unchanged and timestamps two kinds of message:

  round trip   a Sync or a simple Query from the client: each ends one exchange the
               client waits on (pipelined statements count one each)
  transaction  a ReadyForQuery from the server whose status is idle: a transaction
               (or an autocommit statement) has ended

Counts are read for a window of wall-clock time that the driver reports, so set-up
and shutdown traffic outside the timed part is left out. TLS and GSS encryption
requests are refused by the proxy itself (the server never sees them), so the
traffic stays readable; the drivers' libraries then go on in plain text.
"""

from __future__ import annotations

import asyncio
import bisect
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


@dataclass(frozen=True, slots=True)
class WireCounts:
    round_trips: int
    transactions: int


class WireCounter:
    """Listens on 127.0.0.1 (an ephemeral port) and forwards to upstream."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.round_trips: list[float] = []
        self.transactions: list[float] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> WireCounter:
        self._thread.start()
        self._ready.wait(10)
        if not self.port:
            raise RuntimeError("the counting proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def count(self, t0: float, t1: float) -> WireCounts:
        """Messages timestamped within [t0, t1] (time.time())."""

        def between(times: list[float]) -> int:
            return bisect.bisect_right(times, t1) - bisect.bisect_left(times, t0)

        # appended by the proxy thread in time order; sorted() copes with a clock step
        return WireCounts(between(sorted(self.round_trips)),
                          between(sorted(self.transactions)))

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await self._startup(reader, writer)
            if first is None:
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            up_writer.write(first)
            await asyncio.gather(
                self._pump(reader, up_writer, self._client_message),
                self._pump(up_reader, writer, self._server_message),
                return_exceptions=True)
        except (asyncio.CancelledError, OSError):
            pass  # the proxy is shutting down, or a side hung up
        finally:
            writer.close()

    async def _startup(self, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> bytes | None:
        """Answer encryption requests with 'N'; answer the startup packet to forward."""
        while True:
            try:
                head = await reader.readexactly(8)
            except asyncio.IncompleteReadError:
                return None
            length, code = struct.unpack("!ii", head)
            body = await reader.readexactly(length - 8)
            if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                writer.write(b"N")
                await writer.drain()
                continue
            if code == _CANCEL_REQUEST:
                _, up_writer = await asyncio.open_connection(*self.upstream)
                up_writer.write(head + body)
                await up_writer.drain()
                up_writer.close()
                return None
            return head + body

    def _client_message(self, kind: int, body: bytes) -> None:
        if kind in (0x53, 0x51):  # 'S' Sync, 'Q' Query
            self.round_trips.append(time.time())

    def _server_message(self, kind: int, body: bytes) -> None:
        if kind == 0x5A and body[:1] == b"I":  # 'Z' ReadyForQuery, idle
            self.transactions.append(time.time())

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    seen: Callable[[int, bytes], None]) -> None:
        """Forward bytes as they come; call seen(type, body) per whole message."""
        buffer = bytearray()
        try:
            while data := await reader.read(65536):
                writer.write(data)
                buffer += data
                while len(buffer) >= 5:
                    length = int.from_bytes(buffer[1:5], "big")
                    if len(buffer) < 1 + length:
                        break
                    seen(buffer[0], bytes(buffer[5:1 + length]))
                    del buffer[:1 + length]
                await writer.drain()
        finally:
            writer.close()
