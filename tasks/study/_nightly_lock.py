"""The nightly lock: one nightly run at a time, renewed while its studies make progress.

The lock lives in the study database and runs out when its holder stops
making progress (``HOPTUNE_NIGHTLY_LOCK_SECONDS``, default 1800), so a driver
that died does not block the next night.
"""

from __future__ import annotations

import os

from hoptune.tasks.worker import Runtime
from hoptune.tuner import Locks, StudyRow

__all__ = ["NIGHTLY_LOCK", "holder", "lock_seconds", "renew"]

NIGHTLY_LOCK = "nightly"


def lock_seconds() -> float:
    """How long the nightly lock lasts without progress (``HOPTUNE_NIGHTLY_LOCK_SECONDS``)."""
    return float(os.environ.get("HOPTUNE_NIGHTLY_LOCK_SECONDS", "1800"))


def holder(run_id: int) -> str:
    """The lock holder's name for nightly run ``run_id``."""
    return f"nightly-run-{run_id}"


def renew(rt: Runtime, study: StudyRow) -> None:
    """A nightly study made progress: its run still holds the lock."""
    if study.nightly_run_id is not None:
        Locks(rt.db).renew(NIGHTLY_LOCK, holder(study.nightly_run_id), lock_seconds())
