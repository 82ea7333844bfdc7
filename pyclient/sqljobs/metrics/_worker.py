"""The worker's own metrics: an observer (sqljobs._runtime.observing) of every run and claim.

    sqljobs_job_runs_total{queue,name,outcome}          runs ended, by outcome label
    sqljobs_job_run_duration_seconds{queue,name}        handler time of a run (histogram)
    sqljobs_job_start_latency_seconds{queue,name}       enqueue to first start (histogram)
    sqljobs_job_runs_in_progress{queue,name}            runs under way now
    sqljobs_worker_claims_total                         claim statements sent
    sqljobs_worker_claimed_jobs_total                   jobs those claims returned
    sqljobs_worker_claim_duration_seconds               a claim's round trip (histogram)

The start latency is `started_at - created_at` of a job's first start, both on the
database clock (so a worker's clock skew cannot bend it); a retry, or a parked job
resuming, is not a first start and is not observed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from sqljobs._client.records import ClaimedJob
from sqljobs._runtime.observing import RunObserver, RunWatch

# Seconds: a run or a wait may be milliseconds or an hour.
DURATION_BUCKETS: Sequence[float] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                                     30, 60, 300, 900, 3600)
CLAIM_BUCKETS: Sequence[float] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                  2.5)


class WorkerMetrics(RunObserver):
    """Counters and histograms of one worker's runs, in `registry` (default: the global
    prometheus_client registry). Pass it to `Worker(app, observers=[...])`."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 duration_buckets: Sequence[float] = DURATION_BUCKETS,
                 latency_buckets: Sequence[float] = DURATION_BUCKETS) -> None:
        target = REGISTRY if registry is None else registry
        job = ["queue", "name"]
        self.runs = Counter("sqljobs_job_runs", "Runs ended, by outcome (succeeded, retried, "
                            "failed, dead, parked, snoozed, interrupted, compensated, lost).",
                            [*job, "outcome"], registry=target)
        self.run_duration = Histogram("sqljobs_job_run_duration_seconds",
                                      "Time from a run's start to its outcome, seconds.", job,
                                      buckets=duration_buckets, registry=target)
        self.start_latency = Histogram("sqljobs_job_start_latency_seconds",
                                       "Enqueue to first start (created_at to started_at, "
                                       "database clock), seconds.", job,
                                       buckets=latency_buckets, registry=target)
        self.in_progress = Gauge("sqljobs_job_runs_in_progress", "Runs under way now.", job,
                                 registry=target)
        self.claims = Counter("sqljobs_worker_claims", "Claim statements sent.",
                              registry=target)
        self.claimed_jobs = Counter("sqljobs_worker_claimed_jobs", "Jobs the claims returned.",
                                    registry=target)
        self.claim_duration = Histogram("sqljobs_worker_claim_duration_seconds",
                                        "A claim's round trip, seconds.",
                                        buckets=CLAIM_BUCKETS, registry=target)

    def run_begins(self, job: ClaimedJob) -> RunWatch:
        self.in_progress.labels(job.queue, job.name).inc()
        if job.attempt == 1 and not job.steps and job.started_at is not None:
            waited = (job.started_at - job.created_at).total_seconds()
            self.start_latency.labels(job.queue, job.name).observe(max(0.0, waited))
        return _RunMetrics(self, job.queue, job.name)

    def claimed(self, count: int, seconds: float) -> None:
        self.claims.inc()
        self.claimed_jobs.inc(count)
        self.claim_duration.observe(seconds)


class _RunMetrics(RunWatch):
    """One run: counted when it ends."""

    def __init__(self, metrics: WorkerMetrics, queue: str, name: str) -> None:
        self._metrics = metrics
        self._queue = queue
        self._name = name

    def ended(self, label: str, error: Mapping[str, Any] | None, duration_s: float) -> None:
        metrics = self._metrics
        metrics.in_progress.labels(self._queue, self._name).dec()
        metrics.runs.labels(self._queue, self._name, label).inc()
        metrics.run_duration.labels(self._queue, self._name).observe(duration_s)
