"""`make revision [NAME=<slug>]`: write the unreleased schema revision from `sql/`.

    python -m tools.revision [--name SLUG] [--dsn ADMIN_DSN] [--check] [--root DIR]

A revision (`migrations/versions/NNNN_<slug>.sql`) is two parts:

1. its preamble, written by a person in `sql/upgrades/NNNN_<slug>.sql`: the header
   (what changes, how long it locks, whether workers drain) and the DDL an upgrade
   needs (tables, columns, indexes, types, renames), which no diff can write well;
2. below it, generated here: every function, view, trigger and comment that `sql/`
   has and the previous revision's schema does not have in the same form, as its
   source text in `sql/` (with the contract comment above it), in load order, and
   `select jobs.install_roles();` last. A function that differs only in what
   install_roles() sets (security definer) is not repeated.

With no --name, the newest revision is regenerated: it must not be released yet
(`migrations/versions/RELEASED`). With --name, when the newest is released, a new
revision N+1 is started: its preamble stub, its Alembic script, and the version bumps
(`sqljobs/_version.py`, `jobs.schema_version()` in `sql/00_schema.sql`). Either way
the result is checked: the chain of revisions installs exactly what `sql/` installs,
and what is missing (DDL for the preamble) is printed. --check writes nothing and
fails when the revision on disk is not what this would write (`make verify`, CI).
--root works on another copy of the tree (`sql/`, `migrations/versions/`,
`pyclient/sqljobs/_version.py`) than this checkout: how the tool's own test runs it.

Each statement of `sql/` is run in a transaction of its own on a scratch database, and
the catalog rows it wrote (by their xmin) say which objects it defines: that is how a
changed function is traced back to its text, including the functions
jobs.define_spec() writes (their statement is `select jobs.define_spec();`).
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from tools.catalog import catalog_snapshot, run_script
from tools.sqlsource import ROOT, Statement, source_statements

# Where each part lives, below a tree's root (this checkout's, unless --root).
VERSIONS = Path("migrations", "versions")
UPGRADES = Path("sql", "upgrades")
RELEASED = VERSIONS / "RELEASED"
VERSION_FILE = Path("pyclient", "sqljobs", "_version.py")
SCHEMA_FILE = Path("sql", "00_schema.sql")
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
GENERATED_BANNER = """
-- ===========================================================================
-- Generated from sql/ by `make revision`: every function, view, trigger and comment
-- that differs from the previous schema version, as sql/ writes it. Do not edit
-- below this line: edit sql/ and run `make revision` again.
-- ===========================================================================
"""

# Statements the generated part may carry; every other kind is DDL, for the preamble.
_GENERATED_KINDS = ("create or replace function", "create or replace view", "comment on",
                    "create trigger", "drop trigger", "select jobs.")

# The catalog rows each statement wrote: objects named as catalog_snapshot names them.
_TOUCHED = """
select 'function ' || p.oid::regprocedure::text from pg_catalog.pg_proc p
 where p.pronamespace = 'jobs'::regnamespace and p.xmin = pg_catalog.pg_current_xact_id()::xid
union all
select 'view ' || c.relname from pg_catalog.pg_class c
 where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('v', 'm')
   and c.xmin = pg_catalog.pg_current_xact_id()::xid
union all
select 'trigger ' || t.tgrelid::regclass::text || ' ' || t.tgname from pg_catalog.pg_trigger t
 where t.xmin = pg_catalog.pg_current_xact_id()::xid and not t.tgisinternal
union all
select 'comment ' || pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid)
  from pg_catalog.pg_description d where d.xmin = pg_catalog.pg_current_xact_id()::xid
"""


@dataclass(frozen=True)
class Revision:
    version: int
    slug: str
    root: Path = ROOT

    @property
    def stem(self) -> str:
        return f"{self.version:04d}_{self.slug}"

    @property
    def path(self) -> Path:
        return self.root / VERSIONS / f"{self.stem}.sql"

    @property
    def preamble(self) -> Path:
        return self.root / UPGRADES / f"{self.stem}.sql"


def revisions(root: Path = ROOT) -> list[Revision]:
    found = []
    for path in sorted((root / VERSIONS).glob("[0-9][0-9][0-9][0-9]_*.sql")):
        found.append(Revision(int(path.name[:4]), path.stem[5:], root))
    return found


def released(root: Path = ROOT) -> set[str]:
    return {line.split()[0] for line in (root / RELEASED).read_text().splitlines()
            if line.strip() and not line.startswith("#")}


@contextmanager
def scratch(admin_dsn: str, label: str) -> Iterator[str]:
    """A new empty database next to the admin DSN's, dropped afterwards."""
    from psycopg.conninfo import make_conninfo

    name = f"sqljobs_revision_{label}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(name)))


def install_chain(dsn: str, upto: int, root: Path = ROOT) -> None:
    """Revisions 1..upto, in turn (each is static SQL)."""
    for revision in revisions(root)[:upto]:
        run_script(dsn, revision.path)


def install_source(dsn: str, root: Path = ROOT) -> list[tuple[Statement, set[str]]]:
    """Run sql/ statement by statement; answer each with the objects it first defined."""
    seen: set[str] = set()
    traced: list[tuple[Statement, set[str]]] = []
    with psycopg.connect(dsn) as conn:
        for statement in source_statements(root):
            conn.execute(statement.text.encode())  # (bytes: no placeholder parsing)
            touched = {row[0] for row in conn.execute(_TOUCHED)}
            conn.commit()
            traced.append((statement, touched - seen))
            seen |= touched
    return traced


def object_facts(snapshot: dict[str, list[tuple[object, ...]]]) -> dict[str, object]:
    """What each generated object is, keyed as _TOUCHED names it; a function without
    the attribute install_roles() adds (security definer), which a revision sets anyway."""
    facts: dict[str, object] = {}
    for signature, definition, _config in snapshot["functions"]:
        facts[f"function {signature}"] = str(definition).replace(" SECURITY DEFINER\n", "")
    for name, definition in snapshot["views"]:
        facts[f"view {name}"] = definition
    for table, name, definition in snapshot["triggers"]:
        facts[f"trigger {table} {name}"] = definition
    for described, text in snapshot["comments"]:
        facts[f"comment {described}"] = text
    return facts


def generated_part(traced: list[tuple[Statement, set[str]]], changed: set[str],
                   root: Path = ROOT) -> str:
    """The statements that define a changed object, in load order, under file banners."""
    chosen: list[Statement] = []
    for i, (statement, defines) in enumerate(traced):
        if not statement.head.startswith(_GENERATED_KINDS):
            continue
        wanted = bool(defines & changed) or statement.text.strip() == "select jobs.install_roles();"
        if not wanted and statement.head.startswith("drop trigger") and i + 1 < len(traced):
            following, its_defines = traced[i + 1]
            wanted = following.head.startswith("create trigger") and bool(its_defines & changed)
        if wanted:
            chosen.append(statement)
    parts: list[str] = [GENERATED_BANNER]
    current: Path | None = None
    for statement in chosen:
        if statement.path != current:
            current = statement.path
            parts.append(f"\n-- {'=' * 3} {current.relative_to(root)} {'=' * 3}\n")
        parts.append("\n" + statement.source + "\n")
    return "".join(parts)


def differences(want: dict[str, list[tuple[object, ...]]],
                have: dict[str, list[tuple[object, ...]]]) -> list[str]:
    """What the upgraded catalog (`have`) lacks or has beyond a fresh install (`want`)."""
    lines: list[str] = []
    for kind in want:
        for row in sorted(set(want[kind]) - set(have[kind]), key=str):
            lines.append(f"missing {kind}: {str(row)[:300]}")
        for row in sorted(set(have[kind]) - set(want[kind]), key=str):
            lines.append(f"extra {kind}: {str(row)[:300]}")
    return lines


def build(revision: Revision, admin_dsn: str) -> tuple[str, list[str]]:
    """The revision's text, and what its upgrade still lacks (empty: it is complete)."""
    root = revision.root
    if not revision.preamble.exists():
        raise SystemExit(f"{revision.preamble.relative_to(root)} is missing: a revision's "
                         "preamble (its header and DDL) is written by hand")
    with scratch(admin_dsn, "chain") as chain_dsn, scratch(admin_dsn, "source") as source_dsn:
        install_chain(chain_dsn, revision.version - 1, root)
        traced = install_source(source_dsn, root)
        before, after = catalog_snapshot(chain_dsn), catalog_snapshot(source_dsn)
    old, new = object_facts(before), object_facts(after)
    changed = {key for key, fact in new.items() if old.get(key) != fact}
    text = revision.preamble.read_text(encoding="utf-8").rstrip("\n") + "\n" + \
        generated_part(traced, changed, root)
    with scratch(admin_dsn, "upgraded") as upgraded_dsn:
        install_chain(upgraded_dsn, revision.version - 1, root)
        with psycopg.connect(upgraded_dsn, autocommit=True) as conn:
            try:
                conn.execute(text.encode())
            except psycopg.Error as error:
                return text, [f"the revision does not run: {error}"]
        lacking = differences(after, catalog_snapshot(upgraded_dsn))
    return text, lacking


def start_revision(slug: str, root: Path = ROOT) -> Revision:
    """Revision N+1: its preamble stub and Alembic script, and the version bumps."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", slug):
        raise SystemExit(f"NAME must be a lower-case slug (letters, digits, _), got {slug!r}")
    previous = revisions(root)[-1]
    revision = Revision(previous.version + 1, slug, root)
    revision.preamble.parent.mkdir(parents=True, exist_ok=True)
    revision.preamble.write_text(
        f"-- sqljobs schema version {revision.version} ({slug.replace('_', ' ')}): upgrades "
        f"version {previous.version} in place.\n"
        f"-- Revision sqljobs_{revision.version:04d}. The source of every function below is "
        "sql/.\n--\n-- What changes, and why: ...\n"
        "-- Locks: ... Workers: need not drain / must drain.\n--\n"
        "-- The DDL an upgrade needs (tables, columns, indexes, types) goes here by hand;\n"
        "-- the functions, views, triggers and comments are generated below it.\n",
        encoding="utf-8")
    script = previous.path.with_suffix(".py").read_text(encoding="utf-8")
    script = re.sub(r'^revision = "sqljobs_\d+"', f'revision = "sqljobs_{revision.version:04d}"',
                    script, flags=re.M)
    script = re.sub(r'^down_revision = "sqljobs_\d+"',
                    f'down_revision = "sqljobs_{previous.version:04d}"', script, flags=re.M)
    script = re.sub(r"apply\(op, \d+\)", f"apply(op, {revision.version})", script)
    script = re.sub(r'^"""(.|\n)*?"""', f'"""Schema version {revision.version}: '
                    f'{slug.replace("_", " ")}.\n\nRevision ID: sqljobs_{revision.version:04d}'
                    f'\nRevises: sqljobs_{previous.version:04d}\n\nWhat it does, its locks and '
                    'whether workers drain: its SQL\'s header.\n"""', script, count=1)
    revision.path.with_suffix(".py").write_text(script, encoding="utf-8")
    _bump(root, VERSION_FILE, r"SCHEMA_VERSION = \d+", f"SCHEMA_VERSION = {revision.version}")
    _bump(root, VERSION_FILE, r'SCHEMA_REVISION = "sqljobs_\d+"',
          f'SCHEMA_REVISION = "sqljobs_{revision.version:04d}"')
    # (jobs.schema_floor() is written the same way: bump only jobs.schema_version())
    _bump(root, SCHEMA_FILE,
          r"(create or replace function jobs\.schema_version\(\)[^$]*as \$\$ select )\d+( \$\$;)",
          rf"\g<1>{revision.version}\g<2>")
    return revision


def _bump(root: Path, path: Path, pattern: str, replacement: str) -> None:
    text = (root / path).read_text(encoding="utf-8")
    new, count = re.subn(pattern, replacement, text)
    if count != 1:
        raise SystemExit(f"{path}: expected one match of {pattern!r}")
    (root / path).write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.revision", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", help="start revision N+1 with this slug (the newest is "
                                       "released); without it, regenerate the newest")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="an admin DSN for scratch databases")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; fail when the revision on disk is stale")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the tree to work on (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    newest = revisions(root)[-1]
    is_released = newest.path.name in released(root)
    if args.name and not args.check:
        if not is_released:
            if args.name != newest.slug:
                raise SystemExit(f"{newest.path.name} is not released yet: regenerate it "
                                 "(no NAME), or release it first")
        else:
            newest = start_revision(args.name, root)
            is_released = False
    if is_released:
        if args.check:
            print(f"{newest.path.name} is released (frozen); nothing to regenerate")
            return 0
        raise SystemExit(f"{newest.path.name} is released: start the next one with "
                         "`make revision NAME=<slug>`")
    text, lacking = build(newest, args.dsn)
    if args.check:
        if not newest.path.exists() or newest.path.read_text(encoding="utf-8") != text:
            print(f"{newest.path.relative_to(root)} is stale: run `make revision`",
                  file=sys.stderr)
            return 1
    else:
        newest.path.write_text(text, encoding="utf-8")
        print(f"wrote {newest.path.relative_to(root)} ({text.count(chr(10))} lines)")
    for line in lacking:
        print(line, file=sys.stderr)
    if lacking:
        print(f"the upgrade lacks the above: add its DDL to "
              f"{newest.preamble.relative_to(root)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
