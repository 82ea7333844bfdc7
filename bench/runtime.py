"""Runtime workloads: each system's own worker running real no-op handlers, driven
through its public Python API (`python -m bench --runtime`).

Every system runs the same driver protocol (bench/runtime_drivers/_common.py) as a
subprocess of this runner, with its own interpreter: sqljobs with the project's
(this interpreter), each peer with the virtualenv this module installs for it under
bench/.peers/<name>/venv (latest release from the package index, plus psycopg for the
driver's own settle polling), so no peer's dependencies mix with ours. Each run gets a
fresh database of its own; systems are interleaved within every repeat.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import db
from bench.report import RuntimeMeasurement

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "runtime_drivers"
PEERS_DIR = HERE / ".peers"


@dataclass(frozen=True, slots=True)
class System:
    name: str
    package: str | None  # None: the project itself, in this interpreter
    extra: tuple[str, ...] = ()

    @property
    def python(self) -> Path:
        if self.package is None:
            return Path(sys.executable)
        return PEERS_DIR / self.name / "venv" / "bin" / "python"

    @property
    def driver(self) -> Path:
        return DRIVERS / f"{self.name}_driver.py"


SYSTEMS: dict[str, System] = {
    s.name: s for s in (
        System("sqljobs", None),
        System("procrastinate", "procrastinate", ("psycopg[binary]",)),
        System("pgqueuer", "pgqueuer", ("asyncpg", "psycopg[binary]")),
    )
}


@dataclass(frozen=True, slots=True)
class RuntimeWorkload:
    name: str
    driver_workload: str
    jobs: int
    summary: str


RUNTIME_WORKLOADS: dict[str, RuntimeWorkload] = {
    w.name: w for w in (
        RuntimeWorkload("drain_runtime", "drain", 20_000,
                        "20,000 pre-enqueued no-op jobs, the system's worker in-process "
                        "(asyncio), concurrency 10; jobs/s from worker start to the last "
                        "job settled in the database"),
        RuntimeWorkload("latency_runtime", "latency", 200,
                        "idle worker (concurrency 10); 200 jobs enqueued 10 ms apart; "
                        "handler start minus enqueue time, ms"),
    )
}


def ensure_peer(system: System, upgrade: bool = False) -> None:
    """Create the peer's virtualenv and install its latest release (once, or again
    with `upgrade`)."""
    if system.package is None:
        return
    venv = system.python.parent.parent
    if system.python.exists() and not upgrade:
        return
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not system.python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(system.python), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", "--upgrade", system.package,
                    *system.extra], check=True)


def run_one(system: System, w: RuntimeWorkload, admin_dsn: str,
            concurrency: int = 10, timeout: float = 600.0) -> RuntimeMeasurement:
    dbname = f"sqljobs_bench_rt_{system.name}"
    dsn = db.fresh_database(admin_dsn, dbname)
    try:
        started = time.monotonic()
        proc = subprocess.run(
            [str(system.python), str(system.driver), "--workload", w.driver_workload,
             "--dsn", dsn, "--jobs", str(w.jobs), "--concurrency", str(concurrency)],
            capture_output=True, text=True, timeout=timeout, cwd=DRIVERS)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{system.name} {w.name} failed (exit {proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        data = json.loads(lines[-1][len("RESULT "):])
    finally:
        db.drop_database(admin_dsn, dbname)
    return RuntimeMeasurement(workload=w.name, system=system.name,
                              version=str(data.pop("version", "?")),
                              values={k: float(v) for k, v in data.items()},
                              wall_s=time.monotonic() - started)
