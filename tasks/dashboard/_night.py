"""The night page: every region's latest study, its champion, and the forecast against the deadline.

One row per region: its latest tuning study's state, its trials against its
budget, its best metric so far (``tuner.best_trial``, the rule promotion
uses) against its champion's, its failures and the messages waiting in its
shard queues. Above the rows, the planner's forecast of the running studies
(``hoptune.tasks.plan.forecast``, as ``hoptune metrics`` computes it) against
``HOPTUNE_NIGHTLY_DEADLINE``, and the last nightly run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hoptune.tasks.dashboard._sampler import Sample
from hoptune.tasks.plan import Forecast
from hoptune.tasks.worker import hop_queue
from hoptune.tuner import (
    NightlyRecords,
    StudyDB,
    StudyRow,
    TrialRow,
    best_trial,
    trial_metric,
)

__all__ = ["FinishedTrials", "latest_studies", "night", "region_row"]

ENDED = ("done", "pruned", "failed")


def latest_studies(db: StudyDB) -> dict[str, StudyRow]:
    """Each region's newest tuning study (calibration studies only record hop costs)."""
    latest: dict[str, StudyRow] = {}
    for study in db.studies():
        if study.kind == "tune":
            latest[study.region] = study  # ordered by id: the last one is the newest
    return latest


class FinishedTrials:
    """Each study's trials, read once for a finished study: its trials no longer change
    (they all ended before the study did). A running study's are read on every call."""

    def __init__(self, db: StudyDB) -> None:
        self.db = db
        self._ended: dict[int, list[TrialRow]] = {}

    def of(self, study: StudyRow) -> list[TrialRow]:
        if study.state == "running":
            return self.db.trials(study.id)
        trials = self._ended.get(study.id)
        if trials is None:
            trials = self._ended[study.id] = self.db.trials(study.id)
        return trials


def region_row(trials: FinishedTrials, study: StudyRow, sample: Sample) -> dict[str, Any]:
    """A region's row of the night page."""
    trials = trials.of(study)
    counts = {state: 0 for state in ("pending", "running", *ENDED)}
    for trial in trials:
        counts[trial.state] = counts.get(trial.state, 0) + 1
    select = study.region_config.get("select", "best")
    best = best_trial(trials, bool(study.minimize), select)
    held = sample.registry.get(study.region)
    champion = None
    if held is not None:
        champion = next((c for c in held["versions"] if c["version"] == held["champion"]), None)
    promotion = study.promotion or {}
    shards = int(study.region_config.get("shards", 0))
    return {
        "region": study.region, "study": study.id, "state": study.state,
        "budget": study.budget, "ended": sum(counts[s] for s in ENDED), **counts,
        "best_trial": best.number if best else None,
        "best_metric": trial_metric(best, select) if best else None,
        "minimize": bool(study.minimize),
        "champion": champion["version"] if champion else None,
        "champion_metric": champion["metric"] if champion else None,
        "metric_name": champion["metric_name"] if champion else None,
        "failures": counts["failed"] + (1 if promotion.get("failed") else 0),
        "failure": study.failure or (promotion.get("reason") if promotion.get("failed")
                                     else None),
        "promotion": promotion.get("reason"),
        "queued": sum(sample.depths.get(hop_queue(study.region, k), 0)
                      for k in range(shards)),
        "created_at": study.created_at, "finished_at": study.finished_at,
    }


def _forecast(f: Forecast | None, deadline: float | None, running: int) -> dict[str, Any]:
    out: dict[str, Any] = {"deadline": deadline, "running_studies": running}
    if f is None:
        out["verdict"] = ("no study runs" if not running else
                          "no forecast: none made yet, or the planner could not make one "
                          "(the dashboard's log says why)")
        return out
    out.update(seconds_to_finish=f.seconds_to_finish, deadline_left=f.deadline_left,
               workers_wanted=f.workers_wanted)
    if not running:
        out["verdict"] = "no study runs"
    elif f.deadline_left is None:
        out["verdict"] = "no deadline set (HOPTUNE_NIGHTLY_DEADLINE)"
    elif f.seconds_to_finish <= f.deadline_left:
        out["verdict"] = "meets the deadline"
    else:
        out["verdict"] = f"misses the deadline: {f.workers_wanted} workers would meet it"
    return out


def night(db: StudyDB, trials: FinishedTrials, sample: Sample, forecast: Forecast | None,
          deadline: float | None, now: datetime) -> dict[str, Any]:
    """The night page's data: the forecast, the last nightly run, one row per region."""
    latest = latest_studies(db)
    rows = [region_row(trials, study, sample) for _, study in sorted(latest.items())]
    # a run refused (another was going) never ran: the last run is the last that was not
    runs = [r for r in NightlyRecords(db).runs() if r["state"] != "refused"]
    run = runs[-1] if runs else None
    return {
        "now": now,
        "forecast": _forecast(forecast, deadline, sum(r["state"] == "running" for r in rows)),
        "nightly": None if run is None else {
            "id": run["id"], "state": run["state"], "started_at": run["started_at"],
            "finished_at": run["finished_at"], "trigger": run["trigger"]},
        "regions": rows,
        "totals": {key: sum(r[key] for r in rows)
                   for key in ("budget", "ended", "running", "failures", "queued")},
    }
