"""sqljobs.contrib.django against a real PostgreSQL, through the example project
(examples/django_shop, shown in docs/howto-django.md), run as a user runs it:
`manage.py test`, `manage.py migrate`, `manage.py check`, `manage.py sqljobs ...`.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from sqljobs._schema.resources import revisions

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "django_shop"
MIGRATIONS = ROOT / "pyclient" / "sqljobs" / "contrib" / "django" / "migrations"

def manage(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOP_DATABASE_URL": dsn,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "pyclient"), str(ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    env.pop("SQLJOBS_DSN", None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_one_django_migration_per_schema_revision() -> None:
    shipped = sorted(p.name for p in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert shipped == [f"{r.version:04d}_schema_v{r.version}.py" for r in revisions()], (
        "a new sqljobs schema revision needs its Django migration "
        "(sqljobs/contrib/django/migrations)")


def test_the_example_projects_tests_pass(pg_admin_dsn: str) -> None:
    # Django's runner makes (and drops) test_<NAME>: a name private to this session
    dsn = make_conninfo(pg_admin_dsn, dbname=f"djshop_{os.getpid()}_{secrets.token_hex(3)}")
    done = manage(dsn, "test", "shop", "--noinput", "-v", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ran 6 tests" in done.stderr and "\nOK" in done.stderr, done.stderr


def test_migrate_installs_the_schema_the_check_and_the_worker_watch_it(empty_db: str) -> None:
    checked = manage(empty_db, "check", "--database", "default")
    # migrations to apply: Django reports those; the check leaves migrate to fix it
    assert checked.returncode == 0 and "sqljobs" not in checked.stderr, checked.stderr
    refused = manage(empty_db, "sqljobs_worker", "--concurrency", "1")
    assert refused.returncode != 0
    assert "no sqljobs schema" in refused.stdout + refused.stderr

    migrated = manage(empty_db, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying sqljobs.0001_schema_v1... OK" in migrated.stdout
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select jobs.schema_version()").fetchone() == (
            len(revisions()),)
    checked = manage(empty_db, "check", "--database", "default")
    assert checked.returncode == 0 and "sqljobs" not in checked.stderr, checked.stderr

    with psycopg.connect(empty_db, autocommit=True) as conn:  # the schema lost behind
        conn.execute("drop schema jobs cascade")              # Django's back
    checked = manage(empty_db, "check", "--database", "default")
    assert checked.returncode != 0 and "sqljobs.E001" in checked.stderr, checked.stderr


def test_the_sqljobs_command_is_the_clis_own_and_leaves_migrate_to_django(
        empty_db: str) -> None:
    helped = manage(empty_db, "sqljobs", "worker", "--help")
    assert helped.returncode == 0 and "--concurrency" in helped.stdout, helped.stderr
    assert "manage.py sqljobs worker" in helped.stdout
    for role in ("scheduler", "relay"):
        helped = manage(empty_db, "sqljobs", role, "--help")
        assert helped.returncode == 0, helped.stderr
        assert f"manage.py sqljobs {role}" in helped.stdout
    refused = manage(empty_db, "sqljobs", "migrate")
    assert refused.returncode == 1
    assert "manage.py migrate" in refused.stderr
