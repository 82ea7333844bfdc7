"""Export orders to a storage URL, one object per 10,000 rows; import a CSV of orders.

    sqljobs worker examples.transfer.app:app
    sqljobs enqueue orders.export --payload '{"url": "file:///tmp/orders-export"}'
    sqljobs enqueue orders.import --payload '{"url": "file:///tmp/orders.csv"}'

Any fsspec URL works in place of file://: s3://bucket/prefix with s3fs installed,
gs://... with gcsfs, az://... with adlfs.
"""

from __future__ import annotations

import psycopg
from pydantic import BaseModel

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN

ORDERS = """create table if not exists public.orders (
  id bigint primary key, customer text not null, amount_cents integer not null)"""

app.export_rows("orders.export", source="select id, customer, amount_cents from public.orders",
                key="id", url="file:///tmp/orders-export", page=10_000)


class Order(BaseModel):
    id: int
    customer: str
    amount_cents: int


@app.import_rows("orders.import", format="csv", model=Order,
                 page_bytes=4 << 20, max_record_bytes=4 << 10)
def load_orders(page: sqljobs.ImportPage) -> None:
    # At least once per page: an upsert makes a repeated page harmless.
    with psycopg.connect(app.dsn) as conn, conn.cursor() as cur:
        cur.executemany(
            "insert into public.orders (id, customer, amount_cents) values (%s, %s, %s) "
            "on conflict (id) do update set customer = excluded.customer, "
            "amount_cents = excluded.amount_cents",
            [(o.id, o.customer, o.amount_cents) for o in page.records])
