"""Pressure cells: the sustained load, for each system, under what a real database has
beside its queue (`python -m bench --part pressure`).

    as_is     the sustained load alone
    snapshot  a REPEATABLE READ transaction in the system's database that has taken its
              snapshot and sits idle in transaction for the whole run: vacuum can
              remove no row version that run makes dead
    reader    a session scanning the system's job table in full, one scan after another,
              for the whole run (each scan a statement of its own, sequential, no
              parallel workers: its snapshot and its lock last one scan)
    burst     the offered rate times 10 (`--burst-factor`) for 30 s (scaled in the
              short profile), from `burst_at` seconds in

The pressure starts when the load does (the system's job table has received its first
row), not while the system installs its schema: a held snapshot would stall a
`CREATE INDEX CONCURRENTLY` in a migration, which is not what the cell measures. Beside
every cell the runner samples, every `sample_s`, the sizes of all the tables and indexes
of the system's database (they are all the system's: each run has a fresh database),
their live and dead tuples (`pg_stat_user_tables`), the job table's own dead tuples, and
the age of the oldest snapshot (`backend_xmin`) in that database; the autovacuum
stand-in (bench/autovacuum.py) runs with stock thresholds and the profile's naptime.
Per window (10 s) the report lines the driver's pickups up with the last sample taken
by the window's end.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from bench.autovacuum import ALL_TABLES, Autovacuum
from bench.suite import Measurement, run_driver
from bench.systems import System


@dataclass(frozen=True, slots=True)
class Cell:
    name: str
    summary: str


CELLS: dict[str, Cell] = {c.name: c for c in (
    Cell("as_is", "the sustained load alone"),
    Cell("snapshot", "a REPEATABLE READ snapshot held idle in transaction in the system's "
                     "database for the whole run"),
    Cell("reader", "full scans of the system's job table, back to back, for the whole run"),
    Cell("burst", "the offered rate ×10 for a while mid-run"),
)}


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    seconds: float  # the offered load's length; the cell lasts until every job ran
    rate: float  # jobs/s offered outside the burst
    window: float  # the report's window, seconds
    burst_at: float
    burst_seconds: float
    burst_factor: float
    naptime_s: float  # the autovacuum stand-in's naptime
    sample_s: float = 2.0


PROFILES: dict[str, Profile] = {
    # the cells: 3 minutes each at 400 jobs/s, the burst 30 s long from minute 1
    "long": Profile("long", 180.0, 400.0, 10.0, 60.0, 30.0, 10.0, 60.0),
    # one cell well under a minute: 30 s at 100 jobs/s, a 5-s burst from 10 s, vacuum's
    # naptime scaled down with it so that vacuum runs (or is held back) inside the cell
    "short": Profile("short", 30.0, 100.0, 10.0, 10.0, 5.0, 10.0, 10.0),
}

# The job table's relations: itself, and its partitions when it is partitioned
# (pg_partition_tree lists nothing for a plain table).
JOB_RELS = """
select pg_catalog.to_regclass(%(job)s) as relid
 union select relid from pg_catalog.pg_partition_tree(pg_catalog.to_regclass(%(job)s))
"""
SAMPLE = f"""
with job as ({JOB_RELS})
select coalesce(sum(pg_catalog.pg_table_size(s.relid)), 0),
       coalesce(sum(pg_catalog.pg_indexes_size(s.relid)), 0),
       coalesce(sum(s.n_live_tup), 0), coalesce(sum(s.n_dead_tup), 0),
       coalesce(sum(s.n_dead_tup) filter (where s.relid in (select relid from job)), 0),
       coalesce(sum(pg_catalog.pg_table_size(s.relid) + pg_catalog.pg_indexes_size(s.relid))
                filter (where s.relid in (select relid from job)), 0),
       (select coalesce(max(pg_catalog.age(a.backend_xmin)), 0)
          from pg_catalog.pg_stat_activity a
         where a.datname = pg_catalog.current_database())
  from pg_catalog.pg_stat_user_tables s
"""
SAMPLE_KEYS = ("table_bytes", "index_bytes", "live", "dead", "job_dead", "job_bytes",
               "xmin_age")

# Has the load started? Rows inserted into the job table so far (a queue that deletes
# what it ran may hold none at the moment of looking), or rows in it now (the
# statistics reach pg_stat_user_tables up to a second late).
STARTED = f"""
with job as ({JOB_RELS})
select exists (select from pg_catalog.pg_stat_user_tables s
                where s.relid in (select relid from job) and s.n_tup_ins > 0)
"""
STARTED_ROWS = "select exists (select from {})"


def _table(name: str) -> sql.Composable:
    return sql.Identifier(*name.split("."))


class Pressure:
    """What runs beside one cell's driver: the sampler, the autovacuum stand-in, and
    the cell's pressure (a held snapshot or a reader) once the load has started.

    run_driver() calls start(dsn) once the system's database exists, stop() after the
    driver has exited."""

    def __init__(self, cell: str, job_table: str, profile: Profile) -> None:
        self.cell, self.job_table, self.profile = cell, job_table, profile
        self.samples: list[dict[str, float]] = []
        self.vacuums: list[tuple[float, float, str]] = []
        self.facts: dict[str, Any] = {"cell": cell, "job_table": job_table}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._started = threading.Event()  # the load has started
        self._threads: list[threading.Thread] = []
        self._vacuum: Autovacuum | None = None
        self.dsn, self._t0 = "", 0.0

    # -- lifecycle -----------------------------------------------------------------

    def start(self, dsn: str) -> None:
        self.dsn, self._t0 = dsn, time.time()
        self._vacuum = Autovacuum(dsn, self.profile.naptime_s, time.monotonic(), ALL_TABLES)
        self._vacuum.start()
        targets = [self._sample, self._watch_start]
        if self.cell == "snapshot":
            targets.append(self._hold_snapshot)
        elif self.cell == "reader":
            targets.append(self._read)
        for target in targets:
            t = threading.Thread(target=self._guard, args=(target,), daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._started.set()  # release whoever still waits for the load
        for t in self._threads:
            t.join(timeout=60)
        if self._vacuum:
            self._vacuum.stop.set()
            self._vacuum.join(timeout=120)
            self.vacuums = self._vacuum.events

    def _guard(self, target: Any) -> None:
        try:
            target()
        except Exception as e:  # reported with the cell, never silently lost
            self.errors.append(f"{target.__name__}: {type(e).__name__}: {e}")

    # -- the load's start ------------------------------------------------------------

    def _watch_start(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    rows = sql.SQL(STARTED_ROWS).format(_table(self.job_table))
                    while not self._stop.is_set():
                        row = conn.execute(STARTED, {"job": self.job_table}).fetchone()
                        if not (row and row[0]) and conn.execute(
                                "select pg_catalog.to_regclass(%s) is not null",
                                (self.job_table,)).fetchone() == (True,):
                            row = conn.execute(rows).fetchone()
                        if row and row[0]:
                            self.facts["load_seen_at"] = time.time()
                            self._started.set()
                            return
                        time.sleep(0.1)
            except psycopg.OperationalError:
                time.sleep(0.2)  # the database is being made, or already gone

    # -- sampling --------------------------------------------------------------------

    def _sample(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        next_at = time.time()
        while not self._stop.is_set():
            next_at += self.profile.sample_s
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=True)
                row = conn.execute(SAMPLE, {"job": self.job_table}).fetchone()
                if row:
                    self.samples.append({"at": time.time(),
                                         **{k: float(v) for k, v in zip(SAMPLE_KEYS, row,
                                                                        strict=True)}})
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(max(0.0, next_at - time.time()))
        if conn is not None:
            conn.close()

    # -- the pressures ---------------------------------------------------------------

    def _hold_snapshot(self) -> None:
        """BEGIN ISOLATION LEVEL REPEATABLE READ, take the snapshot, sit idle in
        transaction until the cell ends; then check that it is the same snapshot
        (the transaction was never ended under it) and roll back."""
        self._started.wait()
        if self._stop.is_set():
            return
        with psycopg.connect(self.dsn) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            row = conn.execute("select pg_catalog.pg_current_snapshot()::text, "
                               "pg_catalog.pg_backend_pid()").fetchone()
            assert row
            snapshot, pid = str(row[0]), int(row[1])
            taken = time.time()
            self.facts |= {"snapshot": snapshot, "snapshot_taken_at": taken,
                           "snapshot_pid": pid}
            self._stop.wait()
            row = conn.execute("select pg_catalog.pg_current_snapshot()::text").fetchone()
            self.facts["snapshot_held_s"] = time.time() - taken
            self.facts["snapshot_unchanged"] = bool(row and str(row[0]) == snapshot)
            conn.rollback()

    def _read(self) -> None:
        """Full sequential scans of the job table, back to back, until the cell ends."""
        self._started.wait()
        if self._stop.is_set():
            return
        scan = sql.SQL("select pg_catalog.count(*), "
                       "coalesce(pg_catalog.sum(pg_catalog.pg_column_size(j.*)), 0) "
                       "from {} j").format(_table(self.job_table))
        durations: list[float] = []
        rows_seen = 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for setting in ("enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan"):
                conn.execute(sql.SQL("set {} = off").format(sql.Identifier(setting)))
            conn.execute("set max_parallel_workers_per_gather = 0")
            first = time.time()
            while not self._stop.is_set():
                start = time.perf_counter()
                row = conn.execute(scan).fetchone()
                durations.append(time.perf_counter() - start)
                rows_seen = max(rows_seen, int(row[0]) if row else 0)
        durations.sort()
        self.facts |= {
            "reader_started_at": first, "reader_scans": len(durations),
            "reader_scan_p50_ms": durations[len(durations) // 2] * 1e3 if durations else 0.0,
            "reader_scan_max_ms": durations[-1] * 1e3 if durations else 0.0,
            "reader_most_rows": rows_seen}


def driver_args(cell: str, profile: Profile) -> tuple[str, ...]:
    """The sustained driver's arguments for one cell."""
    args: tuple[str, ...] = ("--rate", str(profile.rate), "--seconds", str(profile.seconds),
            "--concurrency", "10", "--window", str(profile.window),
            "--timeout", str(profile.seconds + max(120.0, 2 * profile.seconds)))
    if cell == "burst":
        args += ("--burst-at", str(profile.burst_at),
                 "--burst-seconds", str(profile.burst_seconds),
                 "--burst-factor", str(profile.burst_factor))
    return args


def per_window(result: dict[str, Any], samples: list[dict[str, float]],
               window: float) -> list[dict[str, Any]]:
    """The driver's windows, each with the last database sample taken by its end."""
    t0 = float(result["window"][0])
    out = []
    for b in result.get("series", []):
        end = t0 + float(b["t"]) + window
        taken = [s for s in samples if s["at"] <= end]
        last = taken[-1] if taken else {}
        out.append({**b, **{k: last.get(k) for k in SAMPLE_KEYS}})
    return out


def run_cell(system: System, cell: str, admin_dsn: str, profile: Profile) -> Measurement:
    """One cell for one system: its sustained driver in a fresh database with the
    cell's pressure beside it. A cell whose pressure did not hold (no snapshot taken,
    or not the same one at the end; a reader that never scanned) says so in
    extra["errors"]."""
    watcher = Pressure(cell, system.job_table, profile)
    [result] = run_driver(system, "sustained", driver_args(cell, profile), admin_dsn,
                          timeout=3 * profile.seconds + 600, sampler=watcher)
    facts, errors = watcher.facts, list(watcher.errors)
    if cell == "snapshot" and not facts.get("snapshot_unchanged"):
        errors.append("the snapshot was not held to the end of the run")
    if cell == "reader" and not facts.get("reader_scans"):
        errors.append("the reader never completed a scan")
    t0 = float(result["window"][0])
    for key in ("load_seen_at", "snapshot_taken_at", "reader_started_at"):
        if key in facts:  # seconds after the driver's load started
            facts[key.replace("_at", "_s")] = round(float(facts.pop(key)) - t0, 2)
    return Measurement(cell, system.name, 1, version=str(result.pop("version", "?")),
                       values=result,
                       extra={"windows": per_window(result, watcher.samples, profile.window),
                              "vacuums": watcher.vacuums, "pressure": facts,
                              "errors": errors})
