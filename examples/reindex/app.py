"""Index published articles for full-text search in PostgreSQL (no other service).

    sqljobs worker examples.reindex.app:app
    sqljobs backfills run articles.search --app examples.reindex.app:app
    python -c "from examples.reindex.app import index; print(index.search('durable queue'))"
"""

from __future__ import annotations

from typing import Any

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN

ARTICLES = """create table if not exists public.articles (id integer primary key,
  title text not null, body text not null, published boolean not null default true)"""

# A table with a generated tsvector (title ranks above body) and a GIN index on it.
index = sqljobs.PostgresSearchIndex(lambda: app.dsn, table="public.article_search",
                                    config="english")


def document_of(row: dict[str, Any]) -> sqljobs.Document | None:
    if not row["published"]:
        return None  # unpublished: removed from the index
    return sqljobs.Document(id=str(row["id"]), title=row["title"], body=row["body"])


app.reindex("articles.search", index=index, document_of=document_of, key="id", batch=500,
            source="select id, title, body, published from public.articles")
