"""Keep a per-customer order total from the orders table as orders arrive: a stream
consumer over a PostgreSQL table, each turn's upsert and cursor in one transaction.

    sqljobs worker examples.consumers.app:app      # runs the consumer's turns
    sqljobs scheduler examples.consumers.app:app   # its supervisor starts a run each minute
"""

from __future__ import annotations

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN

TABLES = """
create table if not exists public.orders (id bigint generated always as identity primary key,
  customer text not null, amount_cents integer not null);
create table if not exists public.customer_totals (customer text primary key,
  total_cents bigint not null)"""


@app.consumer("orders.totals", source=sqljobs.TableSource("public.orders", key="id"),
              batch=500, cron="* * * * *")
def add_to_totals(batch: sqljobs.ConsumerBatch) -> None:
    # batch.conn is the turn's transaction: these writes commit with the cursor, or not
    # at all, so a crash never counts an order twice.
    with batch.conn.cursor() as cur:
        cur.executemany(
            "insert into public.customer_totals as t values (%s, %s) on conflict (customer) "
            "do update set total_cents = t.total_cents + excluded.total_cents",
            [(row["customer"], row["amount_cents"]) for row in batch.rows])
