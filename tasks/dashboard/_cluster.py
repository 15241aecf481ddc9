"""The cluster page: each worker process, its device, kernel paths and liveness; the hop Gantt.

Liveness is the heartbeat each worker process records in the study database
(as ``hoptune status`` shows it): live, warming up (its imports and shards
still loading), or gone after ``HOPTUNE_LIVENESS_SECONDS`` without one. The
kernel paths are what the workers answer to Celery's ``stats`` (read in the
background by the sampler). The Gantt is every hop that ran in the last
``window`` seconds, one lane per worker: the picture of model hopping.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from hoptune.tasks.dashboard._sampler import Sample
from hoptune.tasks.monitor import busy_shares
from hoptune.tasks.worker import live_after, liveness_seconds
from hoptune.tuner import HopRecords, HopRow, StudyDB

__all__ = ["RecentHops", "TrialNames", "cluster_page"]


class TrialNames:
    """(region, study, trial number) of a trial id, remembered: a trial never changes study."""

    def __init__(self, db: StudyDB) -> None:
        self.db = db
        self._known: dict[int, tuple[str, int, int]] = {}
        self._lock = threading.Lock()

    def names(self, trial_ids: set[int]) -> dict[int, tuple[str, int, int]]:
        with self._lock:
            missing = trial_ids - self._known.keys()
            if missing:
                # the newest studies first: a hop of the last minutes is a recent study's
                for study in reversed(self.db.studies()):
                    for trial in self.db.trials(study.id):
                        self._known[trial.id] = (study.region, study.id, trial.number)
                    missing -= self._known.keys()
                    if not missing:
                        break
            return {t: self._known[t] for t in trial_ids}


class RecentHops:
    """The hops of the last ``window`` seconds, read incrementally.

    A finished hop's row does not change, so each read asks the study database
    only for the hops running now or finished since the previous read (less
    ``SLACK`` seconds, for a hop whose transaction committed late) and keeps
    the finished ones until they leave the window: a page polled every few
    seconds costs what ran since, not the whole window.
    """

    SLACK = 60.0

    def __init__(self, db: StudyDB, window: float) -> None:
        self.db, self.window = db, window
        self._done: dict[int, HopRow] = {}
        self._read_at: datetime | None = None
        self._lock = threading.Lock()

    def read(self, now: datetime) -> list[HopRow]:
        start = now - timedelta(seconds=self.window)
        with self._lock:
            since = start if self._read_at is None else max(
                start, self._read_at - timedelta(seconds=self.SLACK))
            running = []
            for hop in HopRecords(self.db).since(since):
                if hop.state == "done":
                    self._done[hop.id] = hop
                else:
                    running.append(hop)
                    self._done.pop(hop.id, None)
            self._read_at = now
            self._done = {i: h for i, h in self._done.items()
                          if h.finished_at is not None and h.finished_at >= start}
            return sorted([*self._done.values(), *running], key=lambda h: h.id)


def _state(worker: dict[str, Any], alive: datetime) -> str:
    info = worker["info"] or {}
    if info.get("retired"):
        return "stopped"
    if worker["heartbeat_at"] <= alive:
        return "gone"
    return "warming up" if info.get("warm") is False else "live"


def cluster_page(db: StudyDB, sample: Sample, names: TrialNames, hops: RecentHops,
                 now: datetime) -> dict[str, Any]:
    """The cluster page's data; times are seconds before ``now`` (the browser's clock may
    differ from the server's)."""
    from hoptune.tuner import WorkerRecords

    alive = live_after()
    window = hops.window
    recent = hops.read(now)
    shares = busy_shares(recent, now, window)
    workers = []
    for w in WorkerRecords(db).all():
        info = w["info"] or {}
        answer = sample.workers.get(w["name"], {})
        state = _state(w, alive)
        if state == "stopped" and not any(h.worker == w["name"] for h in recent):
            continue  # stopped cleanly before the window: nothing of it to show
        workers.append({
            "worker": w["name"], "process": w["id"], "host": w["host"], "pid": w["pid"],
            "state": state, "device": answer.get("device") or info.get("device"),
            "host_class": info.get("host_class"),
            "kernels": answer.get("kernels") or "no answer to stats",
            "shards": [f"{r}:{k}" for r, k in w["shards"] or []],
            "heartbeat_age": (now - w["heartbeat_at"]).total_seconds() if state != "stopped"
            else None,
            "busy_share": shares.get(w["name"], 0.0),
            "hops": answer.get("hops"),
        })
    trials = names.names({h.trial_id for h in recent})
    lanes: dict[str, list[dict[str, Any]]] = {}
    for hop in recent:
        if hop.worker is None or hop.started_at is None:
            continue
        region, study, number = trials[hop.trial_id]
        end = hop.finished_at if hop.state == "done" and hop.finished_at else now
        lanes.setdefault(hop.worker, []).append({
            "start": (now - hop.started_at).total_seconds(),
            "end": (now - end).total_seconds(), "state": hop.state,
            "region": region, "study": study, "trial": number, "trial_id": hop.trial_id,
            "epoch": hop.epoch + 1, "position": hop.position + 1, "shard": hop.shard})
    return {
        "now": now, "window": window, "liveness_seconds": liveness_seconds(),
        "workers": workers, "workers_why": sample.workers_why,
        "queues": [{"queue": q, "depth": n} for q, n in sorted(sample.depths.items())],
        "lanes": [{"worker": name, "hops": hops} for name, hops in sorted(lanes.items())],
    }
