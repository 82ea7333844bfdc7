"""The pgbench ceilings: what PostgreSQL itself does on this machine, in this run,
against a minimal queue table (bench/pgbench/schema.sql) in its own database.

Each ceiling is `pgbench -n -M prepared -T <s> -c <clients>` with one script from
bench/pgbench/. jobs/s = tps x jobs per script run. Claim ceilings run against a
pre-filled table; one that ran dry is refused rather than reported.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import db
from bench.report import Measurement

SCRIPTS = Path(__file__).resolve().parent / "pgbench"
DBNAME = "sqljobs_bench_ceiling"


@dataclass(frozen=True, slots=True)
class Ceiling:
    name: str
    script: str
    clients: int
    jobs_per_tx: int
    prefill: int
    summary: str
    bounds: str
    """The workload this ceiling bounds."""


CEILINGS: dict[str, Ceiling] = {
    c.name: c
    for c in (
        Ceiling("insert_one", "insert_one.sql", 1, 1, 0,
                "one-row insert, 1 client (1 commit/job)", "enqueue_single"),
        Ceiling("insert_batch", "insert_batch.sql", 1, 1000, 0,
                "1,000-row insert, 1 client (1 commit/1,000 jobs)", "enqueue_bulk"),
        Ceiling("claim_delete_one", "claim_delete_one.sql", 10, 1, 300_000,
                "delete-one skip-locked claim, 10 clients (1 commit/job)", ""),
        Ceiling("claim_one_then_delete", "claim_one_then_delete.sql", 10, 1, 300_000,
                "claim one, then delete it, 10 clients (2 commits/job)", ""),
        Ceiling("claim_50_then_delete_50", "claim_50_then_delete_50.sql", 10, 50, 1_500_000,
                "claim 50, then delete the 50, 10 clients (2 commits/50 jobs)", "drain"),
    )
}

_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)
_DONE = re.compile(r"^number of transactions actually processed: (\d+)", re.M)


def _prepare(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((SCRIPTS / "schema.sql").read_text(encoding="utf-8"))
        if rows:
            conn.execute("insert into q (payload) select '{}' from generate_series(1, %s)",
                         (rows,))
        conn.execute("vacuum analyze q")


def _ready_rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select count(*) from q where state = 0").fetchone()
    return int(row[0]) if row else 0


def run(c: Ceiling, admin_dsn: str, seconds: int = 10) -> Measurement:
    """One repeat of one ceiling, in a freshly made table."""
    dsn = db.with_dbname(admin_dsn, DBNAME)
    _prepare(dsn, c.prefill)
    before = db.xact_counts(admin_dsn, DBNAME)
    cmd = [
        "pgbench", "-n", "-M", "prepared", "-T", str(seconds),
        "-c", str(c.clients), "-j", str(min(c.clients, os.cpu_count() or 1)),
        "-f", str(SCRIPTS / c.script), dsn,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"pgbench {c.name} failed ({out.returncode}):\n{out.stderr}{out.stdout}")
    after = db.xact_counts(admin_dsn, DBNAME)
    tps_m, done_m = _TPS.search(out.stdout), _DONE.search(out.stdout)
    if not tps_m or not done_m:
        raise RuntimeError(f"cannot read pgbench output of {c.name}:\n{out.stdout}")
    tps, txs = float(tps_m.group(1)), int(done_m.group(1))
    if c.prefill and _ready_rows(dsn) == 0:
        raise RuntimeError(f"ceiling {c.name} ran out of rows; raise its prefill")
    return Measurement(
        workload=f"ceiling:{c.name}",
        system="pgbench",
        jobs=txs * c.jobs_per_tx,
        seconds=txs / tps,
        commits=after.commits - before.commits,
        rollbacks=after.rollbacks - before.rollbacks,
        tps=tps,
    )


def fresh(admin_dsn: str) -> None:
    db.fresh_database(admin_dsn, DBNAME)


def drop(admin_dsn: str) -> None:
    db.drop_database(admin_dsn, DBNAME)
