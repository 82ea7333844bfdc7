"""Schema version 1: install the sqljobs schema (jobs.*): tables, types, indexes, functions.

Revision ID: sqljobs_0001
Revises:
Create Date: 2026-12-02

Released with sqljobs 0.1.0; its SQL (0001_install.sql) is frozen.
Locks: creates new objects only; takes no lock on existing application tables.
Workers: none run before this revision.
"""

from __future__ import annotations

from alembic import op

import sqljobs.alembic

revision = "sqljobs_0001"
down_revision = None
branch_labels = ("sqljobs",)
depends_on = None


def upgrade() -> None:
    sqljobs.alembic.apply(op, 1)


def downgrade() -> None:
    sqljobs.alembic.downgrade(op)
