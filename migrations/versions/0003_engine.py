"""Schema version 3: engine.

Revision ID: sqljobs_0003
Revises: sqljobs_0002

What it does, its locks and whether workers drain: its SQL's header.
"""

from __future__ import annotations

from alembic import op

import sqljobs.alembic

revision = "sqljobs_0003"
down_revision = "sqljobs_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    sqljobs.alembic.apply(op, 3)


def downgrade() -> None:
    sqljobs.alembic.downgrade(op)
