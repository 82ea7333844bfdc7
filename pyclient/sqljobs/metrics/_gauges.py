"""The queue and limit gauges, read from the database when Prometheus scrapes.

One scrape is two cheap statements (jobs.queue_gauges, jobs.limit_gauges: the live
rows' indexes only, sql/93_metrics.sql), and their answer is kept `cache_s` seconds, so
many scrapers (or a short scrape interval) cost the database one read per `cache_s`.

    sqljobs_queue_ready_jobs{queue}               due now, waiting for a worker or a slot
    sqljobs_queue_scheduled_jobs{queue}           waiting for a future run_at
    sqljobs_queue_running_jobs{queue}
    sqljobs_queue_parked_jobs{queue}
    sqljobs_queue_dead_jobs{queue}
    sqljobs_queue_blocked_jobs{queue}             of ready: waiting for a limit's slot
    sqljobs_queue_oldest_ready_age_seconds{queue}
    sqljobs_queue_demand_jobs{queue}              running + due jobs a worker could take
    sqljobs_queue_paused{queue}                   1 while paused
    sqljobs_limit_groups{limit}, sqljobs_limit_running_jobs{limit},
    sqljobs_limit_concurrency{limit} (slots per group), sqljobs_limit_waiting_jobs{limit},
    sqljobs_limit_deferred_jobs{limit}, sqljobs_limit_recent_starts{limit}
    sqljobs_gauges_up                             1 when the last read succeeded
    sqljobs_gauges_read_duration_seconds          how long that read took

The queues are the rows of jobs.queue_gauges(): every queue the database declares (a
job type's, a worker's, a limit's, a schedule's, a pause switch's: jobs.declared_queues)
and every queue holding a live or dead job. A declared queue whose jobs all finished
reports zeros (a graph drops to 0 rather than ending), and every process serving the
gauges, and the web dashboard, lists the same queues: the list is the database's, not
what one process happened to see.

A failed read is logged and answered with `sqljobs_gauges_up 0` and no queue gauges
(never the last good values, which would look current).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs._client.records import LimitGauges, QueueGauges

logger = logging.getLogger("sqljobs.metrics")

_QUEUE_GAUGES: list[tuple[str, str, Callable[[QueueGauges], float]]] = [
    ("sqljobs_queue_ready_jobs", "Jobs due now, waiting for a worker or a limit's slot.",
     lambda g: g.ready),
    ("sqljobs_queue_scheduled_jobs", "Jobs waiting for a future run_at (delay, backoff, rate).",
     lambda g: g.scheduled),
    ("sqljobs_queue_running_jobs", "Jobs running now.", lambda g: g.running),
    ("sqljobs_queue_parked_jobs", "Jobs parked (durable sleep, event wait, child jobs).",
     lambda g: g.parked),
    ("sqljobs_queue_dead_jobs", "Dead-lettered jobs kept (jobs.requeue redrives them).",
     lambda g: g.dead),
    ("sqljobs_queue_blocked_jobs", "Due jobs waiting for a concurrency limit's slot.",
     lambda g: g.blocked),
    ("sqljobs_queue_oldest_ready_age_seconds",
     "Age of the oldest due job not waiting for a slot, seconds (0: none).",
     lambda g: g.oldest_ready_s),
    ("sqljobs_queue_demand_jobs", "Worker slots the queue could use now: running + due jobs "
     "a worker could take (0 of those while paused).", lambda g: g.demand),
    ("sqljobs_queue_paused", "1 while the queue is paused.", lambda g: 1 if g.paused else 0),
]
_LIMIT_GAUGES: list[tuple[str, str, Callable[[LimitGauges], float | None]]] = [
    ("sqljobs_limit_groups", "Groups of the limit in use or waiting.", lambda g: g.groups),
    ("sqljobs_limit_running_jobs", "Jobs holding a slot of the limit.", lambda g: g.running),
    ("sqljobs_limit_concurrency", "Slots per group of the limit.", lambda g: g.concurrency),
    ("sqljobs_limit_waiting_jobs", "Jobs waiting for a slot of the limit.",
     lambda g: g.waiting),
    ("sqljobs_limit_deferred_jobs", "Jobs the limit's rate deferred.", lambda g: g.deferred),
    ("sqljobs_limit_recent_starts", "Starts inside the limit's rate window.",
     lambda g: g.recent_starts),
]


@dataclass
class _Reading:
    at: float  # time.monotonic() of the read
    ok: bool
    seconds: float
    queues: list[QueueGauges] = field(default_factory=list)
    limits: list[LimitGauges] = field(default_factory=list)


class QueueGaugeCollector(Collector):
    """A prometheus_client collector of the queue and limit gauges of the database at `dsn`.

    It holds one autocommit connection, opened at the first scrape and opened again after
    a failure; each read runs under `timeout_s` (statement_timeout)."""

    def __init__(self, dsn: str, *, cache_s: float = 5.0, timeout_s: float = 5.0,
                 registry: CollectorRegistry | None = None) -> None:
        self._dsn = dsn
        self._cache_s = cache_s
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._reading: _Reading | None = None
        self.reads = 0  # database reads so far (the cache's effect is visible)
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[Metric]:
        """The families, without samples: registering reads nothing from the database."""
        return list(self._families(None))

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._reading is None or now - self._reading.at >= self._cache_s:
                self._reading = self._read()
            reading = self._reading
        return list(self._families(reading))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _read(self) -> _Reading:
        started = time.monotonic()
        self.reads += 1
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._dsn, autocommit=True,
                                             connect_timeout=max(1, int(self._timeout_s)),
                                             application_name="sqljobs-metrics")
                self._conn.execute("select pg_catalog.set_config('statement_timeout', %s, "
                                   "false)", (f"{int(self._timeout_s * 1000)}ms",))
            client = Client(self._conn)
            queues = client.run(queries.queue_gauges())
            limits = client.run(queries.limit_gauges())
        except Exception:
            logger.warning("reading the queue gauges failed", exc_info=True)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            return _Reading(time.monotonic(), False, time.monotonic() - started)
        return _Reading(time.monotonic(), True, time.monotonic() - started, queues, limits)

    def _families(self, reading: _Reading | None) -> Iterator[Metric]:
        up = GaugeMetricFamily("sqljobs_gauges_up",
                               "1 when the last read of the queue gauges succeeded.")
        took = GaugeMetricFamily("sqljobs_gauges_read_duration_seconds",
                                 "How long the last read of the queue gauges took, seconds.")
        if reading is not None:
            up.add_metric([], 1 if reading.ok else 0)
            took.add_metric([], reading.seconds)
        yield up
        yield took
        for name, help_text, queue_value in _QUEUE_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["queue"])
            for row in reading.queues if reading else ():
                family.add_metric([row.queue], queue_value(row))
            yield family
        for name, help_text, limit_value in _LIMIT_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["limit"])
            for limit in reading.limits if reading else ():
                value = limit_value(limit)
                if value is not None:
                    family.add_metric([limit.limit_name], value)
            yield family
