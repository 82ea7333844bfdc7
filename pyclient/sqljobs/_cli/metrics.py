"""`sqljobs metrics` (the queue gauges for Prometheus), `sqljobs stats` (recent throughput
and latency), and the metrics that `sqljobs worker --metrics-port` serves.

The Prometheus parts need the `metrics` extra; without it they say how to install it.
`sqljobs stats` needs nothing beyond the core: it prints what jobs.stats() answers.
"""

from __future__ import annotations

import signal
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from sqljobs._cli import output
from sqljobs._cli.common import DsnOption, connected_client, dsn_of, err_console, finite, whole
from sqljobs._cli.output import Listing
from sqljobs._client import queries

if TYPE_CHECKING:
    from sqljobs.metrics import MetricsServer, WorkerMetrics

INSTALL_HINT = "pip install 'sqljobs[metrics]'"


def metrics_extra() -> ModuleType:
    """sqljobs.metrics, or exit 2 saying how to install the extra it needs."""
    try:
        import sqljobs.metrics as extra
    except ImportError as error:
        if not (error.name or "").startswith("prometheus_client"):
            raise
        err_console.print("[red]error:[/red] Prometheus metrics need the metrics extra "
                          f"(prometheus_client): {escape(INSTALL_HINT)}", soft_wrap=True,
                          highlight=False)
        raise typer.Exit(2) from error
    return extra


def _serve(extra: ModuleType, port: int, registry: Any, host: str) -> MetricsServer:
    try:
        server: MetricsServer = extra.serve(port, registry, host)
    except OSError as error:
        err_console.print(f"[red]error:[/red] cannot serve metrics on {host}:{port}: {error}")
        raise typer.Exit(2) from error
    return server


def start_worker_metrics(port: int, dsn: str, host: str = "0.0.0.0",
                         cache_s: float = 5.0) -> tuple[WorkerMetrics, MetricsServer]:
    """For `sqljobs worker --metrics-port`: the run observer, and a server answering its
    metrics, the queue gauges and the process metrics on the global registry."""
    extra = metrics_extra()
    observer = extra.WorkerMetrics()
    extra.QueueGaugeCollector(dsn, cache_s=cache_s, registry=extra.REGISTRY)
    server = _serve(extra, port, extra.REGISTRY, host)
    err_console.print(f"serving metrics on {server.url}", soft_wrap=True, highlight=False)
    return observer, server


def metrics(
    port: Annotated[int, typer.Option(**whole(0, 65535),
                                      help="Serve /metrics on this port (0: any free one).")
                    ] = 9464,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    cache: Annotated[float, typer.Option(
        **finite(0), help="Answer scrapes from one database read for this many seconds.")
    ] = 5.0,
    dsn: DsnOption = None,
) -> None:
    """Serve the queue and limit gauges for Prometheus (one per fleet) until SIGTERM."""
    extra = metrics_extra()
    registry = extra.CollectorRegistry()
    collector = extra.QueueGaugeCollector(dsn_of(dsn), cache_s=cache, registry=registry)
    server = _serve(extra, port, registry, host)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    err_console.print(f"serving queue gauges on {server.url}", soft_wrap=True,
                      highlight=False)
    try:
        stop.wait()
    finally:
        server.close()
        collector.close()


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def stats(
    minutes: Annotated[float, typer.Option(
        help="The window: jobs finished in the last this many minutes.",
        **finite(unit="minutes"))] = 5.0,
    as_json: Annotated[bool, typer.Option(
        "--json", help='Print {"window_s": S, "queues": [one object per queue]}.')] = False,
    dsn: DsnOption = None,
) -> None:
    """Throughput, outcomes and latency per queue over the last minutes (jobs.stats)."""
    window_s = minutes * 60
    with connected_client(dsn) as client:
        rows = client.run(queries.stats(window_s))
    if as_json:
        body: dict[str, Any] = {"window_s": window_s,
                                "queues": [row.model_dump(mode="json") for row in rows]}
        output.emit_json(body)
        return
    if not rows:
        output.say(f"no job finished in the last {minutes:g} minute(s)")
        return
    table = Listing("queue", "succeeded", "failed", "dead", "cancelled", "jobs/s",
                  "wait p50", "wait p95", "run p50", "run p95",
                  title=f"the last {minutes:g} minute(s)")
    for row in rows:
        table.add_row(row.queue, row.succeeded, row.failed, row.dead,
                      row.cancelled, f"{row.per_s:.2f}", _seconds(row.wait_p50_s),
                      _seconds(row.wait_p95_s), _seconds(row.run_p50_s),
                      _seconds(row.run_p95_s))
    output.show(table)
