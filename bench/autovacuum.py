"""A stand-in for autovacuum, for a server that runs with it off.

The CI-configured server these benchmarks were written on runs with `autovacuum = off`,
and server settings are not ours to change; a sustained run without any vacuum would
measure a setting no production server has. Every naptime this thread applies stock
autovacuum's per-table thresholds and runs VACUUM / ANALYZE with autovacuum's cost
throttling, in its own session.
"""

from __future__ import annotations

import threading
import time

import psycopg

# Stock autovacuum's per-table triggers (PostgreSQL 15 defaults).
VAC_THRESHOLD, VAC_SCALE = 50, 0.2
VAC_INS_THRESHOLD, VAC_INS_SCALE = 1000, 0.2
ANALYZE_THRESHOLD, ANALYZE_SCALE = 50, 0.1

# sqljobs' job tables (jobs.* with rows that churn)
VACUUM_STATS = """
select c.oid::regclass::text, greatest(c.reltuples, 0), s.n_dead_tup, s.n_ins_since_vacuum,
       s.n_mod_since_analyze
  from pg_catalog.pg_stat_user_tables s join pg_catalog.pg_class c on c.oid = s.relid
 where s.schemaname = 'jobs' and s.relname in ('job', 'step', 'event', 'outbox')
"""


class Autovacuum(threading.Thread):
    """Every naptime: stock thresholds on the tables `stats_query` lists, then VACUUM /
    ANALYZE throttled like autovacuum (vacuum_cost_delay 2 ms, vacuum_cost_limit 200)."""

    def __init__(self, dsn: str, naptime_s: float, t0: float,
                 stats_query: str = VACUUM_STATS) -> None:
        super().__init__(daemon=True)
        self.dsn, self.naptime_s, self.t0 = dsn, naptime_s, t0
        self.stats_query = stats_query
        self.stop = threading.Event()
        self.events: list[tuple[float, float, str]] = []  # (start, seconds, what)

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("set vacuum_cost_delay = '2ms'")
            conn.execute("set vacuum_cost_limit = 200")
            while not self.stop.wait(self.naptime_s):
                conn.execute("select pg_catalog.pg_stat_clear_snapshot()")
                for table, tuples, dead, inserted, modified in conn.execute(
                        self.stats_query).fetchall():
                    vacuum = (dead > VAC_THRESHOLD + VAC_SCALE * tuples
                              or inserted > VAC_INS_THRESHOLD + VAC_INS_SCALE * tuples)
                    analyze = modified > ANALYZE_THRESHOLD + ANALYZE_SCALE * tuples
                    if not (vacuum or analyze):
                        continue
                    what = ("vacuum analyze" if vacuum and analyze
                            else "vacuum" if vacuum else "analyze")
                    start = time.monotonic()
                    conn.execute(f"{what} {table}")
                    self.events.append((start - self.t0, time.monotonic() - start,
                                        f"{what} {table}"))
                    if self.stop.is_set():
                        return


# Every user table of the database: for peers, whose tables the suite does not name.
ALL_TABLES = """
select c.oid::regclass::text, greatest(c.reltuples, 0), s.n_dead_tup, s.n_ins_since_vacuum,
       s.n_mod_since_analyze
  from pg_catalog.pg_stat_user_tables s join pg_catalog.pg_class c on c.oid = s.relid
"""
