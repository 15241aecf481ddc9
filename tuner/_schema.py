"""The study database's schema: its tables, and the small helpers every record module shares.

Tables: ``studies``, ``trials``, ``epochs`` and ``hops`` (a region's tuning
history), ``nightly_runs`` and ``nightly_regions`` (what each night did),
``locks`` (named locks with an expiry), ``workers`` (each worker process's
heartbeat: the liveness a hop's claim is judged by) and ``takeovers`` (shards
whose queue a live worker took over from a dead owner). Rows come back as plain dicts with
timezone-aware UTC datetimes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

__all__ = ["ACTIVE_STATES", "TRIAL_STATES", "as_utc", "epochs", "hops", "locks", "metadata",
           "nightly_regions", "nightly_runs", "row_dict", "studies", "takeovers", "trials",
           "utcnow", "workers"]

TRIAL_STATES = ("pending", "running", "done", "pruned", "failed")
ACTIVE_STATES = ("pending", "running")

metadata = MetaData()

studies = Table(
    "studies",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("region", String(64), nullable=False, index=True),
    Column("state", String(16), nullable=False, default="running"),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("budget", Integer, nullable=False),
    Column("parallel", Integer, nullable=False),
    Column("epochs", Integer, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("space", JSON),
    Column("region_config", JSON, nullable=False),
    Column("manifest", JSON),  # the data the study trains on, fixed at its start
    Column("data_hash", String(64)),
    Column("parent_id", Integer, ForeignKey("studies.id")),
    Column("minimize", Integer, nullable=False, default=1),
    Column("best_trial_id", Integer),
    Column("failure", Text),
    Column("nightly_run_id", Integer, index=True),
    Column("promotion", JSON),  # what promoting its best trial decided
    # "tune"; "calibration": hops recorded for the planner's cost model, never promoted
    Column("kind", String(16), nullable=False, default="tune", server_default="tune"),
    # one running study per region, held by the database rather than a check-then-insert
    Index("one_running_study_per_region", "region", unique=True,
          sqlite_where=text("state = 'running'"), postgresql_where=text("state = 'running'")),
)

trials = Table(
    "trials",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("study_id", Integer, ForeignKey("studies.id"), nullable=False, index=True),
    Column("number", Integer, nullable=False),
    Column("params", JSON, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("epochs_done", Integer, nullable=False, default=0),
    Column("last_metric", Float),
    Column("best_metric", Float),
    Column("failure", Text),
    # seconds the tune_step that created it worked before recording it (None: not recorded)
    Column("proposal_seconds", Float),
    UniqueConstraint("study_id", "number"),
)

epochs = Table(
    "epochs",
    metadata,
    Column("trial_id", Integer, ForeignKey("trials.id"), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("visit_order", JSON, nullable=False),
    Column("metric", Float),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

hops = Table(
    "hops",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("trial_id", Integer, ForeignKey("trials.id"), nullable=False, index=True),
    Column("epoch", Integer, nullable=False),
    Column("position", Integer, nullable=False),
    Column("shard", Integer, nullable=False),
    Column("state", String(16), nullable=False),  # queued, running, done
    Column("worker", String(255)),
    Column("deliveries", Integer, nullable=False, default=0),
    # deliveries that found the hop started and never finished: its worker died mid-hop
    Column("interrupted", Integer, nullable=False, default=0),
    Column("queued_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("samples", Integer),
    Column("loss", Float),
    Column("train_seconds", Float),
    Column("load_seconds", Float),
    Column("save_seconds", Float),
    # the worker process holding the hop's claim (a ``workers`` row) while it runs; once done,
    # the one that trained it, whose writer writes its checkpoint behind (None: it failed)
    Column("holder", String(255)),
    # the last failure of a delivery (class and message) and how many deliveries failed
    Column("error", Text),
    Column("errors", Integer, nullable=False, default=0, server_default="0"),
    UniqueConstraint("trial_id", "epoch", "position"),
)

workers = Table(
    "workers",
    metadata,
    Column("id", String(255), primary_key=True),  # one worker process: name/pid/random
    Column("name", String(255), nullable=False, index=True),  # its Celery node name
    Column("host", String(255)),
    Column("pid", Integer),
    Column("shards", JSON),  # the shards it was started to own
    Column("info", JSON),  # device, kernel paths: what it says about itself
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False, index=True),
)

takeovers = Table(
    "takeovers",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("queue", String(255), nullable=False, index=True),
    Column("worker", String(255), nullable=False),  # the Celery node name that took it
    Column("reason", Text),
    Column("at", DateTime(timezone=True), nullable=False),
)


nightly_runs = Table(
    "nightly_runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("state", String(16), nullable=False),  # running, done, abandoned
    Column("trigger", String(16), nullable=False),  # beat, cli
    Column("host", String(255)),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

nightly_regions = Table(
    "nightly_regions",
    metadata,
    Column("run_id", Integer, ForeignKey("nightly_runs.id"), primary_key=True),
    Column("region", String(64), primary_key=True),
    Column("state", String(16), nullable=False),  # running, promoted, kept, failed
    Column("study_id", Integer),
    Column("ingested", Integer),  # 1 if the data changed and was re-ingested
    Column("outcome", Text),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

locks = Table(
    "locks",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("holder", String(255)),
    Column("expires_at", DateTime(timezone=True)),
)



def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time hoptune stores is UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def row_dict(row: Any) -> dict[str, Any]:
    out = dict(row._mapping)
    for key, value in out.items():
        if isinstance(value, datetime):
            out[key] = as_utc(value)
    return out

