"""`sqljobs migrate`: apply sqljobs' own Alembic revisions to a database, standalone."""

from __future__ import annotations

import io
from typing import TextIO

from alembic import command
from alembic.config import Config

from sqljobs._schema.resources import migrations_dir
from sqljobs.alembic import sqlalchemy_url


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
