"""The HTTP server that answers Prometheus scrapes (`GET /metrics`) for a registry."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server


@dataclass
class MetricsServer:
    """A running server: `port` is the bound port (useful when 0 was asked for)."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host or '0.0.0.0'}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(port: int, registry: CollectorRegistry | None = None,
          host: str = "0.0.0.0") -> MetricsServer:
    """Serve `registry` (default: the global one) on host:port in a daemon thread."""
    server, thread = start_http_server(port, host, REGISTRY if registry is None else registry)
    return MetricsServer(host, server.server_address[1], server, thread)
