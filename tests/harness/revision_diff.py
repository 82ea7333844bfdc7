"""What the next schema revision must carry: sql/ against the chain of revisions.

    python -m tests.harness.revision_diff [--dsn postgresql://postgres@127.0.0.1/postgres]
                                          [--since sqljobs_0001]

Installs the chain of revisions (migrations/versions/*.sql) and sql/ into two scratch
databases next to the admin DSN, then prints, as SQL to paste into the next revision:
every function whose definition differs or that sql/ adds (`create or replace`, from
pg_get_functiondef, new ones first; a changed signature prints as a new function; the
functions jobs.define_spec() writes are named, not printed), every function the chain
has and sql/ lacks (as a comment: a released function is dropped only once no old
worker calls it), the comments to set, and, as comments, the other catalog rows that
differ (columns, indexes, types, constraints), whose DDL a person writes. Prints nothing when
the chain already equals sql/ (then tests/test_migrations.py passes). With `--since REV`
the chain stops at REV: what the revision after REV must carry, to rewrite it while it is
unreleased.
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

# Functions jobs.define_spec() writes from the columns of jobs.job (sql/20_enqueue.sql):
# a revision that changes them calls it instead of repeating them.
MADE_BY_DEFINE_SPEC = {
    "jobs.spec_fields()", "jobs.spec_defaults()", "jobs.spec_problem_of(jsonb)",
    "jobs.spec_problem(jsonb)", "jobs.insert_jobs(jsonb,timestamp with time zone,bigint[])",
    "jobs.insert_batch(jsonb,text[],jsonb,timestamp with time zone)",
}


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


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
    parser.add_argument("--since", default="sqljobs@head",
                        help="the revision the chain stops at (default: the newest)")
    args = parser.parse_args(argv)
    with scratch(args.dsn, "chain") as chain_dsn, scratch(args.dsn, "source") as source_dsn:
        migrate.upgrade(chain_dsn, args.since)
        for path in sorted((ROOT / "sql").glob("[0-9][0-9]_*.sql")):
            run_sql_script(source_dsn, path)
        chain, source = catalog_snapshot(chain_dsn), catalog_snapshot(source_dsn)
    old = {row[0]: row[1] for row in chain["functions"]}
    new = {row[0]: row[1] for row in source["functions"]}
    out: list[str] = []
    # new functions first: a changed SQL-language function may call a new one, and its
    # body is checked when it is created
    for signature in sorted(new, key=lambda sig: (sig in old, sig)):
        if old.get(signature) == new[signature]:
            continue
        if signature in MADE_BY_DEFINE_SPEC:
            out.append(f"-- changed: {signature}: made by `select jobs.define_spec();`\n")
            continue
        out.append(f"-- {'changed' if signature in old else 'new'}: {signature}\n"
                   f"{new[signature].rstrip()};\n")
    for signature in old.keys() - new.keys():
        out.append(f"-- sql/ no longer has {signature} (drop it only once no worker calls it)\n")
    comments = dict(source["comments"])
    for described, text in sorted(set(source["comments"]) - set(chain["comments"])):
        out.append(f"comment on {described} is {literal(text)};\n")
    for kind in source:
        if kind in ("functions", "comments"):
            continue
        for row in sorted(set(source[kind]) - set(chain[kind]), key=str):
            out.append(f"-- {kind} to add or change: {row}\n")
        for row in sorted(set(chain[kind]) - set(source[kind]), key=str):
            out.append(f"-- {kind} only in the chain: {row}\n")
    for described in sorted(dict(chain["comments"]).keys() - comments.keys()):
        out.append(f"-- comment only in the chain: {described}\n")
    sys.stdout.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
