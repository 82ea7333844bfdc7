"""The upkeep factories the tests run (tests/test_upkeep.py), loadable by the CLI as
`tests.upkeep_example_app:app` (DSN: $SQLJOBS_DSN): a purge of two app tables, a daily
rollup of sales, and the refresh of a materialized view."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from sqljobs import App, PurgeTable

TABLES = """
create table if not exists public.app_events (id bigserial primary key,
  created_at timestamptz not null, kind text not null);
create table if not exists public.app_logs (id bigserial primary key, at timestamptz not null);
create table if not exists public.sales (id bigserial primary key, at timestamptz not null,
  shop text not null, amount integer not null);
create table if not exists public.daily_sales (day date not null, shop text not null,
  total bigint not null, n bigint not null, primary key (day, shop));
create materialized view if not exists public.shop_totals as
  select shop, sum(amount) as total from public.sales group by shop;
create unique index if not exists shop_totals_shop on public.shop_totals (shop);
"""


def reset(conn: psycopg.Connection[Any]) -> None:
    conn.execute(TABLES)
    conn.execute("truncate public.app_events, public.app_logs, public.sales, "
                 "public.daily_sales")
    conn.execute("refresh materialized view public.shop_totals")


def make_app(dsn: str | None = None) -> App:
    app = App(dsn)
    app.purge("app.retention", [
        PurgeTable("public.app_events", "created_at", timedelta(days=30), batch=10,
                   where="kind <> 'audit'"),
        PurgeTable("public.app_logs", "at", timedelta(days=7), batch=10),
    ])
    app.rollup("sales.daily", target="public.daily_sales", key=("day", "shop"),
               source="select at::date as day, shop, sum(amount) as total, count(*) as n "
                      "from public.sales group by 1, 2")
    app.refresh_view("public.shop_totals")
    return app


app = make_app()
