"""Rows for tests of pure logic: a study database row with the fields a test names, the rest
plain defaults (``from tests.rows import trial_row``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hoptune.tuner import EpochRow, HopRow, StudyRow, TrialRow

T0 = datetime(2025, 6, 1, 2, 0, tzinfo=UTC)


def study_row(**fields: Any) -> StudyRow:
    base: dict[str, Any] = dict(
        id=1, region="north", state="running", created_at=T0, finished_at=None, budget=8,
        parallel=2, epochs=4, seed=0, space=None, region_config={}, manifest=None,
        data_hash=None, parent_id=None, minimize=1, best_trial_id=None, failure=None,
        nightly_run_id=None, promotion=None, kind="tune")
    return StudyRow(**{**base, **fields})


def trial_row(**fields: Any) -> TrialRow:
    base: dict[str, Any] = dict(
        id=1, study_id=1, number=0, params={}, seed=0, state="pending", created_at=T0,
        started_at=None, finished_at=None, updated_at=T0, epochs_done=0, last_metric=None,
        best_metric=None, failure=None, proposal_seconds=None)
    return TrialRow(**{**base, **fields})


def epoch_row(**fields: Any) -> EpochRow:
    base: dict[str, Any] = dict(trial_id=1, epoch=0, visit_order=[0], metric=None,
                                started_at=T0, finished_at=None)
    return EpochRow(**{**base, **fields})


def hop_row(**fields: Any) -> HopRow:
    base: dict[str, Any] = dict(
        id=1, trial_id=1, epoch=0, position=0, shard=0, state="queued", worker=None,
        deliveries=0, interrupted=0, queued_at=T0, started_at=None, finished_at=None,
        samples=None, loss=None, train_seconds=None, load_seconds=None, save_seconds=None,
        holder=None, error=None, errors=0)
    return HopRow(**{**base, **fields})
