"""Install the sqljobs schema (jobs.*): tables, types, indexes and functions.

Revision ID: sqljobs_0001
Revises:
Create Date: 2026-12-02

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
    sqljobs.alembic.upgrade(op)


def downgrade() -> None:
    sqljobs.alembic.downgrade(op)
