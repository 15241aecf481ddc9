"""The baseline: the seven tables exactly as ``create_all`` made them before hoptune had migrations.

A database made by such a hoptune (its tables, no ``alembic_version``) is
stamped with this revision by ``hoptune db upgrade``, then upgraded from here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _when(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "locks",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=True),
        _when("expires_at"),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "nightly_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        _when("started_at", nullable=False),
        _when("finished_at"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        _when("created_at", nullable=False),
        _when("finished_at"),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("parallel", sa.Integer(), nullable=False),
        sa.Column("epochs", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("space", sa.JSON(), nullable=True),
        sa.Column("region_config", sa.JSON(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=True),
        sa.Column("data_hash", sa.String(length=64), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("minimize", sa.Integer(), nullable=False),
        sa.Column("best_trial_id", sa.Integer(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.Column("nightly_run_id", sa.Integer(), nullable=True),
        sa.Column("promotion", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["parent_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_studies_nightly_run_id", "studies", ["nightly_run_id"])
    op.create_index("ix_studies_region", "studies", ["region"])
    op.create_table(
        "nightly_regions",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("ingested", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        _when("started_at", nullable=False),
        _when("finished_at"),
        sa.ForeignKeyConstraint(["run_id"], ["nightly_runs.id"]),
        sa.PrimaryKeyConstraint("run_id", "region"),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        _when("created_at", nullable=False),
        _when("started_at"),
        _when("finished_at"),
        _when("updated_at", nullable=False),
        sa.Column("epochs_done", sa.Integer(), nullable=False),
        sa.Column("last_metric", sa.Float(), nullable=True),
        sa.Column("best_metric", sa.Float(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "number"),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
    )
    op.create_index("ix_trials_study_id", "trials", ["study_id"])
    op.create_table(
        "epochs",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("visit_order", sa.JSON(), nullable=False),
        sa.Column("metric", sa.Float(), nullable=True),
        _when("started_at", nullable=False),
        _when("finished_at"),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"]),
        sa.PrimaryKeyConstraint("trial_id", "epoch"),
    )
    op.create_table(
        "hops",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=True),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("interrupted", sa.Integer(), nullable=False),
        _when("queued_at", nullable=False),
        _when("started_at"),
        _when("finished_at"),
        sa.Column("samples", sa.Integer(), nullable=True),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("train_seconds", sa.Float(), nullable=True),
        sa.Column("load_seconds", sa.Float(), nullable=True),
        sa.Column("save_seconds", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("trial_id", "epoch", "position"),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"]),
    )
    op.create_index("ix_hops_trial_id", "hops", ["trial_id"])
