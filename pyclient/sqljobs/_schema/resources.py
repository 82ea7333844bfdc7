"""Where the packaged Alembic revisions live, and which schema version each installs.

`sqljobs/_migrations` is a symlink to the repository's top-level `migrations/`; the
wheel stores its contents in its place, so one path works from a wheel, an editable
install and a checkout. It sits at the top of the package so that
`sqljobs:_migrations/versions` is the version location hosts write.

A revision is two files in `migrations/versions/`: `NNNN_<slug>.py` (Alembic's) and
`NNNN_<slug>.sql`, the static SQL that brings schema version N-1 to N (0001: the whole
schema). `jobs.schema_version()` answers N once it ran (docs/design/schema-upgrades.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqljobs._schema.citus import framed

_PACKAGE = Path(__file__).resolve().parent.parent  # the sqljobs package

# What a host app writes in `version_locations` (Alembic resolves package:path).
VERSION_LOCATION_RESOURCE = "sqljobs:_migrations/versions"


def migrations_dir() -> Path:
    """The Alembic environment directory (holds `env.py` and `versions/`)."""
    return _PACKAGE / "_migrations"


def versions_dir() -> Path:
    """The version location directory, as a filesystem path."""
    return migrations_dir() / "versions"


@dataclass(frozen=True, slots=True)
class Revision:
    """One schema version's revision: its Alembic id and its SQL."""

    version: int
    path: Path

    @property
    def id(self) -> str:
        return f"sqljobs_{self.version:04d}"

    def sql(self) -> str:
        """The revision's own SQL, as released (its checksum is frozen)."""
        return self.path.read_text(encoding="utf-8")

    def script(self) -> str:
        """What applying the revision runs: the revision's SQL inside the Citus guard."""
        return framed(self.sql())


def revisions() -> list[Revision]:
    """Every revision this package ships, oldest first (version 1, 2, ...)."""
    found = [Revision(int(path.name[:4]), path)
             for path in sorted(versions_dir().glob("[0-9][0-9][0-9][0-9]_*.sql"))]
    if not found:
        raise FileNotFoundError(f"sqljobs is installed without its revisions ({versions_dir()})")
    if [r.version for r in found] != list(range(1, len(found) + 1)):
        names = [r.path.name for r in found]
        raise RuntimeError(f"sqljobs revisions are not numbered 1..n: {names}")
    return found


def revision(version: int) -> Revision:
    """The revision that installs schema version `version`."""
    found = revisions()
    if not 1 <= version <= len(found):
        raise ValueError(f"no sqljobs revision installs schema version {version} "
                         f"(this package has 1..{len(found)})")
    return found[version - 1]
