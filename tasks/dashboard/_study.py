"""The study page: trials as a table and as learning curves, proposals, rung decisions.

Read from the study database as it stands: each trial's row, where its
current epoch has got to (its latest hop), its metric after each epoch (the
learning curve; a pruned trial's curve ends at the rung that stopped it), the
parameters the optimizer proposed over the study's space, and at each of the
pruner's rungs the value every trial recorded there and what followed.
"""

from __future__ import annotations

from typing import Any

from hoptune.tasks.worker import region_of
from hoptune.tuner import AshaPruner, HopRecords, StudyDB, StudyRow, best_trial, trial_metric

__all__ = ["rungs", "study_page", "trial_page"]


def rungs(study: StudyRow) -> tuple[int, ...]:
    """The study's rungs (epochs, from 1) under its region's pruner; none for fixed trials."""
    return () if study.space is None else _pruner(study).rungs()


def _pruner(study: StudyRow) -> AshaPruner:
    """The study's pruner as the workflow judges it (``region_of``: as recorded)."""
    return AshaPruner.from_settings(region_of(study).pruner, max(1, study.epochs))


def _decision(state: str, epochs_done: int, rung: int, judged: bool) -> str:
    """What followed a trial's value at ``rung`` (``judged``: a rung of its bracket)."""
    if epochs_done > rung:
        return "went on" if judged else "not judged"  # it went on: its bracket starts later
    if state == "pruned":
        return "pruned"
    if state == "running":
        return "waiting"  # its next epoch is under way, or its end being decided
    return state  # done (its own epochs ended here) or failed


def study_page(db: StudyDB, study: StudyRow) -> dict[str, Any]:
    """The study page's data."""
    trials = db.trials(study.id)
    hops = HopRecords(db).all(study_id=study.id)
    select = study.region_config.get("select", "best")
    shards = int(study.region_config.get("shards", 1))
    latest: dict[int, Any] = {}
    hop_counts = {"queued": 0, "running": 0, "done": 0}
    for hop in hops:  # ordered by trial, epoch, position: the last one is the furthest
        latest[hop.trial_id] = hop
        hop_counts[hop.state] = hop_counts.get(hop.state, 0) + 1
    curves = {t.id: [e.metric for e in db.epochs(t.id)] for t in trials}
    best = best_trial(trials, bool(study.minimize), select)
    rows = []
    for t in trials:
        hop = latest.get(t.id)
        rows.append({
            "id": t.id, "number": t.number, "state": t.state, "params": t.params,
            "epochs_done": t.epochs_done, "last_metric": t.last_metric,
            "metric": trial_metric(t, select), "failure": t.failure,
            "started_at": t.started_at, "finished_at": t.finished_at,
            "at": None if hop is None else {"epoch": hop.epoch + 1, "hop": hop.position + 1,
                                            "shard": hop.shard, "state": hop.state,
                                            "worker": hop.worker},
            "curve": curves[t.id],
        })
    decisions = []
    pruner = _pruner(study)
    for rung in rungs(study):
        values = [{"trial": t.number, "value": curves[t.id][rung - 1],
                   "decision": _decision(t.state, t.epochs_done, rung,
                                         rung in pruner.judged_at(t.number))}
                  for t in trials if len(curves[t.id]) >= rung
                  and curves[t.id][rung - 1] is not None]
        values.sort(key=lambda v: v["value"], reverse=not study.minimize)
        decisions.append({"rung": rung, "values": values})
    return {
        "study": {"id": study.id, "region": study.region, "state": study.state,
                  "kind": study.kind, "budget": study.budget, "parallel": study.parallel,
                  "epochs": study.epochs, "shards": shards, "minimize": bool(study.minimize),
                  "select": select, "created_at": study.created_at,
                  "finished_at": study.finished_at, "failure": study.failure,
                  "promotion": study.promotion, "parent_id": study.parent_id,
                  "best_trial": best.number if best else None,
                  "best_metric": trial_metric(best, select) if best else None},
        "space": study.space,
        "rungs": list(rungs(study)),
        "hops": hop_counts,
        "trials": rows,
        "rung_decisions": decisions,
    }


def trial_page(db: StudyDB, study: StudyRow, number: int) -> dict[str, Any] | None:
    """One trial of the study: its curve and every hop it trained (None: no such trial)."""
    trial = next((t for t in db.trials(study.id) if t.number == number), None)
    if trial is None:
        return None
    return {
        "study": study.id, "region": study.region, "number": trial.number, "id": trial.id,
        "state": trial.state, "params": trial.params, "failure": trial.failure,
        "rungs": list(rungs(study)),
        "epochs": [{"epoch": e.epoch + 1, "metric": e.metric, "visit_order": e.visit_order,
                    "started_at": e.started_at, "finished_at": e.finished_at}
                   for e in db.epochs(trial.id)],
        "hops": [{"epoch": h.epoch + 1, "position": h.position + 1, "shard": h.shard,
                  "state": h.state, "worker": h.worker, "deliveries": h.deliveries,
                  "loss": h.loss, "train_seconds": h.train_seconds, "error": h.error}
                 for h in HopRecords(db).all(trial.id)],
    }
