"""Database plumbing shared by the runner: DSNs, fresh databases, counters, facts."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def admin_dsn_from_env() -> str:
    return os.environ.get("SQLJOBS_BENCH_DSN") or DEFAULT_ADMIN_DSN


def with_dbname(dsn: str, dbname: str) -> str:
    """The same server and credentials as `dsn`, database `dbname`."""
    return make_conninfo(dsn, dbname=dbname)


def dbname_of(dsn: str) -> str:
    return str(conninfo_to_dict(dsn).get("dbname") or "")


def fresh_database(admin_dsn: str, name: str) -> str:
    """Drop (forcing out stale sessions) and create database `name`; answer its DSN."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(ident))
        conn.execute(sql.SQL("create database {}").format(ident))
    return with_dbname(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(ident))


@dataclass(frozen=True, slots=True)
class XactCounts:
    commits: int
    rollbacks: int


def xact_counts(admin_dsn: str, dbname: str, settle_s: float = 0.3, tries: int = 20) -> XactCounts:
    """pg_stat_database counters of `dbname`, read from the admin database (so the
    reads are not counted), once they have stopped moving.

    PostgreSQL 15 flushes a backend's counters when it exits or at most once a second
    while it is busy; callers close their connections first, then read here.
    """
    query = (
        "select xact_commit, xact_rollback from pg_catalog.pg_stat_database "
        "where datname = %s"
    )
    last: tuple[int, int] | None = None
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for _ in range(tries):
            conn.execute("select pg_catalog.pg_stat_clear_snapshot()")
            row = conn.execute(query, (dbname,)).fetchone()
            now = (int(row[0]), int(row[1])) if row else (0, 0)
            if now == last:
                break
            last = now
            time.sleep(settle_s)
    assert last is not None
    return XactCounts(*last)


def machine_facts(admin_dsn: str) -> dict[str, str]:
    """What the results depend on: cores, memory, server version and key settings."""
    facts: dict[str, str] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": str(os.cpu_count()),
        "memory": _memory(),
        "load_average": load_average(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
    }
    settings = (
        "shared_buffers", "synchronous_commit", "fsync", "wal_level", "max_wal_size",
        "checkpoint_timeout", "autovacuum", "autovacuum_naptime",
        "autovacuum_vacuum_scale_factor", "work_mem",
    )
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("select pg_catalog.version()").fetchone()
        facts["postgresql"] = str(row[0]).split(" on ")[0] if row else "?"
        for name in settings:
            row = conn.execute(
                "select pg_catalog.current_setting(%s)", (name,)
            ).fetchone()
            facts[name] = str(row[0]) if row else "?"
    return facts


def load_average() -> str:
    """1, 5 and 15-minute load averages: how busy the shared machine was."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _memory() -> str:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    kib = int(line.split()[1])
                    return f"{kib / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "?"


def code_facts() -> dict[str, str]:
    """Which engine was measured: the commit, whether sql/ differed from it, and a hash
    of the revisions' SQL that was actually loaded."""
    from sqljobs._schema.resources import revisions

    loaded = "".join(r.sql() for r in revisions())
    facts = {"schema_sha256": hashlib.sha256(loaded.encode()).hexdigest()[:12]}
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "sql"],
                               capture_output=True, text=True, check=True).stdout.strip()
        facts["commit"] = head + (" + uncommitted changes in sql/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        facts["commit"] = "?"
    return facts
