"""sqljobs driven at the SQL level: the jobs.* functions over psycopg 3, no client
library, no Python handlers. Each call is one autocommit statement (one round trip,
one commit), as the worker and producer of the Python client send them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

JOB_NAME = "bench.noop"
QUEUES = ["default"]
LEASE_S = 30.0

ENQUEUE = "select id, outcome from jobs.enqueue(%s, %s, %s::jsonb, %s::jsonb)"
ENQUEUE_MANY = "select ord, id, outcome from jobs.enqueue_many(%s::jsonb)"
# claim_v2: what the 0.3 worker sends (jobs.claim's columns and the actor)
CLAIM = "select id, claim, name, payload, actor from jobs.claim_v2(%s, %s, %s, %s)"
ACK_MANY = "select id, ok from jobs.ack_many(%s, %s, null)"


class SqljobsProducer:
    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self.conn = conn

    def prepare_batch(self, keys: Sequence[str]) -> str:
        return json.dumps([{"name": JOB_NAME, "key": k, "payload": {}} for k in keys])

    def enqueue_one(self, key: str) -> None:
        row = self.conn.execute(ENQUEUE, (JOB_NAME, key, "{}", "{}"), prepare=True).fetchone()
        if row is None or row[1] != "created":
            raise RuntimeError(f"enqueue of {key} answered {row}")

    def enqueue_batch(self, batch: str) -> None:
        rows = self.conn.execute(ENQUEUE_MANY, (batch,), prepare=True).fetchall()
        if not rows or any(r[2] != "created" for r in rows):
            raise RuntimeError("enqueue_many did not create every job")


class SqljobsConsumer:
    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], worker: str) -> None:
        self.conn = conn
        self.worker = worker

    def claim_and_settle(self, limit: int) -> int:
        claimed = self.conn.execute(
            CLAIM, (QUEUES, self.worker, limit, LEASE_S), prepare=True
        ).fetchall()
        if not claimed:
            return 0
        ids = [r[0] for r in claimed]
        claims = [r[1] for r in claimed]
        held = dict(zip(ids, claims, strict=True))
        while held:  # a busy row (ok null: locked elsewhere) is sent again, as the worker does
            acked = self.conn.execute(ACK_MANY, (list(held), list(held.values())),
                                      prepare=True).fetchall()
            if any(r[1] is False for r in acked):
                raise RuntimeError(f"{self.worker}: ack_many lost a lease")
            held = {r[0]: held[r[0]] for r in acked if r[1] is None}
        return len(ids)


class SqljobsSql:
    name = "sqljobs"

    def install(self, dsn: str) -> None:
        from sqljobs._schema.migrate import upgrade  # alembic: only where a schema is installed

        upgrade(dsn)

    @contextmanager
    def producer(self, dsn: str) -> Iterator[SqljobsProducer]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            yield SqljobsProducer(conn)

    @contextmanager
    def consumer(self, dsn: str, worker: str) -> Iterator[SqljobsConsumer]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            yield SqljobsConsumer(conn, worker)

    def count_succeeded(self, dsn: str) -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "select count(*) from jobs.job where state = 'succeeded'"
            ).fetchone()
        return int(row[0]) if row else 0

    def analyze(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("analyze jobs.job")
