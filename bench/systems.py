"""The systems under test and how the suite installs and starts each one.

sqljobs runs with this interpreter. Each peer is installed by the suite itself, latest
release, into its own environment under bench/.peers/<env>/ (git-ignored): a
virtualenv for the Python peers (plus psycopg, which the shared driver code uses), a
node_modules directory for the Node ones. No peer's dependencies mix with ours.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "runtime_drivers"
PEERS_DIR = HERE / ".peers"

QUEUE = frozenset({"enqueue_single", "enqueue_bulk", "drain", "latency", "sustained",
                   "pressure"})
STEPS = frozenset({"steps"})


@dataclass(frozen=True, slots=True)
class System:
    name: str
    label: str
    runtime: str  # "self" (this interpreter), "python" (a peer virtualenv) or "node"
    driver: str  # file name in bench/runtime_drivers/
    workloads: frozenset[str]
    packages: tuple[str, ...] = ()  # what to install; the first one is the system
    env: str = ""  # bench/.peers/<env>; defaults to name
    variant: str = ""
    job_table: str = ""  # where the system keeps its queued jobs (the pressure reader's)

    @property
    def home(self) -> Path:
        return PEERS_DIR / (self.env or self.name)

    def command(self) -> list[str]:
        if self.runtime == "self":
            return [sys.executable, str(DRIVERS / self.driver)]
        if self.runtime == "python":
            return [str(self.home / "venv" / "bin" / "python"), str(DRIVERS / self.driver)]
        return ["node", str(DRIVERS / self.driver)]

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.runtime == "node":
            env["NODE_PATH"] = str(self.home / "node_modules")
        return env

    def installed(self) -> bool:
        if self.runtime == "python":
            # the venv alone is not enough: an install that failed half-way leaves it
            dist = self.packages[0].split("[")[0].replace("-", "_").lower()
            return any((self.home / "venv" / "lib").glob(f"python*/site-packages/{dist}-*"))
        if self.runtime == "node":
            return (self.home / "node_modules" / self.packages[0]).exists()
        return True

    def install(self, upgrade: bool = False) -> None:
        """Install the peer's latest release (once, or again with `upgrade`)."""
        if self.runtime == "self" or (self.installed() and not upgrade):
            return
        self.home.mkdir(parents=True, exist_ok=True)
        if self.runtime == "python":
            python = self.home / "venv" / "bin" / "python"
            if not python.exists():
                subprocess.run([sys.executable, "-m", "venv", str(self.home / "venv")],
                               check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                            "--disable-pip-version-check", "--upgrade", *self.packages],
                           check=True)
        else:
            subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund",
                            "--prefix", str(self.home), *self.packages], check=True)


SYSTEMS: dict[str, System] = {
    s.name: s for s in (
        System("sqljobs", "sqljobs", "self", "sqljobs_driver.py",
               QUEUE | STEPS | {"drain_limited"}, job_table="jobs.job"),
        # The worker's local queue as large as Graphile's batched local queue: the
        # worker settings only change drain and pickup latency.
        System("sqljobs_prefetch", "sqljobs (prefetch 500)", "self", "sqljobs_driver.py",
               frozenset({"drain", "latency"}), variant="prefetch=500", job_table="jobs.job"),
        # Retention of one minute (the stored policy), purged by a scheduler's leader
        # with its default period: the sustained table + index size should stay flat.
        System("sqljobs_retention", "sqljobs (retention 60 s)", "self", "sqljobs_driver.py",
               frozenset({"sustained", "pressure"}), variant="retention=60",
               job_table="jobs.job"),
        System("procrastinate", "Procrastinate", "python", "procrastinate_driver.py", QUEUE,
               ("procrastinate", "psycopg[binary]"), job_table="procrastinate_jobs"),
        System("pgqueuer", "PgQueuer", "python", "pgqueuer_driver.py", QUEUE,
               ("pgqueuer", "asyncpg", "psycopg[binary]"), job_table="pgqueuer"),
        System("chancy", "Chancy", "python", "chancy_driver.py", QUEUE,
               ("chancy", "psycopg[binary]"), job_table="chancy_jobs"),
        System("graphile", "Graphile Worker", "node", "graphile_driver.cjs", QUEUE,
               ("graphile-worker", "pg"), variant="default",
               job_table="graphile_worker._private_jobs"),
        System("graphile_batched", "Graphile Worker (batching on)", "node",
               "graphile_driver.cjs", QUEUE, ("graphile-worker", "pg"), env="graphile",
               variant="batched", job_table="graphile_worker._private_jobs"),
        # awa's queue storage (ADR-019, ADR-023): append-only ready entries in a ring of
        # partitions, truncated as they are spent; the reader scans all of them.
        System("awa", "awa", "python", "awa_driver.py", QUEUE,
               ("awa-pg", "psycopg[binary]"), job_table="awa.ready_entries"),
        System("pgboss", "pg-boss", "node", "pgboss_driver.cjs", QUEUE, ("pg-boss",),
               job_table="pgboss.job"),
        System("absurd", "Absurd", "python", "absurd_driver.py", STEPS,
               ("absurd-sdk", "absurdctl", "psycopg[binary]")),
        System("dbos", "DBOS", "python", "dbos_driver.py", STEPS,
               ("dbos", "psycopg[binary]")),
    )
}
