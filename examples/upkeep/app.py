"""Upkeep of an app's own tables, on schedules the scheduler fires:

    sqljobs worker examples.upkeep.app:app      # runs them
    sqljobs scheduler examples.upkeep.app:app   # fires them
    sqljobs purge --dry-run --app examples.upkeep.app:app   # what the purge would delete now
"""

from __future__ import annotations

from datetime import timedelta

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN

TABLES = """
create table if not exists public.page_views (id bigserial primary key,
  viewed_at timestamptz not null default now(), page text not null);
create table if not exists public.daily_views (day date not null, page text not null,
  views bigint not null, primary key (day, page));
create materialized view if not exists public.top_pages as
  select page, count(*) as views from public.page_views group by page;
create unique index if not exists top_pages_page on public.top_pages (page);
"""

# Keep 90 days of page views; delete 5,000 rows per transaction, every hour.
app.purge("views.retention", [
    sqljobs.PurgeTable("public.page_views", "viewed_at", timedelta(days=90), batch=5000),
], cron="15 * * * *")

# Views per page and day, recomputed for the last two days in one upsert every 5 minutes.
app.rollup(
    "views.daily", target="public.daily_views", key=("day", "page"), cron="*/5 * * * *",
    source="select viewed_at::date as day, page, count(*) as views from public.page_views "
           "where viewed_at >= current_date - 1 group by 1, 2")

# The top pages view, refreshed without blocking its readers; never two refreshes at once.
app.refresh_view("public.top_pages", cron="*/10 * * * *")
