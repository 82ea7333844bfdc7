"""`app.reindex(...)` end to end: a backfill into `PostgresSearchIndex` (tsvector + GIN)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from sqljobs import App, ConfigurationError, Document, PostgresSearchIndex
from tests.processes import kill_and_wait_sessions, scalar, spawner, wait_for, wait_for_lock_wait
from tests.worker_helpers import running

ARTICLES = """
create table if not exists public.articles (id integer primary key, title text not null,
  body text not null, published boolean not null)
"""


def document_of(row: dict[str, Any]) -> Document | None:
    if not row["published"]:
        return None  # a draft leaves the index
    return Document(id=str(row["id"]), title=row["title"], body=row["body"],
                    data={"id": row["id"]})


def test_a_reindex_feeds_a_postgres_full_text_index(db_dsn: str,
                                                    conn: psycopg.Connection[Any]) -> None:
    conn.execute(ARTICLES)
    conn.execute("truncate public.articles")
    conn.execute("insert into public.articles values "
                 "(1, 'Durable jobs', 'PostgreSQL as the engine of a queue', true), "
                 "(2, 'Backfills', 'a cursor stored per batch', true), "
                 "(3, 'Draft', 'queue internals not yet published', false), "
                 "(4, 'Partitions', 'upkeep of partitioned tables and a queue', true)")
    index = PostgresSearchIndex(db_dsn, table="public.search_articles", config="english")
    index.ensure()
    index.ensure()  # idempotent
    conn.execute("insert into public.search_articles (id, body) values ('3', 'stale queue')")
    assert scalar(conn, "select indexdef from pg_indexes where indexname = "
                        "'search_articles_tsv'").endswith("USING gin (tsv)")
    app = App(db_dsn)
    app.reindex("articles.search", index=index, document_of=document_of,
                source="select id, title, body, published from public.articles", key="id",
                batch=2)
    with app:
        job = app.backfills["articles.search"].start()
    with running(app):
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (job.id,)) == "succeeded", "the reindex")
    assert [hit for hit, _ in index.search("queue")] == ["1", "4"], "the draft was deleted"
    assert [hit for hit, _ in index.search("partitioned")] == ["4"], "stemmed (english)"
    assert index.search("durable")[0][0] == "1"
    ranked = dict(index.search("queue OR backfills"))
    assert set(ranked) == {"1", "2", "4"}
    assert scalar(conn, "select data from public.search_articles where id = '2'") == {"id": 2}
    row = conn.execute("select status, rows_done, batches from jobs.backfills('default') "
                       "where name = 'articles.search'").fetchone()
    # two full batches, then the empty one that finds the end
    assert row == ("completed", 4, 3), "a reindex is a backfill: the same ledger"


def test_the_checksum_covers_document_of() -> None:
    index = PostgresSearchIndex("postgresql://unused")
    one, two = App("postgresql://unused"), App("postgresql://unused")
    one.reindex("r", index=index, document_of=document_of, source="select 1 as id", key="id")
    two.reindex("r", index=index, document_of=lambda row: None, source="select 1 as id",
                key="id")
    assert one.backfills["r"].backfill.checksum != two.backfills["r"].backfill.checksum
    with pytest.raises(ConfigurationError, match="upsert"):
        one.reindex("s", index=object(), document_of=document_of,  # type: ignore[arg-type]
                    source="select 1 as id", key="id")


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from examples.reindex import app as module

    module.app.pools.given = db_dsn
    conn.execute(module.ARTICLES)
    conn.execute("truncate public.articles")
    conn.execute("insert into public.articles values (1, 'Durable queues', 'on PostgreSQL', "
                 "true), (2, 'Queue drafts', 'not yet', false)")
    module.index.ensure()
    with module.app:
        job = module.app.backfills["articles.search"].start()
    with running(module.app):
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (job.id,)) == "succeeded", "the reindex")
    assert [hit for hit, _ in module.index.search("durable queue")] == ["1"]


@pytest.mark.slow
def test_sigkill_mid_reindex_resumes_at_the_batch_in_flight(
        db_dsn: str, conn: psycopg.Connection[Any], tmp_path: Any) -> None:
    from examples.reindex import app as module

    module.app.pools.given = db_dsn
    conn.execute(module.ARTICLES)
    conn.execute("truncate public.articles")
    conn.execute("insert into public.articles select i, 'title ' || i, 'body ' || i, "
                 "mod(i, 7) <> 0 from generate_series(1, 2000) i")
    module.index.ensure()
    conn.execute("insert into public.article_search (id, body) values ('1600', 'stale')")
    worker_args = ("examples.reindex.app:app", "--queue", "default", "--lease", "2",
                   "--poll-interval", "0.2", "--concurrency", "1")
    with psycopg.connect(db_dsn) as holder, spawner(db_dsn, tmp_path, "worker") as start:
        # the fourth batch (ids 1501..2000, 500 a batch) blocks on the row the test holds
        holder.execute("select 1 from public.article_search where id = '1600' for update")
        with module.app:
            job = module.app.backfills["articles.search"].start()
        first = start(*worker_args)
        wait_for_lock_wait(conn, 'insert into "public"."article_search"%',
                           "three batches stored, the fourth waiting for the test's row lock")
        stored = conn.execute("select name, created_at from jobs.step where job_id = %s "
                              "and name like 'batch-%%' order by ordinal", (job.id,)).fetchall()
        assert [n for n, _ in stored] == ["batch-1", "batch-2", "batch-3"]
        written = dict(conn.execute("select id, xmin::text from public.article_search "
                                    "where id::integer <= 1500").fetchall())
        first.kill()
        holder.rollback()
        kill_and_wait_sessions(conn, first)
        second = start(*worker_args)
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (job.id,)) == "succeeded", "the reindex on the second worker")
        second.kill()
    published = {str(i) for i in range(1, 2001) if i % 7 != 0}
    ids = [r[0] for r in conn.execute("select id from public.article_search")]
    assert len(ids) == len(published) and set(ids) == published, "every document exactly once"
    assert scalar(conn, "select body from public.article_search where id = '1600'") == \
        "body 1600", "the held batch was written by the resumed run"
    assert dict(conn.execute("select id, xmin::text from public.article_search "
                             "where id::integer <= 1500").fetchall()) == written, \
        "the three stored batches were not written again"
    assert conn.execute("select name, created_at from jobs.step where job_id = %s and name "
                        "in ('batch-1', 'batch-2', 'batch-3') order by ordinal",
                        (job.id,)).fetchall() == stored
    assert scalar(conn, "select attempt from jobs.job where id = %s", (job.id,)) == 2
    assert conn.execute("select status, rows_done from jobs.backfills('default') "
                        "where name = 'articles.search'").fetchone() == ("completed", 2000)
