"""Where the packaged SQL and Alembic revisions live.

`sqljobs/_sql` and `sqljobs/_migrations` are symlinks to the repository's top-level
`sql/` and `migrations/`; the wheel stores their contents in their place, so one path
works from a wheel, an editable install and a checkout. They sit at the top of the
package so that `sqljobs:_migrations/versions` is the version location hosts write.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # the sqljobs package

# What a host app writes in `version_locations` (Alembic resolves package:path).
VERSION_LOCATION_RESOURCE = "sqljobs:_migrations/versions"


def sql_dir() -> Path:
    """The directory of the install SQL (`00_schema.sql` ... `90_operator.sql`)."""
    return _PACKAGE / "_sql"


def migrations_dir() -> Path:
    """The Alembic environment directory (holds `env.py` and `versions/`)."""
    return _PACKAGE / "_migrations"


def versions_dir() -> Path:
    """The version location directory, as a filesystem path."""
    return migrations_dir() / "versions"


def sql_files() -> list[Path]:
    """The install SQL files in load order (their names are numbered)."""
    files = sorted(sql_dir().glob("[0-9][0-9]_*.sql"))
    if not files:
        raise FileNotFoundError(f"sqljobs is installed without its SQL files ({sql_dir()})")
    return files


def install_sql() -> str:
    """The whole install as one SQL script."""
    return "\n".join(path.read_text(encoding="utf-8") for path in sql_files())
