"""`sqljobs migrate`: apply sqljobs' own Alembic revisions to a database, standalone."""

from __future__ import annotations

import io
from typing import TextIO

from alembic import command
from alembic.config import Config
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import URL

from sqljobs._schema.resources import migrations_dir


def sqlalchemy_url(dsn: str) -> str:
    """A libpq DSN (URL or key=value form) as a SQLAlchemy URL on the psycopg 3 driver.

    Every connection parameter travels in the query string, which the psycopg dialect
    hands to libpq as is: socket directories and options survive the trip.
    """
    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    url = URL.create("postgresql+psycopg", query=params)
    return url.render_as_string(hide_password=False)


def alembic_config(dsn: str, output: TextIO | None = None) -> Config:
    config = Config(output_buffer=output) if output is not None else Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Alembic reads the ini-style options with %-interpolation.
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    return config


def upgrade(dsn: str, revision: str = "sqljobs@head") -> None:
    """Bring the database at `dsn` to `revision` (by default the newest)."""
    command.upgrade(alembic_config(dsn), revision)


def render_sql(dsn: str = "postgresql://", revision: str = "sqljobs@head") -> str:
    """The upgrade as a SQL script, without touching a database (`alembic --sql`)."""
    buffer = io.StringIO()
    command.upgrade(alembic_config(dsn, buffer), revision, sql=True)
    return buffer.getvalue()
