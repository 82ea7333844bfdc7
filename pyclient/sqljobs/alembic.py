"""Install and upgrade the sqljobs schema from a host application's own Alembic history.

Either list our version location in your `alembic.ini` beside your own, and every
sqljobs revision (one per schema version) joins your history::

    path_separator = space
    version_locations = %(here)s/migrations/versions sqljobs:_migrations/versions

(`sqljobs.alembic.version_location()` answers the same directory as a path;
`path_separator = os` would split `sqljobs:_migrations/versions` at its colon, `space`
or `newline` keep it whole, and without the line Alembic warns and splits on spaces),
or call this from revisions of your own, pinning the versions each one applies so that
it means the same thing whatever sqljobs release is installed later::

    import sqljobs.alembic

    def upgrade() -> None:                      # your revision that installs sqljobs
        sqljobs.alembic.upgrade(op, to=1)

    def upgrade() -> None:                      # a later one, after upgrading sqljobs
        sqljobs.alembic.upgrade(op, since=1, to=2)

Each schema version's SQL is static, so `alembic upgrade head --sql` renders it offline
(docs/design/schema-upgrades.md says what a revision may do while workers run).
"""

from __future__ import annotations

from typing import Protocol

import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict

from sqljobs._schema.resources import revision, revisions, versions_dir


class _Operations(Protocol):
    def execute(self, sqltext: sa.TextClause) -> object: ...


def sqlalchemy_url(dsn: str) -> str:
    """A libpq DSN (URL or key=value form) as a SQLAlchemy URL on the psycopg 3 driver,
    `postgresql+psycopg://`, the driver `conn=` needs of a SQLAlchemy session.

    Every connection parameter travels in the query string, which the psycopg dialect
    hands to libpq as is: socket directories and options survive the trip.
    """
    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    return sa.engine.URL.create("postgresql+psycopg", query=params).render_as_string(
        hide_password=False)


def statement(sql: str) -> sa.TextClause:
    """SQL as one text clause, safe from bind-parameter parsing.

    PL/pgSQL is full of `:` (casts, `:=`) that `text()` would read as bind parameters;
    escaping each colon keeps the SQL byte-for-byte what the revision holds, online and
    in `--sql` output.
    """
    return sa.text(sql.replace(":", "\\:"))


def apply(op: _Operations, version: int) -> None:
    """Run the revision that brings schema version `version - 1` to `version`."""
    op.execute(statement(revision(version).script()))


def upgrade(op: _Operations, to: int | None = None, since: int = 0) -> None:
    """Bring the schema from version `since` (0: none installed) to `to` (default: the
    newest this package knows), one revision at a time, inside the current migration."""
    newest = len(revisions())
    target = newest if to is None else to
    if not 0 <= since <= target <= newest:
        raise ValueError(f"cannot upgrade the sqljobs schema from version {since} to {to} "
                         f"(this package knows versions 1..{newest})")
    for version in range(since + 1, target + 1):
        apply(op, version)


def downgrade(op: _Operations) -> None:
    """Remove the sqljobs schema and everything in it (jobs included)."""
    op.execute(sa.text("drop schema if exists jobs cascade"))


def version_location() -> str:
    """The directory to add to a host app's `version_locations`."""
    return str(versions_dir())
