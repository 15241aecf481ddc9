"""The sweeper: re-sends the work of trials whose progress stalled.

A trial stalls when the message that carries it is gone: its worker was
killed after the message was acknowledged, Redis was flushed or restarted,
or the process that would have sent the next message died first. The sweeper
finds running trials with no progress for ``stall_seconds`` and re-sends their
furthest hop; the hop resumes from the last checkpoint (or, if its own output
exists, only hands on). It also restarts studies whose trials all ended while
no ``tune_step`` followed.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

from celery import Celery

from tasks._hop import Dispatch, hop_dispatch, tune_step_dispatch
from tasks._runtime import Runtime
from tuner._db import utcnow

__all__ = ["sweep", "busy_trials", "default_stall_seconds"]

log = logging.getLogger(__name__)


def default_stall_seconds() -> float:
    """``HOPTUNE_STALL_SECONDS``, else the visibility timeout plus a minute."""
    if "HOPTUNE_STALL_SECONDS" in os.environ:
        return float(os.environ["HOPTUNE_STALL_SECONDS"])
    return float(os.environ.get("HOPTUNE_VISIBILITY_TIMEOUT", "7200")) + 60.0


def sweep(rt: Runtime, stall_seconds: float | None = None, study_id: int | None = None,
          busy: set[int] = frozenset()) -> list[Dispatch]:
    """Messages that put every stalled trial and idle study (or only ``study_id``'s) in motion.

    Trials in ``busy`` (a worker holds one of their hops right now) are left alone.
    """
    db = rt.db
    stall = default_stall_seconds() if stall_seconds is None else stall_seconds
    cutoff = utcnow() - timedelta(seconds=stall)
    out: list[Dispatch] = []
    for trial in db.stalled_trials(cutoff):
        if (study_id is not None and trial["study_id"] != study_id) or trial["id"] in busy:
            continue
        last = db.last_hop(trial["id"])
        if last is None:
            continue
        study = db.study(trial["study_id"])
        db.touch_trial(trial["id"])
        log.warning("trial %d stalled at epoch %d position %d: sending its hop again",
                    trial["id"], last["epoch"], last["position"])
        out.append(hop_dispatch(study["region"], study["id"], trial["id"], last["epoch"],
                                last["position"], last["shard"]))
    for study in db.studies():
        if study["state"] != "running" or study_id not in (None, study["id"]):
            continue
        counts = db.counts(study["id"])
        if counts["running"] == 0:
            out.append(tune_step_dispatch(study["id"]))
    return out


def busy_trials(app: Celery, timeout: float = 1.0) -> set[int]:
    """Trials whose hop a live worker is running or holds reserved, by asking the workers."""
    inspect = app.control.inspect(timeout=timeout)
    out: set[int] = set()
    for tasks in (inspect.active() or {}, inspect.reserved() or {}):
        for requests in tasks.values():
            for request in requests:
                if request.get("name") == "hoptune.hop":
                    out.add(int((request.get("kwargs") or {}).get("trial", -1)))
    return out
