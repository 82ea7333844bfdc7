"""Installing the schema (docs/howto-alembic.md): every path gives the same `jobs` schema.

* every Alembic revision in turn (`sqljobs._schema.migrate.upgrade`) equals running
  `sql/*.sql`, the source, directly (so upgrading from any release equals a fresh install);
* installing twice changes nothing;
* `sqljobs migrate --sql` renders an offline script that gives the same schema;
* host applications: `sqljobs migrate --dsn`, our version location in a host's
  `alembic.ini`, and `sqljobs.alembic.upgrade(op)` from a host's own revision.

Each test makes its own empty databases (`new_database`); schemas are compared through
the catalogs always, and through a normalised `pg_dump --schema-only -n jobs` whenever a
pg_dump able to dump the server is at hand.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tools.catalog import catalog_snapshot
from typer.testing import CliRunner

import sqljobs.alembic
from sqljobs._cli import app as cli_app
from sqljobs._schema import migrate
from sqljobs._version import SCHEMA_REVISION, SCHEMA_VERSION
from tests.harness.schema import find_pg_dump, run_sql_script, schema_dump, server_major

ROOT = Path(__file__).resolve().parents[1]
SQL_FILES = sorted((ROOT / "sql").glob("[0-9][0-9]_*.sql"))
NewDatabase = Callable[[], str]


def install_from_source(dsn: str) -> None:
    """What any client can do without Python: run sql/*.sql in order."""
    assert SQL_FILES, "sql/ holds no install files"
    for path in SQL_FILES:
        run_sql_script(dsn, path)


@dataclass(frozen=True)
class Schema:
    catalog: dict[str, list[tuple[Any, ...]]]
    dump: str | None  # None when no pg_dump here can dump this server


def describe(dsn: str) -> Schema:
    pg_dump = find_pg_dump(server_major(dsn))
    return Schema(catalog_snapshot(dsn), schema_dump(pg_dump, dsn) if pg_dump else None)


@pytest.fixture(scope="module")
def source_schema(module_new_database: NewDatabase) -> Schema:
    """The schema `sql/*.sql` makes when run directly: what every path must equal."""
    dsn = module_new_database()
    install_from_source(dsn)
    schema = describe(dsn)
    assert len(schema.catalog["functions"]) > 20, "the source install holds too few functions"
    return schema


def assert_same_schema(expected: Schema, actual_dsn: str) -> None:
    actual = describe(actual_dsn)
    for kind in expected.catalog:
        assert actual.catalog[kind] == expected.catalog[kind], f"{kind} differ"
    if expected.dump is not None and actual.dump is not None:
        diff = "".join(difflib.unified_diff(expected.dump.splitlines(True),
                                            actual.dump.splitlines(True),
                                            "expected", "actual", n=2))
        assert not diff, f"pg_dump --schema-only -n jobs differs:\n{diff[:4000]}"


def scalar(dsn: str, query: str) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0]


def column(dsn: str, query: str) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [row[0] for row in conn.execute(query).fetchall()]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SQLJOBS_DSN", "DATABASE_URL", "PYTHONPATH")}
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    return env


# -- the revision equals the source -----------------------------------------------------

def test_migration_install_equals_the_sql_source(new_database: NewDatabase,
                                                 source_schema: Schema) -> None:
    migrated = new_database()
    migrate.upgrade(migrated)
    assert_same_schema(source_schema, migrated)
    assert scalar(migrated, "select jobs.schema_version()") == SCHEMA_VERSION
    assert column(migrated, "select version_num from sqljobs_alembic_version") == [
        SCHEMA_REVISION]


def test_installing_twice_changes_nothing(new_database: NewDatabase) -> None:
    dsn = new_database()
    migrate.upgrade(dsn)
    first = describe(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('twice', 'k1', '{\"a\": 1}')")

    migrate.upgrade(dsn)            # Alembic: already at head, a no-op
    install_from_source(dsn)        # the SQL itself, run again over a live install
    migrate.upgrade(dsn, "heads")

    assert_same_schema(first, dsn)
    assert scalar(dsn, "select count(*) from jobs.job where key = 'k1'") == 1
    assert column(dsn, "select version_num from sqljobs_alembic_version") == [SCHEMA_REVISION]


# -- offline rendering --------------------------------------------------------------------

def test_offline_sql_gives_the_same_schema(new_database: NewDatabase, tmp_path: Path,
                                           source_schema: Schema) -> None:
    result = CliRunner().invoke(cli_app, ["migrate", "--sql"])
    assert result.exit_code == 0, result.output
    script = result.output
    assert "create or replace function jobs.claim(" in script
    assert "\\:" not in script, "bind-parameter escapes leaked into the rendered SQL"
    rendered = tmp_path / "install.sql"
    rendered.write_text(script, encoding="utf-8")

    offline = new_database()
    run_sql_script(offline, rendered)
    assert_same_schema(source_schema, offline)
    assert column(offline, "select version_num from sqljobs_alembic_version") == [
        SCHEMA_REVISION]


# -- host applications --------------------------------------------------------------------

def test_standalone_cli_installs_the_schema(new_database: NewDatabase) -> None:
    dsn = new_database()
    script = Path(sys.executable).with_name("sqljobs")
    assert script.is_file(), f"the sqljobs console script is not installed next to {sys.executable}"
    out = subprocess.run([str(script), "migrate", "--dsn", dsn], capture_output=True, text=True,
                         timeout=300, env=clean_env())
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"schema version {SCHEMA_VERSION}" in out.stdout
    assert scalar(dsn, "select jobs.schema_version()") == SCHEMA_VERSION


HOST_ENV_PY = '''
from alembic import context
from sqlalchemy import create_engine, pool

config = context.config


def run_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True,
                      dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()


run_offline() if context.is_offline_mode() else run_online()
'''

HOST_REVISION = '''
"""The host's own first revision: an orders table{extra_doc}."""

import sqlalchemy as sa
from alembic import op
{extra_import}
revision = "host_0001"
down_revision = None
branch_labels = ("host",)
depends_on = None


def upgrade() -> None:
    op.create_table("orders", sa.Column("id", sa.BigInteger, primary_key=True))
    {extra_upgrade}


def downgrade() -> None:
    {extra_downgrade}
    op.drop_table("orders")
'''


def make_host_project(root: Path, dsn: str, *, version_locations: str | None,
                      calls_sqljobs: bool) -> Path:
    """A throwaway host application with its own alembic.ini, env.py and one revision."""
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(HOST_ENV_PY, encoding="utf-8")
    revision = HOST_REVISION.format(
        extra_doc=", then the sqljobs schema" if calls_sqljobs else "",
        extra_import="import sqljobs.alembic\n" if calls_sqljobs else "",
        extra_upgrade="sqljobs.alembic.upgrade(op)" if calls_sqljobs else "",
        extra_downgrade="sqljobs.alembic.downgrade(op)" if calls_sqljobs else "",
    )
    (root / "migrations" / "versions" / "host_0001_orders.py").write_text(revision,
                                                                           encoding="utf-8")
    url = sqljobs.alembic.sqlalchemy_url(dsn).replace("%", "%%")
    ini = ["[alembic]", "script_location = %(here)s/migrations"]
    if version_locations is not None:
        # `path_separator = os` would split `sqljobs:_migrations/versions` at its colon.
        ini += ["path_separator = space", f"version_locations = {version_locations}"]
    ini += [f"sqlalchemy.url = {url}", ""]
    (root / "alembic.ini").write_text("\n".join(ini), encoding="utf-8")
    return root


def alembic(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "alembic", "-c", "alembic.ini", *args],
                         cwd=project, capture_output=True, text=True, timeout=300,
                         env=clean_env())
    assert out.returncode == 0, f"alembic {' '.join(args)} failed:\n{out.stdout}{out.stderr}"
    return out


def test_host_app_lists_our_version_location(new_database: NewDatabase, tmp_path: Path,
                                              source_schema: Schema) -> None:
    dsn = new_database()
    project = make_host_project(
        tmp_path / "hostapp", dsn, calls_sqljobs=False,
        version_locations="%(here)s/migrations/versions sqljobs:_migrations/versions")

    heads = alembic(project, "heads").stdout
    assert "host_0001" in heads and SCHEMA_REVISION in heads
    alembic(project, "upgrade", "heads")

    assert scalar(dsn, "select pg_catalog.to_regclass('public.orders') is not null") is True
    assert scalar(dsn, "select jobs.schema_version()") == SCHEMA_VERSION
    assert sorted(column(dsn, "select version_num from alembic_version")) == sorted(
        ["host_0001", SCHEMA_REVISION])
    assert_same_schema(source_schema, dsn)


def test_host_revision_calls_sqljobs_alembic_upgrade(new_database: NewDatabase, tmp_path: Path,
                                                     source_schema: Schema) -> None:
    dsn = new_database()
    project = make_host_project(tmp_path / "hostapp", dsn, version_locations=None,
                                calls_sqljobs=True)

    offline = alembic(project, "upgrade", "head", "--sql").stdout
    assert "create or replace function jobs.enqueue_many(" in offline
    assert "\\:" not in offline

    alembic(project, "upgrade", "head")
    assert scalar(dsn, "select pg_catalog.to_regclass('public.orders') is not null") is True
    assert scalar(dsn, "select jobs.schema_version()") == SCHEMA_VERSION
    assert column(dsn, "select version_num from alembic_version") == ["host_0001"]
    assert_same_schema(source_schema, dsn)

    alembic(project, "downgrade", "base")
    assert scalar(dsn, "select pg_catalog.to_regnamespace('jobs') is null") is True
    assert scalar(dsn, "select pg_catalog.to_regclass('public.orders') is null") is True


def test_version_location_with_newline_separator(new_database: NewDatabase,
                                                 tmp_path: Path) -> None:
    """The other separator that keeps `package:path` whole (`os` would split it)."""
    dsn = new_database()
    project = make_host_project(tmp_path / "hostapp", dsn, calls_sqljobs=False,
                                version_locations=None)
    ini = (project / "alembic.ini").read_text(encoding="utf-8")
    ini = ini.replace("[alembic]\n", textwrap.dedent("""\
        [alembic]
        path_separator = newline
        version_locations =
            %(here)s/migrations/versions
            sqljobs:_migrations/versions
        """))
    (project / "alembic.ini").write_text(ini, encoding="utf-8")
    alembic(project, "upgrade", "heads")
    assert scalar(dsn, "select jobs.schema_version()") == SCHEMA_VERSION
