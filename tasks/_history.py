"""What the planner learns from the recorded studies besides the hop costs.

``median_gaps``: the seconds a schedule spends outside hops (an epoch's
validation, a message, a trial's start, a study's first ``tune_step``), as
medians over the recorded hops, epochs and trials. ``pruned_share``: the share
of the finished trials ASHA pruned in tuned studies that had rungs, which sets
the simulated metrics' trend.
"""

from __future__ import annotations

import bisect
import statistics
from typing import Any

from hoptune.tuner import AshaPruner

__all__ = ["median_gaps", "pruned_share"]


def median_gaps(db: Any, studies: list[dict[str, Any]]
                 ) -> tuple[float, float, float, float]:
    """Medians of the seconds from a hop's end to its epoch's end, to the next hop's start,
    from a trial's end to the start of the trial that took its slot, and from a study's
    start to its first hop's message (its first ``tune_step``).

    A hop that waited for its worker to finish another hop waited in the queue, which the
    simulator schedules itself: the gaps before a hop count from when its worker was free.
    """
    done: dict[int, list[dict[str, Any]]] = {}
    for study in studies:
        for h in db.hops(study_id=study["id"]):
            if h["state"] == "done" and h["started_at"] is not None \
                    and h["finished_at"] is not None:
                done.setdefault(h["trial_id"], []).append(h)
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for h in (h for hops in done.values() for h in hops):
        by_worker.setdefault(h["worker"], []).append(h)
    starts = {}
    for worker, hops in by_worker.items():
        hops.sort(key=lambda h: h["started_at"])
        starts[worker] = [h["started_at"] for h in hops]

    def ready(hop: dict[str, Any], since: Any) -> float:
        """Seconds from ``since`` or its worker's previous hop's end, the later, to ``hop``."""
        i = bisect.bisect_left(starts[hop["worker"]], hop["started_at"])
        free = by_worker[hop["worker"]][i - 1]["finished_at"] if i > 0 else since
        return max(0.0, (hop["started_at"] - max(since, free)).total_seconds())

    hand_on, validation, start, head = [], [], [], []
    for study in studies:
        ends, firsts, queued = [], [], []
        for trial in db.trials(study["id"]):
            if trial["finished_at"] is not None:
                ends.append(trial["finished_at"])
            hops = done.get(trial["id"], [])
            if hops:
                firsts.append(min(hops, key=lambda h: h["started_at"]))
                queued.append(min(h["queued_at"] for h in hops))
            by_epoch: dict[int, list[dict[str, Any]]] = {}
            for h in hops:
                by_epoch.setdefault(h["epoch"], []).append(h)
            for epoch, group in by_epoch.items():
                group.sort(key=lambda h: h["position"])
                hand_on += [ready(b, a["finished_at"])
                            for a, b in zip(group, group[1:], strict=False)]
                record = db.epoch(trial["id"], epoch)
                if record is not None and record["finished_at"] is not None:
                    validation.append(max(0.0, (record["finished_at"] - group[-1]["finished_at"]
                                                ).total_seconds()))
        for first in firsts:  # a trial that started once another had ended: its slot's wait
            before = [e for e in ends if e <= first["started_at"]]
            if before:
                start.append(ready(first, max(before)))
        if queued:
            head.append(max(0.0, (min(queued) - study["created_at"]).total_seconds()))
    return tuple(statistics.median(x) if x else 0.0  # type: ignore[return-value]
                 for x in (validation, hand_on, start, head))


def pruned_share(db: Any, studies: list[dict[str, Any]]) -> float | None:
    """The share of the finished trials pruned, over the tuned studies that had rungs."""
    from hoptune.tasks._runtime import region_of

    counts = {"done": 0, "pruned": 0}
    for study in studies:
        region = region_of(study)
        if study["kind"] != "tune" or study["space"] is None or not AshaPruner(
                reduction_factor=region.pruner.reduction_factor,
                min_epochs=region.pruner.min_epochs, max_epochs=study["epochs"]).rungs():
            continue
        for state, n in db.counts(study["id"]).items():
            if state in counts:
                counts[state] += n
    finished = counts["done"] + counts["pruned"]
    return counts["pruned"] / finished if finished else None
