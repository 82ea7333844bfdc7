"""Schema version 2: flow control (limits, leases, debounce, singleton, throttle).

Revision ID: sqljobs_0002
Revises: sqljobs_0001
Create Date: 2026-12-03

Upgrades version 1 in place (0002_flow_control.sql): new columns on jobs.job (no
rewrite), jobs.leader renamed jobs.lease, the tables jobs.limit, jobs.limit_start and
jobs.tenant_binding, the column jobs.event.tenant, new and changed functions. Locks:
jobs.job briefly (ACCESS EXCLUSIVE, for the columns and the swap of job_claimable_idx).
Workers: need not drain.
"""

from __future__ import annotations

from alembic import op

import sqljobs.alembic

revision = "sqljobs_0002"
down_revision = "sqljobs_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    sqljobs.alembic.apply(op, 2)


def downgrade() -> None:
    sqljobs.alembic.downgrade(op)
