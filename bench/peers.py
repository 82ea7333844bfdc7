"""The targets (docs/benchmarks.md) for the SQL-level engine workloads, and published
figures for the same ceilings, for orientation (measured elsewhere, not in this run).
The peers themselves are measured in the same run (bench/suite.py, bench/systems.py)."""

from __future__ import annotations

from dataclasses import dataclass

# ceiling name -> the published figure for the same (or the nearest) pgbench script.
ANCHOR_CEILINGS: dict[str, str] = {
    "insert_one": "3,500/s (1 client)",
    "insert_batch": "~93,000/s with 50-row inserts (not the same batch size)",
    "claim_delete_one": "(none published)",
    "claim_one_then_delete": "~2,400/s",
    "claim_50_then_delete_50": "~23,000/s",
}


@dataclass(frozen=True, slots=True)
class Target:
    text: str
    floor_jobs_s: float
    """The peer-derived floor, jobs/s (the upper end of the quoted peer range)."""
    ceiling: str | None = None
    ceiling_fraction: float = 0.0
    """Also at least this fraction of the measured ceiling `ceiling`."""


TARGETS: dict[str, Target] = {
    "enqueue_single": Target("≥ 3× Graphile add_job (3× 1,000/s), ≥ 0.8× one-row insert",
                             3_000, "insert_one", 0.8),
    "enqueue_bulk": Target("≥ 2× Graphile add_jobs (2× 48,000/s)", 96_000),
    "drain": Target("≥ Graphile batched (25,000/s), ≥ 20× Procrastinate", 25_000),
}
