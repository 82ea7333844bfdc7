"""The released-schema policy (docs/design/schema-upgrades.md), held by tests.

* a released revision is frozen: its SQL has the checksum migrations/versions/RELEASED
  recorded when it was released;
* revisions are numbered 1..n, each an Alembic file and a SQL file; the newest is the
  version this client needs, and the one sql/ (the source) declares;
* every revision N >= 2 upgrades a database at N - 1 in place: jobs that were ready,
  running under a claim, parked in a durable sleep and staged in the outbox before it
  all finish after it, through the same claims and tokens (the catalog of the result
  equals a fresh install of sql/: tests/test_migrations.py);
* `sqljobs.alembic.upgrade(op, to=..., since=...)` runs exactly the revisions asked for.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import sqljobs.alembic
from sqljobs._schema import migrate
from sqljobs._schema.resources import revisions
from sqljobs._version import SCHEMA_REVISION, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ROOT / "migrations" / "versions"
NewDatabase = Callable[[], str]


def released() -> dict[str, str]:
    """revision file -> sha256, from migrations/versions/RELEASED."""
    rows = [line.split() for line in (VERSIONS / "RELEASED").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return {row[0]: row[1] for row in rows}


def test_released_revisions_are_frozen() -> None:
    frozen = released()
    assert "0001_install.sql" in frozen, "schema version 1 is released"
    for name, checksum in frozen.items():
        actual = hashlib.sha256((VERSIONS / name).read_bytes()).hexdigest()
        assert actual == checksum, (
            f"{name} was released and must not change; put the change in a new revision "
            f"(docs/design/schema-upgrades.md)")


def test_revisions_are_numbered_and_the_newest_is_the_clients() -> None:
    found = revisions()
    assert [r.version for r in found] == list(range(1, len(found) + 1))
    for r in found:
        script = r.path.with_suffix(".py")
        assert script.is_file(), f"{r.path.name} has no Alembic script {script.name}"
        text = script.read_text(encoding="utf-8")
        assert f'revision = "{r.id}"' in text
        previous = "None" if r.version == 1 else f'"sqljobs_{r.version - 1:04d}"'
        assert f"down_revision = {previous}" in text
        assert f"sqljobs.alembic.apply(op, {r.version})" in text
    assert found[-1].version == SCHEMA_VERSION and found[-1].id == SCHEMA_REVISION
    source = (ROOT / "sql" / "00_schema.sql").read_text(encoding="utf-8")
    declared = re.search(r"function jobs\.schema_version\(\).*?select (\d+)", source,
                         re.S | re.I)
    assert declared and int(declared.group(1)) == SCHEMA_VERSION, (
        "sql/00_schema.sql's jobs.schema_version() must answer the newest revision's version")
    for r in found[1:]:
        sets = re.search(r"function jobs\.schema_version\(\).*?select (\d+)", r.sql(),
                         re.S | re.I)
        assert sets and int(sets.group(1)) == r.version, (
            f"{r.path.name} must set jobs.schema_version() to {r.version}")


class _RecordingOps:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def execute(self, sqltext: sa.TextClause) -> object:
        self.statements.append(sqltext.text)
        return None


def test_alembic_upgrade_runs_exactly_the_versions_asked_for() -> None:
    newest = len(revisions())
    ops = _RecordingOps()
    sqljobs.alembic.upgrade(ops)
    assert len(ops.statements) == newest
    ops = _RecordingOps()
    sqljobs.alembic.upgrade(ops, to=1)
    assert len(ops.statements) == 1 and "create table if not exists jobs.job" in ops.statements[0]
    ops = _RecordingOps()
    sqljobs.alembic.upgrade(ops, since=newest, to=newest)
    assert ops.statements == []
    for since, to in ((2, 1), (0, newest + 1), (-1, 1)):
        with pytest.raises(ValueError, match="cannot upgrade"):
            sqljobs.alembic.upgrade(_RecordingOps(), to=to, since=since)


# -- upgrading a database with work in flight ---------------------------------------------

def _scalar(conn: psycopg.Connection[Any], sql: str, *args: Any) -> Any:
    row = conn.execute(sql, args).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


@pytest.mark.parametrize("version", [r.version for r in revisions()[1:]])
def test_an_upgrade_keeps_work_in_flight(new_database: NewDatabase, version: int) -> None:
    dsn = new_database()
    migrate.upgrade(dsn, f"sqljobs_{version - 1:04d}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _scalar(conn, "select jobs.schema_version()") == version - 1
        conn.execute("select jobs.enqueue('up.job', 'held')")
        conn.execute("select jobs.enqueue('up.job', 'sleeper')")
        conn.execute("select jobs.enqueue('up.job', 'ready')")
        running = conn.execute(
            "select id, claim from jobs.claim('{default}', 'w-old', 2, 300)").fetchall()
        assert len(running) == 2
        (held_id, held_claim), (sleeper_id, sleeper_claim) = running
        parked = conn.execute("select parked from jobs.step_sleep(%s, %s, 'nap', null, 0.5)",
                              (sleeper_id, sleeper_claim)).fetchone()
        assert parked == (True,)
        conn.execute("select jobs.stage('up.job', 'staged')")
        leader_token = _scalar(conn, "select jobs.leader_acquire('scheduler', 's-old', 300)")
        counts_before = _scalar(conn, "select count(*) from jobs.job")

    migrate.upgrade(dsn, f"sqljobs_{version:04d}")  # to this revision

    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _scalar(conn, "select jobs.schema_version()") == version
        assert _scalar(conn, "select count(*) from jobs.job") == counts_before
        # the run that held its claim across the upgrade settles with the same token
        conn.execute("select jobs.ack(%s, %s, '\"done\"')", (held_id, held_claim))
        # the scheduler's leadership carries over: its holder renews under its token
        assert _scalar(conn, "select jobs.leader_acquire('scheduler', 's-old', 300)") == (
            leader_token)
        assert _scalar(conn, "select jobs.leader_acquire('scheduler', 's-new', 300)") is None
        # the outbox row is published, the ready job and the sleeper (once due) run
        assert _scalar(conn, "select published from jobs.relay(10, 'r', 30)") == 0
        assert _scalar(conn, "select published from jobs.relay(0, 'r', 30)") == 1
        conn.execute("select set_config('jobs.fake_now', %s, false)", (
            str(_scalar(conn, "select now() + interval '1 minute'")),))
        claimed = conn.execute(
            "select id, claim, key from jobs.claim('{default}', 'w-new', 10, 30)").fetchall()
        assert sorted(key for _, _, key in claimed) == ["ready", "sleeper", "staged"]
        for job_id, claim, _ in claimed:
            conn.execute("select jobs.ack(%s, %s)", (job_id, claim))
        states = dict(conn.execute("select key, state::text from jobs.job").fetchall())
        assert states == {"held": "succeeded", "sleeper": "succeeded",
                          "ready": "succeeded", "staged": "succeeded"}
        # a job made now has an id above every id made before the upgrade (revision 3
        # put the bucket in the id's low bits; the sequence goes on where it was)
        newest_before = _scalar(conn, "select max(id) from jobs.job")
        assert _scalar(conn, "select id from jobs.enqueue('up.job', 'after')") > newest_before
