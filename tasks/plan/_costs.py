"""The recorded hops of earlier studies, as the cost model's observations.

A hop's cost is keyed by its model family, the device kind of the worker that
trained it and that worker's host class (``HOPTUNE_HOST_CLASS``, by default the
host name), from the ``workers`` row of the process of that name that ran the
hop (a stopped worker's row stays, marked retired; where none is left, the
device is "unknown" and the host the one the node name gives); its size by the
rows it trained, the trial's batch size and its model's parameter count (the
model built on the meta device: no memory, no initialisation). Only hops that
trained count: a redelivery that found the work done says nothing of the cost.
Nor does a hop trained in a cohort's pass beside other trials (``fuse``): each
member records the whole pass's seconds, which no single hop would take.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from hoptune.regions import RegionConfig, get_family
from hoptune.tasks.worker import region_of
from hoptune.tuner import (
    CostKey,
    HopObservation,
    HopRecords,
    HopRow,
    StudyDB,
    StudyRow,
    WorkerRecords,
)

__all__ = ["parameter_count", "recorded_observations", "trained_passes"]


def parameter_count(region_config: dict[str, Any], manifest: dict[str, Any] | None,
                    params: dict[str, Any]) -> int:
    """How many parameters a trial's model has, under a study's region configuration and
    manifest (its data's shape), with ``params``: built on the meta device without its values
    drawn (``Family.build_on_meta``), once a process for each region configuration, data
    shape and params (the planner and the metrics' forecast count every recorded trial again
    at each plan)."""
    meta = (manifest or {}).get("meta", {})
    return _parameter_count(*(json.dumps(x, sort_keys=True, default=_plain)
                              for x in (region_config, params, meta)))


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python value, anything else JSON cannot write as its text."""
    return value.item() if hasattr(value, "item") else str(value)


@functools.lru_cache(maxsize=16384)
def _parameter_count(region_config: str, params: str, meta: str) -> int:
    region = RegionConfig.model_validate(json.loads(region_config))
    model = get_family(region).build_on_meta(json.loads(params), json.loads(meta))
    return sum(p.numel() for p in model.parameters())


def trained_passes(hops: Iterable[HopRow]) -> dict[tuple[Any, float], list[HopRow]]:
    """The trained ``hops`` of a study by the shard pass that trained them, keyed by (worker,
    train seconds): a cohort's members record one pass's seconds, a figure two passes never
    share, so a pass of several hops is a cohort's."""
    out: dict[tuple[Any, float], list[HopRow]] = {}
    for h in hops:
        if h.state == "done" and h.train_seconds is not None:
            out.setdefault((h.worker, h.train_seconds), []).append(h)
    return out


def recorded_observations(db: StudyDB, studies: list[StudyRow] | None = None
                          ) -> list[HopObservation]:
    """One observation per trained hop of ``studies`` (default: every study)."""
    processes: dict[str, list[dict[str, Any]]] = {}  # by name, oldest first
    for row in sorted(WorkerRecords(db).all(), key=lambda r: r["started_at"]):
        processes.setdefault(row["name"], []).append(row)

    def process(hop: HopRow) -> dict[str, Any]:
        """The process of the hop's worker name that ran it: the last started before it."""
        rows = processes.get(hop.worker or "", [])
        before = [r for r in rows if r["started_at"] <= hop.started_at]
        return (before or rows or [{}])[-1]

    out = []
    for study in studies if studies is not None else db.studies():
        region = region_of(study)
        family = region.family
        hops: dict[int, list[HopRow]] = {}
        recorded = HopRecords(db).all(study_id=study.id)
        for hop in recorded:
            hops.setdefault(hop.trial_id, []).append(hop)
        shared = {key for key, members in trained_passes(recorded).items() if len(members) > 1}
        for trial in db.trials(study.id):
            parameters = None
            batch_size = int(trial.params.get("batch_size", region.batch_size))
            for hop in hops.get(trial.id, []):
                if hop.state != "done" or hop.train_seconds is None:
                    continue
                if (hop.worker, hop.train_seconds) in shared:
                    continue
                if hop.started_at is None or hop.finished_at is None or not hop.samples:
                    continue
                if parameters is None:
                    parameters = parameter_count(study.region_config, study.manifest,
                                                 trial.params)
                worker = process(hop)
                info = worker.get("info") or {}
                # a worker that stopped cleanly took its row along: its node name's host remains
                node_host = (hop.worker or "").rpartition("@")[2] or None
                key = CostKey(family=family, device=str(info.get("device", "unknown")),
                              host=str(info.get("host_class") or worker.get("host") or node_host
                                       or "unknown"))
                out.append(HopObservation(
                    key=key, rows=int(hop.samples), batch_size=batch_size,
                    parameters=parameters,
                    seconds=(hop.finished_at - hop.started_at).total_seconds()))
    return out
