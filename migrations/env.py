"""Alembic environment for running sqljobs' own revisions standalone.

`sqljobs migrate --dsn ...` points Alembic here. The version table is
`sqljobs_alembic_version` in the public schema, so it never collides with a host app's own
`alembic_version` when both run against one database.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

VERSION_TABLE = "sqljobs_alembic_version"

config = context.config
url = config.get_main_option("sqlalchemy.url")


def run_offline() -> None:
    # "named" keeps `%` as written (pyformat would double it in the rendered script).
    context.configure(url=url, literal_binds=True, dialect_opts={"paramstyle": "named"},
                      version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = create_engine(url or "", poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
