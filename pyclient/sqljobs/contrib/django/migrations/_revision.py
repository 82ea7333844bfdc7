"""What each of sqljobs' Django migrations is made of: one packaged schema revision.

Migration NNNN runs the SQL of the sqljobs revision that brings schema version N-1 to
N (after the Citus guard, sqljobs/_schema/citus.py), exactly as `sqljobs migrate` and
`sqljobs.alembic.upgrade(op)` do, inside Django's migration transaction. Each pins its
version, so it means the same thing whatever sqljobs release is installed later; a release
with a new schema version adds one (tests/test_django.py fails until it does).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from sqljobs._schema.resources import revision


def schema_revision(version: int) -> Any:
    """The operation that applies schema version `version`. Only the first is undone
    (by dropping the schema, jobs and all); a later version cannot be taken back."""
    # One statement list item, so Django runs the script as is (no SQL splitting).
    reverse: Any = (["drop schema if exists jobs cascade"] if version == 1 else None)
    return migrations.RunSQL([revision(version).script()], reverse_sql=reverse)
