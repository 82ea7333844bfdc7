"""The outbox relay's throughput: staged rows per second turned into jobs.

    python -m bench.relay                      # 3 runs x each setup, 50,000 rows each
    python -m bench.relay --rows 20000 --runs 1 --relays 1 --batch 500

Each run: a fresh database (on $SQLJOBS_BENCH_DSN, else the local server), the schema,
`--rows` rows staged with jobs.stage_many (1,000 per call; timed apart, as "stage"),
then `--relays` in-process `sqljobs.Relay` roles (each its own connections; LISTEN off,
so no notify latency is counted either way) publish them. The clock runs from starting
the relays until jobs.outbox_stats() shows nothing pending; every row must have become
exactly one job with its id, or the run fails. Half the rows carry one of 100 ordering
keys, so the relay's ordering check is part of what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import psycopg
from psycopg.types.json import Jsonb

from bench.db import admin_dsn_from_env, drop_database, fresh_database, machine_facts
from sqljobs import App
from sqljobs._runtime.relay import Relay
from sqljobs._schema import migrate

DB = "sqljobs_bench_relay"


def stage(dsn: str, rows: int) -> float:
    """Stage `rows` rows; answers rows per second."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, rows, 1000):
            specs = [{"name": "bench.relay", "key": f"k{i}", "queue": "bench",
                      "payload": {"i": i},
                      **({"ordering_key": f"o{i % 100}"} if i % 2 else {})}
                     for i in range(start, min(start + 1000, rows))]
            conn.execute("select count(*) from jobs.stage_many(%s)", (Jsonb(specs),))
    return rows / (time.perf_counter() - started)


async def relay_all(dsn: str, relays: int, batch: int) -> float:
    """Run `relays` relays until nothing is pending; answers elapsed seconds."""
    app = App(dsn)
    roles = [Relay(app, batch=batch, listen=False, poll_interval=0.05, install_signals=False,
                   purge_interval=3600.0) for _ in range(relays)]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        tasks = [asyncio.create_task(role.run_async()) for role in roles]
        while True:
            cur = await conn.execute("select pending from jobs.outbox_stats()")
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
    for role in roles:
        role.stop()
    for code in await asyncio.gather(*tasks):
        assert code == 0
    return elapsed


def verify(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select (select count(*) from jobs.job), (select count(*) from jobs.outbox o "
            "join jobs.job j on j.id = o.id where o.outcome = 'created')").fetchone()
    assert row == (rows, rows), f"expected {rows} jobs, one per staged row: {row}"


def one_run(admin_dsn: str, rows: int, relays: int, batch: int) -> tuple[float, float]:
    dsn = fresh_database(admin_dsn, DB)
    try:
        migrate.upgrade(dsn)
        staged_per_s = stage(dsn, rows)
        elapsed = asyncio.run(relay_all(dsn, relays, batch))
        verify(dsn, rows)
    finally:
        drop_database(admin_dsn, DB)
    return staged_per_s, rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--relays", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--batch", type=int, nargs="*", default=[500, 1000])
    args = parser.parse_args()
    admin_dsn = admin_dsn_from_env()
    facts = machine_facts(admin_dsn)
    print("machine: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    print(f"{'relays':>6} {'batch':>5} {'stage rows/s':>13} {'relay rows/s (runs)':>40} "
          f"{'median':>8}")
    for relays in args.relays:
        for batch in args.batch:
            results = [one_run(admin_dsn, args.rows, relays, batch) for _ in range(args.runs)]
            staged = statistics.median(r[0] for r in results)
            relayed = [r[1] for r in results]
            runs = ", ".join(f"{r:,.0f}" for r in relayed)
            print(f"{relays:>6} {batch:>5} {staged:>13,.0f} {runs:>40} "
                  f"{statistics.median(relayed):>8,.0f}", flush=True)


if __name__ == "__main__":
    main()
