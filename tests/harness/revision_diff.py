"""What the next schema revision must carry: sql/ against the chain of revisions.

    python -m tests.harness.revision_diff [--dsn postgresql://postgres@127.0.0.1/postgres]

Installs the chain of revisions (migrations/versions/*.sql) and sql/ into two scratch
databases next to the admin DSN, then prints, as SQL to paste into the next revision:
every function whose definition differs or that sql/ adds (`create or replace`, from
pg_get_functiondef; a changed signature prints as a new function), every function the
chain has and sql/ lacks (as a comment: a released function is dropped only once no
old worker calls it), and, as comments, the other catalog rows that differ (columns,
indexes, types, constraints, comments), whose DDL a person writes. Prints nothing when
the chain already equals sql/ (then tests/test_migrations.py passes).
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from sqljobs.schema import migrate
from tests.harness.schema import catalog_snapshot, run_sql_script
from tests.harness.server import make_dsn

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def scratch(admin_dsn: str, label: str) -> Iterator[str]:
    name = f"sqljobs_revision_diff_{label}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        yield make_dsn(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(name)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.revision_diff",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    with scratch(args.dsn, "chain") as chain_dsn, scratch(args.dsn, "source") as source_dsn:
        migrate.upgrade(chain_dsn)
        for path in sorted((ROOT / "sql").glob("[0-9][0-9]_*.sql")):
            run_sql_script(source_dsn, path)
        chain, source = catalog_snapshot(chain_dsn), catalog_snapshot(source_dsn)
    old = {row[0]: row[1] for row in chain["functions"]}
    new = {row[0]: row[1] for row in source["functions"]}
    out: list[str] = []
    for signature, definition in new.items():
        if old.get(signature) != definition:
            out.append(f"-- {'changed' if signature in old else 'new'}: {signature}\n"
                       f"{definition.rstrip()};\n")
    for signature in old.keys() - new.keys():
        out.append(f"-- sql/ no longer has {signature} (drop it only once no worker calls it)\n")
    for kind in source:
        if kind == "functions":
            continue
        for row in sorted(set(source[kind]) - set(chain[kind]), key=str):
            out.append(f"-- {kind} to add or change: {row}\n")
        for row in sorted(set(chain[kind]) - set(source[kind]), key=str):
            out.append(f"-- {kind} only in the chain: {row}\n")
    sys.stdout.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
