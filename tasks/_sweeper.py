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

from tasks._hop import Dispatch, hop_dispatch, tune_step_dispatch
from tasks._runtime import Runtime
from tuner._db import utcnow

__all__ = ["sweep", "default_stall_seconds"]

log = logging.getLogger(__name__)


def default_stall_seconds() -> float:
    """``HOPTUNE_STALL_SECONDS``, else the visibility timeout plus a minute."""
    if "HOPTUNE_STALL_SECONDS" in os.environ:
        return float(os.environ["HOPTUNE_STALL_SECONDS"])
    return float(os.environ.get("HOPTUNE_VISIBILITY_TIMEOUT", "7200")) + 60.0


def sweep(rt: Runtime, stall_seconds: float | None = None, study_id: int | None = None
          ) -> list[Dispatch]:
    """Messages that put every stalled trial and idle study (or only ``study_id``'s) in motion."""
    db = rt.db
    stall = default_stall_seconds() if stall_seconds is None else stall_seconds
    cutoff = utcnow() - timedelta(seconds=stall)
    out: list[Dispatch] = []
    for trial in db.stalled_trials(cutoff):
        if study_id is not None and trial["study_id"] != study_id:
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
