"""The storage shapes of the engine hot-path study (bench/adapters/shapes.sql,
docs/design/engine-hot-path.md), driven by the same workloads as jobs.*: each shape is
a schema with enqueue, enqueue_many, claim and ack functions, one autocommit prepared
statement per call, as the sqljobs adapter sends them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg

SHAPES_SQL = Path(__file__).with_name("shapes.sql")
LEASE_S = 30.0


class ShapeProducer:
    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
        self.conn = conn
        self.enqueue = f"select {schema}.enqueue(%s)"
        self.enqueue_many = f"select * from {schema}.enqueue_many(%s)"

    def prepare_batch(self, keys: Sequence[str]) -> list[str]:
        return list(keys)

    def enqueue_one(self, key: str) -> None:
        row = self.conn.execute(self.enqueue, (key,), prepare=True).fetchone()
        if row is None or row[0] is None:
            raise RuntimeError(f"enqueue of {key} created nothing")

    def enqueue_batch(self, batch: list[str]) -> None:
        rows = self.conn.execute(self.enqueue_many, (batch,), prepare=True).fetchall()
        if len(rows) != len(batch):
            raise RuntimeError(f"enqueue_many created {len(rows)} of {len(batch)} jobs")


class ShapeConsumer:
    """Claims and acks; passes the position after its last claim as the claim's hint
    (only the lean_hint shape reads it)."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
        self.conn = conn
        self.claim = f"select id, claim, pos from {schema}.claim(%s, %s, %s)"
        self.ack = f"select * from {schema}.ack(%s, %s)"
        self.hint: str | None = None

    def claim_and_settle(self, limit: int) -> int:
        claimed = self.conn.execute(self.claim, (limit, LEASE_S, self.hint),
                                    prepare=True).fetchall()
        if not claimed:
            self.hint = None
            return 0
        self.hint = str(claimed[-1][2]) if claimed[-1][2] is not None else None
        ids = [r[0] for r in claimed]
        claims = [r[1] for r in claimed]
        acked = self.conn.execute(self.ack, (ids, claims), prepare=True).fetchall()
        if len(acked) != len(ids):
            raise RuntimeError(f"ack settled {len(acked)} of {len(ids)} claimed jobs")
        return len(acked)


class ShapeSql:
    def __init__(self, shape: str) -> None:
        self.name = f"shape:{shape}"
        self.schema = f"shape_{shape}"

    def install(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SHAPES_SQL.read_text(encoding="utf-8"))

    @contextmanager
    def producer(self, dsn: str) -> Iterator[ShapeProducer]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            yield ShapeProducer(conn, self.schema)

    @contextmanager
    def consumer(self, dsn: str, worker: str) -> Iterator[ShapeConsumer]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            yield ShapeConsumer(conn, self.schema)

    def count_succeeded(self, dsn: str) -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(f"select {self.schema}.succeeded()").fetchone()
            return int(row[0]) if row else 0

    def analyze(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"analyze {self.schema}.job")


SHAPES: tuple[str, ...] = ("lean", "lean_hint", "split", "split_trigger", "outcome")
