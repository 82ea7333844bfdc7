"""Install the sqljobs schema from a host application's own Alembic history.

Either list our version location in your `alembic.ini` beside your own::

    path_separator = space
    version_locations = %(here)s/migrations/versions sqljobs:_migrations/versions

(`sqljobs.alembic.version_location()` answers the same directory as a path;
`path_separator = os` would split `sqljobs:_migrations/versions` at its colon, `space`
or `newline` keep it whole, and without the line Alembic warns and splits on spaces),
or call this from one revision of your own::

    import sqljobs.alembic

    def upgrade() -> None:
        sqljobs.alembic.upgrade(op)

The install is static SQL, so `alembic upgrade head --sql` renders it offline.
"""

from __future__ import annotations

from typing import Protocol

import sqlalchemy as sa

from sqljobs.schema.resources import install_sql, versions_dir


class _Operations(Protocol):
    def execute(self, sqltext: sa.TextClause) -> object: ...


def install_statement() -> sa.TextClause:
    """The whole install as one text clause, safe from bind-parameter parsing.

    PL/pgSQL is full of `:` (casts, `:=`) that `text()` would read as bind parameters;
    escaping each colon keeps the SQL byte-for-byte what `sql/` holds, online and in
    `--sql` output.
    """
    return sa.text(install_sql().replace(":", "\\:"))


def upgrade(op: _Operations) -> None:
    """Install (or re-install) the sqljobs schema inside the current migration."""
    op.execute(install_statement())


def downgrade(op: _Operations) -> None:
    """Remove the sqljobs schema and everything in it (jobs included)."""
    op.execute(sa.text("drop schema if exists jobs cascade"))


def version_location() -> str:
    """The directory to add to a host app's `version_locations`."""
    return str(versions_dir())
