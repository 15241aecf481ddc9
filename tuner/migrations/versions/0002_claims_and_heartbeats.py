"""Hop claims, worker heartbeats, shard takeovers, failures on hops, one running study per region.

Adds the ``workers`` and ``takeovers`` tables (new, empty), three columns of
``hops`` (``holder``, ``error``, ``errors``: existing rows get no holder and
no error), and a unique index on the running studies' regions. A database
that already has two running studies of one region cannot take that index:
the upgrade stops, naming them, and changes nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _when(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    # (printing the statements for a DBA, there is no database to look at)
    twice = [] if context.is_offline_mode() else op.get_bind().execute(sa.text(
        "SELECT region, count(*) FROM studies WHERE state = 'running' GROUP BY region "
        "HAVING count(*) > 1")).all()
    if twice:
        regions = ", ".join(f"{region} ({n})" for region, n in twice)
        raise RuntimeError(f"schema 0002 allows one running study per region; these have "
                           f"more: {regions}. Finish or fail the older ones, then upgrade")
    op.create_table(
        "takeovers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        _when("at"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_takeovers_queue", "takeovers", ["queue"])
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("shards", sa.JSON(), nullable=True),
        sa.Column("info", sa.JSON(), nullable=True),
        _when("started_at"),
        _when("heartbeat_at"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_workers_heartbeat_at", "workers", ["heartbeat_at"])
    op.create_index("ix_workers_name", "workers", ["name"])
    # plain ADD COLUMN: SQLite needs no table copy for it
    op.add_column("hops", sa.Column("holder", sa.String(length=255), nullable=True))
    op.add_column("hops", sa.Column("error", sa.Text(), nullable=True))
    op.add_column("hops", sa.Column("errors", sa.Integer(), server_default="0",
                                    nullable=False))
    op.create_index("one_running_study_per_region", "studies", ["region"], unique=True,
                    sqlite_where=sa.text("state = 'running'"),
                    postgresql_where=sa.text("state = 'running'"))
