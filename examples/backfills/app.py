"""A backfill: lower-case every user's email, 500 rows a batch, 20 batches a second at most.

    sqljobs worker examples.backfills.app:app
    sqljobs backfills run users.lowercase_email --app examples.backfills.app:app
    sqljobs backfills --app examples.backfills.app:app             # progress
    sqljobs backfills --app examples.backfills.app:app --pending   # exit 5 until it completed
"""

from __future__ import annotations

import psycopg

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN; the environment: $SQLJOBS_ENVIRONMENT, else "default"

USERS = "create table if not exists public.users (id bigint primary key, email text not null)"


@app.backfill(
    name="users.lowercase_email",
    # read by keyset on id: each page is `... where id > <cursor> order by id limit 500`
    source="select id, email from public.users where email <> lower(email)",
    key="id",
    batch=500,
    rate=20,  # batches per second, at most
    environments=["default", "staging", "production"],
)
def lowercase_email(batch: sqljobs.Batch) -> None:
    # At least once per batch: a crash re-runs the batch in hand, so the update is
    # written to be harmless twice.
    with psycopg.connect(app.dsn) as conn:
        conn.execute("update public.users set email = lower(email) where id = any(%s)",
                     ([row["id"] for row in batch.rows],))
