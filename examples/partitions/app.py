"""Daily partitions of an events table: three days made ahead, 90 days kept.

    sqljobs worker examples.partitions.app:app
    sqljobs scheduler examples.partitions.app:app
"""

from __future__ import annotations

from datetime import timedelta

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN

EVENTS = """create table if not exists public.events (
  at timestamptz not null, kind text not null, data jsonb) partition by range (at)"""

app.partitions("events.partitions", table="public.events", every="day", ahead=3,
               retention=timedelta(days=90), cron="5 * * * *")
