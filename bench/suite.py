"""Side by side: every system's driver (bench/runtime_drivers/) through the same
workloads, each run in a fresh database of its own, systems interleaved within every
repeat (A B C, A B C, ...).

After the timed repeats, each (system, workload) runs once more through the counting
proxy (bench/wire.py); that run's round trips and transactions inside the driver's
timed window, per job (per step for step and replay), explain the timed figures.
`sustained` runs once per system, for minutes, with the database sampled beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench import db
from bench.autovacuum import ALL_TABLES, Autovacuum
from bench.systems import DRIVERS, System
from bench.wire import WireCounter


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    args: tuple[str, ...]
    summary: str
    results: tuple[str, ...] = ()  # the result names the driver prints; default (name,)

    @property
    def produces(self) -> tuple[str, ...]:
        return self.results or (self.name,)


WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (
        Workload("enqueue_single", ("--jobs", "2000"),
                 "2,000 jobs, one enqueue call each, one after another, one connection"),
        Workload("enqueue_bulk", ("--jobs", "50000", "--batch", "1000"),
                 "50,000 jobs through the batch API, 1,000 per call"),
        Workload("drain", ("--jobs", "20000", "--concurrency", "10"),
                 "20,000 pre-enqueued no-op jobs, the system's worker, concurrency 10, "
                 "until the database holds all as settled"),
        Workload("drain_limited", ("--jobs", "20000", "--concurrency", "10"),
                 "drain under limits held by the claim: a global concurrency limit of 100 "
                 "and at most 2 running per key, over 100 keys"),
        Workload("latency", ("--jobs", "200", "--interval-ms", "10", "--concurrency", "10"),
                 "idle worker; 200 jobs enqueued 10 ms apart; handler start minus "
                 "enqueue time"),
        Workload("steps", ("--steps", "100"),
                 "one job running 100 trivial durable steps, failing after the last on "
                 "its first run; `step` is that run, `replay` the retry over stored steps",
                 ("step", "replay")),
    )
}


@dataclass(slots=True)
class Measurement:
    workload: str  # a result name: enqueue_single ... latency, step, replay, sustained
    system: str
    repeat: int  # 0: the counted run through the proxy (its timings are not used)
    values: dict[str, Any]
    version: str = "?"
    round_trips: int | None = None
    transactions: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def units(self) -> float:
        """What per-unit counts divide by: jobs, or steps for step and replay."""
        return float(self.values.get("steps") or self.values.get("jobs") or 1)


def driver_url(admin_dsn: str, dbname: str, port: int | None = None) -> str:
    """A postgresql:// URL for the drivers (Node and asyncpg take URLs, libpq both)."""
    info = conninfo_to_dict(admin_dsn)
    host = "127.0.0.1" if port else info.get("host") or "127.0.0.1"
    auth = quote(info.get("user") or "postgres", safe="")
    if info.get("password"):
        auth += ":" + quote(info["password"], safe="")
    where = port or info.get("port") or 5432
    if host.startswith("/"):  # a socket directory (the embedded server): in the query
        return f"postgresql://{auth}@:{where}/{dbname}?host={quote(host, safe='')}"
    return f"postgresql://{auth}@{host}:{where}/{dbname}"


class Watcher(Protocol):
    """What watches a driver's database while it runs (Sampler, pressure.Pressure)."""

    def start(self, dsn: str) -> None: ...

    def stop(self) -> None: ...


def run_driver(system: System, workload: str, args: tuple[str, ...], admin_dsn: str,
               counter: WireCounter | None = None, timeout: float = 1200.0,
               sampler: Watcher | None = None) -> list[dict[str, Any]]:
    """Run `system`'s driver for one workload in a fresh database; answer its results.
    A `sampler` watches that database while the driver runs."""
    # the pid: two runs on one server (several checkouts) never drop each other's
    dbname = f"sqljobs_bench_{system.name}_{os.getpid()}"
    db.fresh_database(admin_dsn, dbname)
    url = driver_url(admin_dsn, dbname, counter.port if counter else None)
    command = [*system.command(), "--workload", workload, "--dsn", url, *args]
    if system.variant:
        command += ["--variant", system.variant]
    try:
        if sampler:
            sampler.start(db.with_dbname(admin_dsn, dbname))
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  cwd=DRIVERS, env=system.environ())
        finally:
            if sampler:
                sampler.stop()
    finally:
        db.drop_database(admin_dsn, dbname)
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    if proc.returncode != 0 or not results:
        raise RuntimeError(f"{system.name} {workload} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    return results


def measure(system: System, w: Workload, admin_dsn: str, repeat: int,
            counter: WireCounter | None = None) -> list[Measurement]:
    out = []
    for result in run_driver(system, w.name, w.args, admin_dsn, counter):
        window = result.pop("window")
        m = Measurement(result.pop("workload"), system.name, repeat,
                        version=str(result.pop("version", "?")), values=result)
        if counter:
            counts = counter.count(*window)
            m.round_trips, m.transactions = counts.round_trips, counts.transactions
        out.append(m)
    return out


def upstream(admin_dsn: str) -> tuple[str, int]:
    info = conninfo_to_dict(admin_dsn)
    host = info.get("host") or "127.0.0.1"
    return ("127.0.0.1" if host.startswith("/") else host), int(info.get("port") or 5432)


# -- sustained ---------------------------------------------------------------------------

SIZES = """
select coalesce(sum(pg_catalog.pg_table_size(relid)), 0),
       coalesce(sum(pg_catalog.pg_indexes_size(relid)), 0),
       coalesce(sum(n_live_tup), 0), coalesce(sum(n_dead_tup), 0)
  from pg_catalog.pg_stat_user_tables
"""


class Sampler:
    """Every `every_s`: the sizes of all tables and indexes of the system's database,
    and its live and dead tuples; beside it, the autovacuum stand-in."""

    def __init__(self, every_s: float = 10.0, naptime_s: float = 60.0) -> None:
        self.every_s, self.naptime_s = every_s, naptime_s
        self.samples: list[dict[str, float]] = []
        self.vacuums: list[tuple[float, float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._vacuum: Autovacuum | None = None
        self.dsn, self._t0 = "", 0.0

    def start(self, dsn: str) -> None:
        self.dsn, self._t0 = dsn, time.monotonic()
        self._vacuum = Autovacuum(dsn, self.naptime_s, self._t0, ALL_TABLES)
        self._vacuum.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._vacuum:
            self._vacuum.stop.set()
            self._vacuum.join()
            self.vacuums = self._vacuum.events

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    row = conn.execute(SIZES).fetchone()
            except psycopg.OperationalError:
                continue  # the driver is still installing, or already gone
            if row:
                self.samples.append({"t": round(time.monotonic() - self._t0, 1),
                                     "table_bytes": float(row[0]),
                                     "index_bytes": float(row[1]),
                                     "live": float(row[2]), "dead": float(row[3])})


def sustained(system: System, admin_dsn: str, seconds: float, rate: float) -> Measurement:
    sampler = Sampler()
    args = ("--rate", str(rate), "--seconds", str(seconds), "--concurrency", "10",
            "--timeout", str(seconds + 300))
    [result] = run_driver(system, "sustained", args, admin_dsn, timeout=seconds + 600,
                          sampler=sampler)
    result.pop("window")
    return Measurement("sustained", system.name, 1, version=str(result.pop("version", "?")),
                       values=result, extra={"samples": sampler.samples,
                                             "vacuums": sampler.vacuums})
