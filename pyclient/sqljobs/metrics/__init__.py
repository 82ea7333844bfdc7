"""Prometheus metrics for sqljobs (the `metrics` extra: pip install 'sqljobs[metrics]').

Nothing in the core imports this package; it is the one place that imports
`prometheus_client` (docs/howto-metrics.md):

    WorkerMetrics        an observer (`Worker(app, observers=[WorkerMetrics()])`): counters
                         and histograms of this worker's runs and claims
    QueueGaugeCollector  the queue and limit gauges, read from the database
                         (jobs.queue_gauges, jobs.limit_gauges) at scrape time, cached briefly
    serve                an HTTP server answering /metrics for a registry

Label values are queue names, job names, outcome labels and limit names only: never
anything from a payload.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry

from sqljobs.metrics._gauges import QueueGaugeCollector
from sqljobs.metrics._serving import MetricsServer, serve
from sqljobs.metrics._worker import WorkerMetrics

# prometheus_client's registries, so a caller (the CLI) need not import it itself
__all__ = ["REGISTRY", "CollectorRegistry", "MetricsServer", "QueueGaugeCollector",
           "WorkerMetrics", "serve"]
