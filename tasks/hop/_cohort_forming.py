"""Which hops travel together: hop messages of one study bundled into cohort messages.

Hops of the same study at the same (position, shard) whose trials share a
``regions.cohort_key`` go as one cohort message, up to the region's ``fuse``
trials each, whatever epoch each trial is at (a trial that joins a cohort at
an epoch boundary starts its first epoch beside members in later ones); the
others stay single hop messages. Bundling changes no
decision: every member is still claimed, recorded and handed on as its own hop,
so a cohort message is only a way to train them in one pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hoptune.regions import RegionConfig, get_family
from hoptune.tasks.worker import Dispatch, Runtime, cohort_dispatch, hop_dispatch, region_of

__all__ = ["cohort_of", "form_cohorts", "fuse_size"]


def cohort_of(region: RegionConfig, params: dict[str, Any]) -> str | None:
    """The cohort a trial of ``params`` may join (trials with equal values fuse), or None
    when it fuses with no other or the region does not fuse."""
    if not region.fuses:
        return None
    # fusing (torch) is imported only where a region fuses: the sweeper, which a command
    # runs too, imports this module
    from hoptune.regions import Unfusable, cohort_key

    key = cohort_key(get_family(region), params)
    return None if isinstance(key, Unfusable) else repr(key)


def fuse_size(region: RegionConfig, params: dict[str, Any],
              meta: Callable[[], dict[str, Any]]) -> int:
    """The most trials of the cohort of ``params`` that fuse: the region's ``fuse``, or for
    "auto" what ``regions.fuse_limit`` gives on this worker's device (the one place that
    decides it), for the model of ``params`` on a GPU. ``meta`` (the data's, as the
    manifest holds it) is read only there."""
    if region.fuse != "auto":
        return region.fuse
    import torch

    from hoptune.regions import fuse_limit
    from hoptune.tasks.worker import worker_device

    device = worker_device()
    if device.type != "cuda":
        return fuse_limit("auto", device=device)
    from hoptune.tasks.hop._training import bare_trial_model

    model = bare_trial_model(region, params, meta())
    return fuse_limit("auto", device=device,
                      parameters=sum(p.numel() for p in model.parameters()),
                      memory=torch.cuda.get_device_properties(device).total_memory)


def _members(d: Dispatch) -> list[Dispatch]:
    """A cohort message as the hop messages of its members; any other message as it is."""
    if d.task != "hoptune.cohort_hop":
        return [d]
    k = d.kwargs
    return [hop_dispatch(k["region"], k["study"], trial, epoch, k["position"], k["shard"])
            for trial, epoch in zip(k["trials"], k["epochs"], strict=True)]


def form_cohorts(rt: Runtime, dispatches: list[Dispatch], *,
                 regions: dict[int, RegionConfig] | None = None,
                 params: dict[int, dict[str, Any]] | None = None) -> list[Dispatch]:
    """``dispatches`` with the hop messages that may train together bundled into cohort
    messages of at most ``fuse`` trials each; every other message unchanged, in order.
    Cohort messages among ``dispatches`` are formed again with the rest (a trial that
    joins a cohort at an epoch boundary comes from another step than its members).

    A trial named twice (a copy of its hop message) is named once. ``regions`` (by
    study id) and ``params`` (by trial id) are what the caller knows already; the
    rest is read from the study database.
    """
    dispatches = [hop for d in dispatches for hop in _members(d)]
    if sum(d.task == "hoptune.hop" for d in dispatches) < 2:
        return dispatches
    regions = dict(regions or {})
    params = params or {}
    out: list[Dispatch] = []
    groups: dict[tuple[Any, ...], dict[int, int]] = {}  # where -> trial -> its epoch
    known: dict[int, dict[str, Any]] = {}  # trial -> its params
    for d in dispatches:
        k = d.kwargs
        if d.task != "hoptune.hop":
            out.append(d)
            continue
        if k["study"] not in regions:
            regions[k["study"]] = region_of(rt.db.study(k["study"]))
        region = regions[k["study"]]
        if not region.fuses:
            out.append(d)
            continue
        known[k["trial"]] = (params[k["trial"]] if k["trial"] in params
                             else rt.db.trial(k["trial"]).params)
        key = cohort_of(region, known[k["trial"]])
        if key is None:
            out.append(d)
            continue
        where = (k["region"], k["study"], k["position"], k["shard"], key)
        groups.setdefault(where, {}).setdefault(k["trial"], k["epoch"])
    for (name, study, position, shard, _), members in groups.items():
        trials = list(members)
        size = fuse_size(regions[study], known[trials[0]],
                         lambda study=study: rt.db.study(study).manifest["meta"])
        for start in range(0, len(trials), size):
            chunk = trials[start:start + size]
            epochs = [members[t] for t in chunk]
            out.append(cohort_dispatch(name, study, chunk, epochs, position, shard)
                       if len(chunk) > 1 else
                       hop_dispatch(name, study, chunk[0], epochs[0], position, shard))
    return out
