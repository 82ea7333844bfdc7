"""Adapters: how one system under test does the few things the workloads need.

A workload (bench/workloads.py) owns the counts, the clock, the concurrency and the
checks; an adapter only knows its system's API. To add a peer, write a module here
with a class that satisfies `Adapter` and register it in `ADAPTERS`.

Every adapter call that a workload times must be one round of the system's public
API as its users would call it (no shortcuts into its tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol


class Producer(Protocol):
    def prepare_batch(self, keys: Sequence[str]) -> Any:
        """Build a batch's request outside the clock (serialisation is not the SUT)."""

    def enqueue_one(self, key: str) -> None:
        """Enqueue one no-op job with idempotency key `key`, in its own transaction."""

    def enqueue_batch(self, batch: Any) -> None:
        """Enqueue a prepared batch in one call."""


class Consumer(Protocol):
    def claim_and_settle(self, limit: int) -> int:
        """Claim up to `limit` jobs and mark them succeeded (no handler runs).
        Answers how many were settled; 0 means nothing was claimable."""


class Adapter(Protocol):
    name: str

    def install(self, dsn: str) -> None:
        """Install the system's schema into the empty database at `dsn`."""

    def producer(self, dsn: str) -> AbstractContextManager[Producer]: ...

    def consumer(self, dsn: str, worker: str) -> AbstractContextManager[Consumer]: ...

    def count_succeeded(self, dsn: str) -> int:
        """How many jobs the system holds as succeeded (checks a drain)."""

    def analyze(self, dsn: str) -> None:
        """Refresh planner statistics after a pre-fill (what autovacuum would do)."""


def get_adapter(name: str) -> Adapter:
    if name == "sqljobs":
        from bench.adapters.sqljobs_sql import SqljobsSql

        return SqljobsSql()
    if name.startswith("shape:"):  # the hot-path study's prototypes (bench/study.py)
        from bench.adapters.shapes import SHAPES, ShapeSql

        if name[len("shape:"):] in SHAPES:
            return ShapeSql(name[len("shape:"):])
    raise KeyError(f"unknown adapter {name!r}; known: {', '.join(ADAPTERS)}")


ADAPTERS: tuple[str, ...] = ("sqljobs", "shape:lean", "shape:lean_hint", "shape:split",
                             "shape:split_trigger",
                             "shape:outcome")
