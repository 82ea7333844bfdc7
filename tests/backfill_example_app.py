"""The backfills the backfill tests run (tests/test_backfills.py), also loadable by the
CLI and by worker processes: `--app tests.backfill_example_app:app` (DSN: $SQLJOBS_DSN).

`public.bf_items` is the source; each handled row is recorded in `public.bf_effects`
(its id, the job, the batch and the process), so a test can count how often a row was
handled and by whom. A batch may be held (`public.bf_hold`) until a test releases it.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from sqljobs import App, Batch

TABLES = """
create table if not exists public.bf_items (id integer primary key, v integer not null);
create table if not exists public.bf_effects (
  seq bigint generated always as identity, id integer not null, job_id bigint not null,
  batch integer not null, pid integer not null);
create table if not exists public.bf_hold (batch integer primary key);
"""


def reset(conn: psycopg.Connection[Any], rows: int) -> None:
    """The source table with `rows` rows (ids 1..rows), no effects, no holds."""
    conn.execute(TABLES)
    conn.execute("truncate public.bf_items, public.bf_effects, public.bf_hold")
    conn.execute("insert into public.bf_items select i, i * 10 from generate_series(1, %s) i",
                 (rows,))


async def record(batch: Batch, dsn: str) -> None:
    """Record the batch's rows as handled; wait first while a test holds this batch."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while await (await conn.execute(
                "select count(*) from public.bf_hold where batch = %s",
                (batch.number,))).fetchone() != (0,):
            await conn.execute("select pg_sleep(0.05)")
        await conn.execute(
            "insert into public.bf_effects (id, job_id, batch, pid) "
            "select unnest(%s::int[]), %s, %s, %s",
            ([r["id"] if isinstance(r, dict) else r for r in batch.rows], batch.ctx.job_id,
             batch.number, os.getpid()))


def make_app(dsn: str | None = None, *, environment: str | None = None,
             count: int | None = None, rate: float | None = None, batch: int = 100,
             environments: list[str] | None = None, variant: int = 0) -> App:
    """An app declaring the test backfills: `bf.items` (keyset over bf_items),
    `bf.pages` (a page function) and `bf.after` (requires bf.items). `variant` 1 changes
    the handler of bf.items (another checksum)."""
    app = App(dsn, environment=environment)

    if variant == 0:
        @app.backfill(name="bf.items", source="select id, v from public.bf_items", key="id",
                      batch=batch, count=count, rate=rate, environments=environments)
        async def items(batch: Batch) -> None:
            await record(batch, app.dsn)
    else:
        @app.backfill(name="bf.items", source="select id, v from public.bf_items", key="id",
                      batch=batch, count=count, rate=rate, environments=environments)
        async def items_changed(batch: Batch) -> None:
            await record(batch, app.dsn)  # the same effect, another declaration

    def page(cursor: Any, scope: str) -> tuple[list[int], Any]:
        start = 0 if cursor is None else cursor
        ids = list(range(start + 1, min(start + 7, 20) + 1))
        return ids, (ids[-1] if ids and ids[-1] < 20 else None)

    @app.backfill(name="bf.pages", pages=page)
    async def pages(batch: Batch) -> None:
        await record(batch, app.dsn)

    @app.backfill(name="bf.after", source="select id from public.bf_items", key="id",
                  requires=["bf.items"])
    def after(batch: Batch) -> None:
        return None

    return app


app = make_app(environment=os.environ.get("SQLJOBS_ENVIRONMENT"))
