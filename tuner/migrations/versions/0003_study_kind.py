"""The kind of a study: ``tune``, or ``calibration`` (hop costs for the planner only).

Adds ``studies.kind``; every existing study was a tuning study and becomes
``tune``. A calibration study is never promoted and never warm-starts another.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ADD COLUMN with a default: SQLite needs no table copy for it
    op.add_column("studies", sa.Column("kind", sa.String(length=16), server_default="tune",
                                       nullable=False))
