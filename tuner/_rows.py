"""The study database's rows as frozen dataclasses: what a study, a trial, an epoch and a hop are.

Every row that leaves the study database is made here, in one place, from the
database row (``from_row``): a reader sees a trial's fields, a typo in a field
name fails at once, and nothing downstream can change a row by accident. Times
are timezone-aware UTC (SQLite hands back naive ones). The fields are the
tables' columns, in their order (``tests/tuner/test_rows.py`` holds them to
``_schema``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Self

from hoptune.tuner._schema import as_utc

__all__ = ["EpochRow", "HopPosition", "HopRow", "StudyRow", "TrialRow", "WaitingHop"]


class _Row:
    """``from_row``: a frozen dataclass from a SQLAlchemy row with (at least) its fields."""

    __slots__ = ()

    @classmethod
    def from_row(cls, row: Any) -> Self:
        mapping = row._mapping
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            value = mapping[f.name]
            values[f.name] = as_utc(value) if isinstance(value, datetime) else value
        return cls(**values)


@dataclass(frozen=True, slots=True)
class StudyRow(_Row):
    """One tuning run of one region: its budget, its search space, the data it trains on."""

    id: int
    region: str
    state: str  # running, done, failed
    created_at: datetime
    finished_at: datetime | None
    budget: int  # trials
    parallel: int  # trials in flight at once
    epochs: int  # at most, per trial
    seed: int
    space: dict[str, Any] | None  # None: fixed configurations
    region_config: dict[str, Any]  # the region's configuration at the study's start
    manifest: dict[str, Any] | None  # the data the study trains on, fixed at its start
    data_hash: str | None
    parent_id: int | None  # the study it warm-starts from
    minimize: int
    best_trial_id: int | None
    failure: str | None
    nightly_run_id: int | None
    promotion: dict[str, Any] | None  # what promoting its best trial decided
    kind: str  # tune, calibration


@dataclass(frozen=True, slots=True)
class TrialRow(_Row):
    """One hyperparameter configuration of a study, trained for up to the study's epochs."""

    id: int
    study_id: int
    number: int
    params: dict[str, Any]
    seed: int
    state: str  # pending, running, done, pruned, failed
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    epochs_done: int
    last_metric: float | None
    best_metric: float | None
    failure: str | None
    proposal_seconds: float | None  # the proposing tune_step's work before recording it


@dataclass(frozen=True, slots=True)
class EpochRow(_Row):
    """One epoch of a trial: its recorded visit order and its validation metric."""

    trial_id: int
    epoch: int
    visit_order: list[int]
    metric: float | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class HopRow(_Row):
    """One trial trained once over one shard: where, by whom, how long, with what result."""

    id: int
    trial_id: int
    epoch: int
    position: int  # in the epoch's visit order
    shard: int
    state: str  # queued, running, done
    worker: str | None
    deliveries: int
    interrupted: int  # deliveries that found it started and never finished
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    samples: int | None
    loss: float | None
    train_seconds: float | None
    load_seconds: float | None
    save_seconds: float | None
    holder: str | None  # the worker process holding its claim while it runs
    error: str | None  # the last failure of a delivery
    errors: int  # deliveries that failed


@dataclass(frozen=True, slots=True)
class WaitingHop(HopRow):
    """A queued hop with the study and region its message is routed by."""

    study_id: int
    region: str


@dataclass(frozen=True, slots=True)
class HopPosition(_Row):
    """Where a running trial is: its current epoch's visit order and hop position."""

    trial_id: int
    epoch: int
    position: int
    visit_order: list[int]
