"""The workloads, each defined once (docs/benchmarks.md), run against any adapter.

A workload gets a fresh database with the adapter's schema installed, does its
untimed setup, then times the work and counts commits in that database (from
pg_stat_database, read from the admin database once every bench connection closed).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from bench import db
from bench.adapters import Adapter
from bench.report import Measurement

BULK_BATCH = 1000  # specs per enqueue_many call: the client's chunk size


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    jobs: int
    batch: int
    concurrency: int
    summary: str
    body: Callable[[Workload, Adapter, str], tuple[int, float]]
    """Runs the timed part against the database at dsn; answers (jobs, seconds)."""
    setup: Callable[[Workload, Adapter, str], None] | None = None
    """Untimed, before the commit counter starts."""
    verify: Callable[[Workload, Adapter, str], None] | None = None
    """Untimed, after the commit counter stopped."""


def _keys(n: int) -> list[str]:
    run = uuid.uuid4().hex[:8]
    return [f"{run}-{i}" for i in range(n)]


def _enqueue_single(w: Workload, adapter: Adapter, dsn: str) -> tuple[int, float]:
    keys = _keys(w.jobs)
    with adapter.producer(dsn) as producer:
        start = time.perf_counter()
        for key in keys:
            producer.enqueue_one(key)
        return w.jobs, time.perf_counter() - start


def _enqueue_bulk(w: Workload, adapter: Adapter, dsn: str) -> tuple[int, float]:
    keys = _keys(w.jobs)
    with adapter.producer(dsn) as producer:
        batches = [producer.prepare_batch(keys[i : i + w.batch]) for i in range(0, w.jobs, w.batch)]
        start = time.perf_counter()
        for batch in batches:
            producer.enqueue_batch(batch)
        return w.jobs, time.perf_counter() - start


def prefill(adapter: Adapter, dsn: str, jobs: int) -> None:
    """Enqueue `jobs` no-op jobs in bulk (untimed) and refresh planner statistics."""
    keys = _keys(jobs)
    with adapter.producer(dsn) as producer:
        for i in range(0, jobs, BULK_BATCH):
            producer.enqueue_batch(producer.prepare_batch(keys[i : i + BULK_BATCH]))
    adapter.analyze(dsn)


def _drain_setup(w: Workload, adapter: Adapter, dsn: str) -> None:
    prefill(adapter, dsn, w.jobs)


def _drain(w: Workload, adapter: Adapter, dsn: str) -> tuple[int, float]:
    """`concurrency` workers, each claiming `batch` at a time and acking them in one
    call, until a claim finds nothing. Timed from the first claim to the last ack."""
    ready = threading.Barrier(w.concurrency + 1)
    done_at = [0.0] * w.concurrency
    settled = [0] * w.concurrency
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with adapter.consumer(dsn, f"bench-{i}") as consumer:
                ready.wait()
                while n := consumer.claim_and_settle(w.batch):
                    settled[i] += n
                done_at[i] = time.perf_counter()
        except BaseException as exc:  # reported below, after every thread ended
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(w.concurrency)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    total = sum(settled)
    if total != w.jobs:
        raise RuntimeError(f"drain workers settled {total} jobs; expected {w.jobs}")
    return total, max(done_at) - start


_held: dict[str, psycopg.Connection[tuple[object, ...]]] = {}


def _pinned_setup(w: Workload, adapter: Adapter, dsn: str) -> None:
    """Pre-fill, then hold a snapshot open (a REPEATABLE READ transaction that has read,
    left idle) until the drain is checked: vacuum and index pruning can then remove
    nothing the drain leaves behind, as under a long report or an idle transaction."""
    prefill(adapter, dsn, w.jobs)
    conn = psycopg.connect(dsn)
    conn.execute("set transaction isolation level repeatable read")
    conn.execute("select 1")  # the snapshot is taken: the transaction pins it
    _held[dsn] = conn


def _pinned_verify(w: Workload, adapter: Adapter, dsn: str) -> None:
    _held.pop(dsn).close()
    _drain_verify(w, adapter, dsn)


def _drain_verify(w: Workload, adapter: Adapter, dsn: str) -> None:
    succeeded = adapter.count_succeeded(dsn)
    if succeeded != w.jobs:
        raise RuntimeError(f"after the drain the database holds {succeeded} succeeded jobs; "
                           f"expected {w.jobs}")

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("enqueue_single", 2_000, 1, 1,
                 "2,000 jobs, one enqueue call each, autocommit, prepared, 1 connection",
                 _enqueue_single),
        Workload("enqueue_bulk", 50_000, BULK_BATCH, 1,
                 "50,000 jobs, enqueue_many in batches of 1,000, autocommit, 1 connection",
                 _enqueue_bulk),
        Workload("drain", 20_000, 100, 10,
                 "20,000 pre-enqueued jobs, 10 connections: claim 100, ack_many, repeat",
                 _drain, setup=_drain_setup, verify=_drain_verify),
        Workload("drain_pinned", 20_000, 100, 10,
                 "drain, with a snapshot held open (idle in transaction) from the end of the "
                 "pre-fill to after the last ack",
                 _drain, setup=_pinned_setup, verify=_pinned_verify),
    )
}


def run(w: Workload, adapter: Adapter, admin_dsn: str, keep: bool = False) -> Measurement:
    """One repeat: fresh database, install, setup, timed body, commit count."""
    dbname = f"sqljobs_bench_{w.name}"
    db.fresh_database(admin_dsn, dbname)
    try:
        return measure(w, adapter, admin_dsn, dbname)
    finally:
        if not keep:
            db.drop_database(admin_dsn, dbname)


def measure(w: Workload, adapter: Adapter, admin_dsn: str, dbname: str) -> Measurement:
    """One repeat in the new, empty database `dbname`: install, setup, timed body, commit
    count (read from `admin_dsn`, a database of the same server)."""
    dsn = db.with_dbname(admin_dsn, dbname)
    adapter.install(dsn)
    if w.setup:
        w.setup(w, adapter, dsn)
    before = db.xact_counts(admin_dsn, dbname)
    jobs, seconds = w.body(w, adapter, dsn)
    after = db.xact_counts(admin_dsn, dbname)
    if w.verify:
        w.verify(w, adapter, dsn)
    return Measurement(
        workload=w.name,
        system=adapter.name,
        jobs=jobs,
        seconds=seconds,
        commits=after.commits - before.commits,
        rollbacks=after.rollbacks - before.rollbacks,
    )
