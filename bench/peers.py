"""Figures quoted from /shared ANCHORS.md and DESIGN.md §5: measured elsewhere on a
machine like this one, NOT in this run. A peer adapter (bench/adapters/) replaces a
quoted figure with a measured one."""

from __future__ import annotations

from dataclasses import dataclass

# workload -> [(system, jobs/s as quoted)]
PEERS: dict[str, list[tuple[str, str]]] = {
    "enqueue_single": [
        ("Graphile Worker 0.17", "700-1,000"),
        ("PgQueuer 1.6", "1,580 (217-2,043)"),
        ("Chancy 0.26", "620"),
        ("Procrastinate 3.10", "323 (157-666)"),
        ("Absurd 0.5", "505"),
        ("DBOS 3.4", "201"),
    ],
    "enqueue_bulk": [
        ("Graphile Worker 0.17", "35,000-48,000"),
        ("PgQueuer 1.6", "24,000-33,000"),
        ("Chancy 0.26", "2,700"),
        ("Procrastinate 3.10", "6,700-7,200"),
    ],
    "drain": [
        ("Graphile Worker, batching on", "22,000-25,000"),
        ("Graphile Worker default", "1,500-2,600"),
        ("PgQueuer 1.6", "1,100-2,500"),
        ("Chancy 0.26", "530-630"),
        ("Procrastinate 3.10", "130-270"),
        ("Absurd 0.5 (one-step jobs)", "107-147"),
        ("DBOS 3.4", "68"),
    ],
}

# ceiling name -> the ANCHORS.md figure for the same (or the nearest) pgbench script.
ANCHOR_CEILINGS: dict[str, str] = {
    "insert_one": "3,500/s (1 client)",
    "insert_batch": "~93,000/s with 50-row inserts (not the same batch size)",
    "claim_delete_one": "(not in ANCHORS.md)",
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
