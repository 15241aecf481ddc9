"""How long the ``tune_step`` that created a trial worked before recording it.

Adds ``trials.proposal_seconds``: the seconds from that ``tune_step``'s start
to its recording of the trial (the optimizer's proposals and the reads before
them), the same for every trial of its batch. The planner's simulation holds
a worker that long for each ``tune_step`` that starts trials. Trials recorded
before this revision have none; the planner then measures the gap from the
hops as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a nullable ADD COLUMN: SQLite needs no table copy for it
    op.add_column("trials", sa.Column("proposal_seconds", sa.Float(), nullable=True))
