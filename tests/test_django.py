"""sqljobs.contrib.django against a real PostgreSQL, through the example project
(examples/django_shop, shown in docs/howto-django.md), run as a user runs it:
`manage.py test`, `manage.py migrate`, `manage.py check`, `manage.py sqljobs ...`.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from sqljobs._schema.resources import revisions

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "django_shop"
MIGRATIONS = ROOT / "pyclient" / "sqljobs" / "contrib" / "django" / "migrations"

SAFETY_S = 120.0  # a process that never gets there fails the test instead of hanging it


def _env(dsn: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "SHOP_DATABASE_URL": dsn, **extra,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "pyclient"), str(ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    env.pop("SQLJOBS_DSN", None)
    return env


def manage(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=_env(dsn),
                          capture_output=True, text=True, timeout=600)


@contextmanager
def serving(dsn: str, *args: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    """`manage.py sqljobs <args>` running; on leaving, SIGTERM and a clean exit 0."""
    process = subprocess.Popen([sys.executable, "manage.py", "sqljobs", *args], cwd=PROJECT,
                               env=_env(dsn, **env), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        yield process
    except BaseException:
        process.kill()
        process.communicate(timeout=SAFETY_S)
        raise
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=SAFETY_S)
    assert process.returncode == 0, output


def wait_for(process: subprocess.Popen[str], dsn: str, query: str,
             params: tuple[Any, ...] = ()) -> Any:
    """Poll `query` until its first value is not None (the process still running)."""
    deadline = time.monotonic() + SAFETY_S
    with psycopg.connect(dsn, autocommit=True) as conn:
        while (row := conn.execute(query, params).fetchone()) is None or row[0] is None:
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, f"never observed: {query}"
            time.sleep(0.1)  # polling observed state
    return row[0]


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


def test_an_older_schema_is_refused_by_the_worker_and_migrate_upgrades_it(
        empty_db: str) -> None:
    *_, previous, latest = revisions()
    older = manage(empty_db, "migrate", "sqljobs", f"{previous.version:04d}_schema_v"
                   f"{previous.version}", "--noinput")
    assert older.returncode == 0, older.stderr
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select jobs.schema_version()").fetchone() == (previous.version,)

    refused = manage(empty_db, "sqljobs", "worker", "--concurrency", "1")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (f"this database has sqljobs schema version {previous.version}, but this client "
            f"needs {latest.version}; upgrade it with: manage.py migrate") in refused.stderr
    assert "sqljobs migrate" not in refused.stderr  # refused here: Django's migrate it is

    migrated = manage(empty_db, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    assert f"Applying sqljobs.{latest.version:04d}_schema_v{latest.version}... OK" in (
        migrated.stdout)
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select jobs.schema_version()").fetchone() == (latest.version,)


def test_the_scheduler_command_fires_the_declared_task(empty_db: str) -> None:
    assert manage(empty_db, "migrate", "--noinput").returncode == 0
    registered = ("select watermark from jobs.schedules()"
                  " where name = 'shop.unshipped_report'")
    leading = "select holder from jobs.lease where name = 'scheduler'"
    with serving(empty_db, "scheduler") as scheduler:
        wait_for(scheduler, empty_db, leading)  # serving: it leads, its task is written
        watermark = wait_for(scheduler, empty_db, registered)
    # The next 03:00 passes: a scheduler on the database clock a day on fires it (the
    # engine's test clock, for the schema owner: jobs.fake_now in the session options).
    later = (watermark + timedelta(days=1, minutes=1)).isoformat()
    with serving(empty_db, "scheduler", PGOPTIONS=f"-c jobs.fake_now={later}") as scheduler:
        fired = wait_for(scheduler, empty_db, "select min(id) from jobs.job_view"
                         " where name = 'shop.unshipped_report' and queue = 'shipping'")
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select state from jobs.job_view where id = %s",
                            (fired,)).fetchone() == ("ready",)
        assert conn.execute("select last_fired_at is not null from jobs.schedules()"
                            " where name = 'shop.unshipped_report'").fetchone() == (True,)
        assert conn.execute(leading).fetchone() == (None,)  # a clean stop released it


def test_the_relay_command_relays_a_staged_job(empty_db: str) -> None:
    assert manage(empty_db, "migrate", "--noinput").returncode == 0
    with psycopg.connect(empty_db, autocommit=True) as conn:
        [(staged,)] = conn.execute("select id from jobs.stage_many(%s)", (Jsonb([{
            "name": "shop.ship_order", "key": "order-1", "queue": "shipping",
            "payload": {"order_id": 1, "email": "ann@example.com"}}]),)).fetchall()
    with serving(empty_db, "relay", "--poll-interval", "0.2") as relay:
        job = wait_for(relay, empty_db, "select job_id from jobs.outbox"
                       " where id = %s and published_at is not null", (staged,))
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select name, key, state from jobs.job_view where id = %s",
                            (job,)).fetchone() == ("shop.ship_order", "order-1", "ready")
