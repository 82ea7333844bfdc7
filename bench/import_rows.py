"""Import throughput: a 100 MB CSV through `app.import_rows`, validated and COPYed in.

    python -m bench.import_rows [--mb 100] [--page-mb 4]

One worker in this process; each page's records are validated by a pydantic model and
written with COPY. Prints MB/s and records/s as Markdown.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel

from bench.db import admin_dsn_from_env, drop_database, fresh_database
from sqljobs import App, ImportPage, Worker, fresh_key
from sqljobs._schema import migrate


class Row(BaseModel):
    id: int
    customer: str
    amount_cents: int


def write_file(path: Path, megabytes: int) -> int:
    target, lines = megabytes * 1_000_000, 0
    with path.open("w") as out:
        out.write("id,customer,amount_cents\n")
        size = 25
        while size < target:
            lines += 1
            line = f"{lines},customer-{lines % 10007:05d},{lines % 99991}\n"
            out.write(line)
            size += len(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--page-mb", type=int, default=4)
    args = parser.parse_args()
    admin = admin_dsn_from_env()
    dsn = fresh_database(admin, "sqljobs_bench_import")
    try:
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create table public.bench_import (id bigint, customer text, "
                         "amount_cents integer)")
        app = App(dsn)

        @app.import_rows("bench.import", model=Row, page_bytes=args.page_mb << 20)
        def load(page: ImportPage) -> None:
            with psycopg.connect(dsn) as conn, conn.cursor() as cur, cur.copy(
                    "copy public.bench_import (id, customer, amount_cents) from stdin") as copy:
                for r in page.records:
                    copy.write_row((r.id, r.customer, r.amount_cents))

        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "rows.csv"
            records = write_file(path, args.mb)
            size = path.stat().st_size
            worker = Worker(app, concurrency=1, install_signals=False, poll_interval=0.05)
            thread = threading.Thread(target=worker.run)
            with app:
                thread.start()
                began = time.monotonic()
                job = app.jobs["bench.import"].enqueue({"url": f"file://{path}"},
                                                       key=fresh_key())
                with psycopg.connect(dsn, autocommit=True) as conn:
                    while True:
                        row: Any = conn.execute("select state::text, result from jobs.job "
                                                "where id = %s", (job.id,)).fetchone()
                        if row[0] in ("succeeded", "failed", "dead"):
                            break
                        time.sleep(0.1)
                seconds = time.monotonic() - began
                worker.stop()
                thread.join()
        assert row[0] == "succeeded" and row[1]["accepted"] == records, row
        print("| file | records | pages | seconds | MB/s | records/s |\n"
              "| --- | --- | --- | --- | --- | --- |")
        print(f"| {size / 1e6:.0f} MB CSV | {records:,} | {row[1]['pages']} | {seconds:.1f} | "
              f"{size / 1e6 / seconds:.1f} | {records / seconds:,.0f} |")
    finally:
        drop_database(admin, "sqljobs_bench_import")


if __name__ == "__main__":
    main()
