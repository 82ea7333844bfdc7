"""Backfill throughput: 1,000,000 rows in batches of 1,000, with and without `rate`.

    python -m bench.backfill [--rows 1000000] [--batch 1000] [--rate 20] [--only-rate]

One worker in this process; the handler does an indexed update of its batch (a real,
idempotent write), so the time is the page reads, the writes, one step and one ledger
call per batch. Prints rows per second for each run, as Markdown.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import psycopg

from bench.db import admin_dsn_from_env, drop_database, fresh_database
from sqljobs import App, Batch, Worker
from sqljobs._schema import migrate


def run(dsn: str, rows: int, batch: int, rate: float | None) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists public.bench_rows")
        conn.execute("create table public.bench_rows (id bigint primary key, v int not null, "
                     "done boolean not null default false)")
        conn.execute("insert into public.bench_rows (id, v) select i, i %% 97 "
                     "from generate_series(1, %s) i", (rows,))
        conn.execute("vacuum analyze public.bench_rows")
        conn.execute("truncate jobs.backfill")
    app = App(dsn)

    @app.backfill(name="bench.rows", source="select id from public.bench_rows", key="id",
                  batch=batch, count=rows, rate=rate)
    async def handle(b: Batch) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("update public.bench_rows set done = true where id = any(%s)",
                               ([r["id"] for r in b.rows],))

    worker = Worker(app, concurrency=1, install_signals=False, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    with app:
        thread.start()
        began = time.monotonic()
        job = app.backfills["bench.rows"].start(rerun=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                row: Any = conn.execute("select state::text from jobs.job where id = %s",
                                        (job.id,)).fetchone()
                if row[0] in ("succeeded", "failed", "dead"):
                    break
                time.sleep(0.1)
        elapsed = time.monotonic() - began
        worker.stop()
        thread.join()
        assert row[0] == "succeeded", row
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--only-rate", action="store_true", help="skip the unthrottled run")
    args = parser.parse_args()
    admin = admin_dsn_from_env()
    dsn = fresh_database(admin, "sqljobs_bench_backfill")
    try:
        migrate.upgrade(dsn)
        print("| run | rows | batches | seconds | rows/s |\n| --- | --- | --- | --- | --- |")
        runs = [("no rate", None)] if not args.only_rate else []
        for label, rate in [*runs, (f"rate={args.rate:g}/s", args.rate)]:
            seconds = run(dsn, args.rows, args.batch, rate)
            print(f"| {label} | {args.rows:,} | {args.rows // args.batch:,} | {seconds:.1f} | "
                  f"{args.rows / seconds:,.0f} |", flush=True)
    finally:
        drop_database(admin, "sqljobs_bench_backfill")


if __name__ == "__main__":
    main()
