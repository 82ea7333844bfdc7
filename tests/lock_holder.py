"""A lock holder process for tests/test_locks.py.

    python -m tests.lock_holder DSN NAME TTL sync|async

Takes `app.lock(NAME)` (or `app.lock_async`), prints `acquired <token>`, then writes a
row fenced on its token into public.fenced_writes every 50 ms, for as long as it holds
the lock. When the lock is lost it prints `lost` and exits 3 (sync: `lock.check()`
raised; async: the guarded task was cancelled).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import psycopg

from sqljobs import App, LockLost

TABLE = """
create table if not exists public.fenced_writes (
  token bigint not null,
  pid   integer not null,
  at    timestamptz not null default clock_timestamp()
)
"""
# The write a resource in this database fences on the token: it lands only while the
# token holds the live lease (jobs.lease_holds locks the lease row until commit).
FENCED_WRITE = ("insert into public.fenced_writes (token, pid) select %s, %s "
                "where jobs.lease_holds(%s, %s)")


def run_sync(app: App, name: str, ttl: float) -> None:
    with app.lock(name, ttl=ttl) as lock, psycopg.connect(app.dsn, autocommit=True) as conn:
        print(f"acquired {lock.token}", flush=True)
        while True:
            lock.check()
            conn.execute(FENCED_WRITE, (lock.token, os.getpid(), name, lock.token))
            time.sleep(0.05)


async def run_async(app: App, name: str, ttl: float) -> None:
    await app.open_async()
    async with app.lock_async(name, ttl=ttl) as lock:
        print(f"acquired {lock.token}", flush=True)
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            while True:
                await conn.execute(FENCED_WRITE, (lock.token, os.getpid(), name, lock.token))
                await asyncio.sleep(0.05)


def main() -> int:
    dsn, name, ttl, mode = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    app = App(dsn)
    try:
        if mode == "sync":
            run_sync(app, name, ttl)
        else:
            asyncio.run(run_async(app, name, ttl))
    except LockLost as error:
        print(f"lost: {error}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
