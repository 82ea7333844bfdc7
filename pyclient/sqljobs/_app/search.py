"""`app.reindex(...)`: a backfill into a search index.

A search index is a small port, `SearchIndex`: `upsert(documents)` and `delete(ids)`.
`document_of(row)` turns each source row into a `Document`, or None when the row must
leave the index. The reindex is a backfill (`app.backfill`): the same ledger, cursor
steps, gates and operator verbs; each batch is one upsert and one delete at most, at
least once (both are idempotent).

`PostgresSearchIndex` is the adapter that needs no other service: a table with a
generated `tsvector` column (title weighted A, body B) and a GIN index on it, in the
application's database; `search(query)` ranks with `websearch_to_tsquery`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from sqljobs._app.backfills import Backfill, BackfillHandle, Batch, Host, declare_backfill
from sqljobs._app.maintenance import qualified
from sqljobs._client.errors import ConfigurationError


@dataclass(frozen=True)
class Document:
    """One searchable document: its id, the text to search (title ranks above body),
    and any JSON `data` to keep with it."""

    id: str
    body: str
    title: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class SearchIndex(Protocol):
    """The port a reindex writes to. Both calls must be idempotent (at least once)."""

    def upsert(self, documents: Sequence[Document]) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...


class PostgresSearchIndex:
    """A full-text index in PostgreSQL: `table` (id, title, body, data, tsv) with a GIN
    index on the generated `tsv`, in text search configuration `config`."""

    def __init__(self, dsn: str | Callable[[], str], table: str = "public.search_documents",
                 config: str = "simple") -> None:
        self._dsn = dsn
        self.table = table
        self.config = config
        qualified(table)

    @property
    def dsn(self) -> str:
        return self._dsn() if callable(self._dsn) else self._dsn

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True)

    def ensure(self) -> None:
        """Create the table and its GIN index when missing (idempotent)."""
        table = qualified(self.table)
        index = sql.Identifier(self.table.split(".")[-1] + "_tsv")
        with self._connect() as conn:
            conn.execute(sql.SQL(
                "create table if not exists {table} (id text primary key, "
                "title text not null default '', body text not null, "
                "data jsonb not null default '{{}}', tsv tsvector generated always as ("
                "setweight(to_tsvector({config}::regconfig, title), 'A') || "
                "setweight(to_tsvector({config}::regconfig, body), 'B')) stored)").format(
                table=table, config=sql.Literal(self.config)))
            conn.execute(sql.SQL("create index if not exists {index} on {table} "
                                 "using gin (tsv)").format(index=index, table=table))

    def upsert(self, documents: Sequence[Document]) -> None:
        if not documents:
            return
        with self._connect() as conn, conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "insert into {table} (id, title, body, data) values (%s, %s, %s, %s) "
                "on conflict (id) do update set title = excluded.title, body = excluded.body, "
                "data = excluded.data").format(table=qualified(self.table)),
                [(d.id, d.title, d.body, Jsonb(d.data)) for d in documents])

    def delete(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._connect() as conn:
            conn.execute(sql.SQL("delete from {table} where id = any(%s)").format(
                table=qualified(self.table)), (list(ids),))

    def search(self, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """The ids matching `query` (web-search syntax), best first, with their rank."""
        with self._connect() as conn:
            rows = conn.execute(sql.SQL(
                "select id, ts_rank(tsv, q) as rank from {table}, "
                "websearch_to_tsquery({config}::regconfig, %s) as q where tsv @@ q "
                "order by rank desc, id limit %s").format(
                table=qualified(self.table), config=sql.Literal(self.config)),
                (query, limit)).fetchall()
        return [(str(r[0]), float(r[1])) for r in rows]


def declare_reindex(app: Host, name: str, *, index: SearchIndex,
                    document_of: Callable[[Any], Document | None], source: str,
                    key: tuple[str, ...], id_of: Callable[[Any], str] | None, batch: int,
                    count: int | None, environments: tuple[str, ...] | None,
                    requires: tuple[str, ...], rate: float | None, queue: str | None,
                    timeout: float | None) -> BackfillHandle:
    """The backfill that feeds `index`: rows whose document is None are deleted by
    `id_of(row)` (default: the key's value, as text)."""
    if not isinstance(index, SearchIndex):
        raise ConfigurationError(f"reindex {name!r}: index must have upsert() and delete()")
    ident = id_of or (lambda row: ":".join(str(row[k]) for k in key))

    def feed(batch: Batch) -> None:
        documents, gone = [], []
        for row in batch.rows:
            document = document_of(row)
            if document is None:
                gone.append(ident(row))
            else:
                documents.append(document)
        index.upsert(documents)
        index.delete(gone)

    async def reindex_batch(batch: Batch) -> None:  # the index's calls block: in a thread
        import asyncio

        await asyncio.to_thread(feed, batch)

    if not callable(document_of) or inspect.isclass(document_of):
        raise ConfigurationError(f"reindex {name!r}: document_of must be a function of a row")
    declared = Backfill(name=name, handle=reindex_batch, source=source, key=key, batch=batch,
                        count=count, environments=environments, requires=requires,
                        rate=rate, also=document_of)
    return declare_backfill(app, declared, queue=queue, timeout=timeout)


__all__ = ["Document", "PostgresSearchIndex", "SearchIndex", "declare_reindex"]
