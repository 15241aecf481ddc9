"""A cohort hop: the hop at one (position, shard) of several trials of one study, each at
its own epoch, trained as one fused model.

Every member is a hop of its own: it is claimed, its output checkpoint
written, its hop recorded and handed on by the single hop's code
(``_hop.claim``/``finish``); only the training is shared, one shard pass for
all (``train_cohort_pass``), fused where the family allows and each member
alone otherwise. So pruning, resuming, rewinding and replay work per trial as
they do for single hops, and:

- a member whose hop is done, held by a live worker, no longer running, or
  recorded on another shard drops out of the cohort (the last is sent to its
  own shard); a redelivered cohort message trains no member twice, since a
  member whose output exists only hands on;
- the members' next hops take one shard, chosen once (by the first member's
  placement) and recorded in each member's visit order, and travel on as one
  cohort message; at an epoch's end each member's end is decided alone (ASHA
  may prune it and the cohort shrinks), and the members that go on start the
  next epoch on one shared first shard;
- the slots that members who ended there freed are filled at that boundary
  where no shard has an idle owner: the new trials start their first epoch in
  the cohort's next message (``tune_step`` with ``joining``), so a cohort
  shrunk by ASHA grows again instead of leaving new trials to hop alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hoptune.regions import Unfusable, cohort_key, get_family, log_unfused
from hoptune.tasks._checkpoint import checkpoint_key
from hoptune.tasks._cohort import Member, train_cohort_pass
from hoptune.tasks._cohort_forming import cohort_of, form_cohorts
from hoptune.tasks._failures import TRANSIENT
from hoptune.tasks._hop import (
    Claimed,
    EpochEnd,
    HopReport,
    claim,
    finish,
    release,
    restore,
    save,
    train_alone,
)
from hoptune.tasks._liveness import live_after
from hoptune.tasks._messages import Dispatch
from hoptune.tasks._runtime import Runtime, study_manifest
from hoptune.tasks._workflow import CohortStart, end_of_epoch, tune_step
from hoptune.tuner import idle_owners

__all__ = ["hand_on_cohort", "run_cohort_hop"]

log = logging.getLogger(__name__)

# What the cohort pass left for a member: its trained model, or the failure to raise in
# its own hop (where the single hop's handling records it).
_Outcome = torch.nn.Module | BaseException


def run_cohort_hop(rt: Runtime, trial_ids: Sequence[int], epochs: Sequence[int],
                   position: int, shard: int,
                   on_progress: Callable[[HopReport], None] | None = None) -> list[HopReport]:
    """Run one delivery of a cohort message: one report per trial named, as ``run_hop``'s.

    ``epochs`` is each trial's epoch: the members share the
    position and the shard, not necessarily the epoch. A transient failure of
    the shared pass gives every claimed hop back and is raised (the task
    retries the message); any other failure is each trained member's own,
    recorded on its hop as a single hop's would be.
    """
    reports: list[HopReport] = []
    claims: list[Claimed] = []
    try:
        for trial_id, epoch in zip(trial_ids, epochs, strict=True):
            c = claim(rt, trial_id, epoch, position, shard)
            if isinstance(c, HopReport):
                reports.append(c)
            else:
                claims.append(c)
        outcomes = _train_members(rt, claims, position, shard)
    except BaseException:
        for c in claims:
            if c.claim == "claimed":
                release(rt, c)
        raise

    def take(rt_: Runtime, c: Claimed, manifest: dict[str, Any], key: str) -> torch.nn.Module:
        outcome = outcomes.get(c.trial["id"])
        if outcome is None:  # its stored output was unreadable: it trains alone after all
            return train_alone(rt_, c, manifest, key)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    place: int | None = None
    for i, c in enumerate(claims):
        c.place, c.in_pass = place, c.trial["id"] in outcomes
        try:
            reports.append(finish(rt, c, on_progress, take))
        except BaseException:
            for rest in claims[i + 1:]:
                if rest.claim == "claimed":
                    release(rt, rest)
            raise
        if place is None and position + 1 < len(c.record["visit_order"]):
            following = rt.db.hop(c.trial["id"], c.report.epoch, position + 1)
            place = following["shard"] if following is not None else None
    return reports


def _train_members(rt: Runtime, claims: list[Claimed], position: int, shard: int
                   ) -> dict[int, _Outcome]:
    """Train, in one pass per cohort key, every claimed member whose output does not exist;
    save each one's checkpoint. Returns each trained member's outcome by trial id."""
    todo = [c for c in claims if c.claim == "claimed" and not rt.store.exists(
        checkpoint_key(c.study["id"], c.trial["id"], c.report.epoch, position))]
    outcomes: dict[int, _Outcome] = {}
    if not todo:
        return outcomes
    region, manifest = todo[0].region, study_manifest(rt, todo[0].study)
    family = get_family(region)
    cohorts: dict[str, list[tuple[Claimed, Member]]] = {}
    for c in todo:
        started = time.perf_counter()
        try:
            model, optimizer = restore(rt, c, manifest)
        except TRANSIENT:
            raise
        except Exception as exc:  # noqa: BLE001 - its own hop records it (rewind, failure)
            outcomes[c.trial["id"]] = exc
            continue
        c.report.load_seconds = time.perf_counter() - started
        key = cohort_key(family, c.trial["params"])
        if isinstance(key, Unfusable):
            log_unfused(family, key)
        cohorts.setdefault(repr(key), []).append(
            (c, Member(c.trial["seed"], c.trial["params"], model, optimizer)))
    if not cohorts:
        return outcomes
    started = time.perf_counter()
    data = rt.shard(manifest, shard)
    loading = time.perf_counter() - started
    for group in cohorts.values():
        members = [m for _, m in group]
        try:
            passes = train_cohort_pass(region, members, data,
                                       epoch=[c.report.epoch for c, _ in group], shard=shard,
                                       position=position, meta=manifest["meta"])
        except TRANSIENT:
            raise
        except Exception as exc:  # noqa: BLE001 - each member's hop records the failure
            for c, _ in group:
                outcomes[c.trial["id"]] = exc
            continue
        for (c, member), trained in zip(group, passes, strict=True):
            c.report.load_seconds += loading
            key = checkpoint_key(c.study["id"], c.trial["id"], c.report.epoch, position)
            try:
                save(rt, c, key, member.model, member.optimizer, trained)
            except TRANSIENT:
                raise
            except Exception as exc:  # noqa: BLE001 - its own hop records it
                outcomes[c.trial["id"]] = exc
                continue
            outcomes[c.trial["id"]] = member.model
    return outcomes


def hand_on_cohort(rt: Runtime, reports: list[HopReport]) -> list[Dispatch]:
    """The messages a cohort delivery sends: each member's, its epoch's end decided per
    member, the members that go on to the next epoch on one first shard, bundled again,
    with the new trials that fill the slots members freed where they join it."""
    out: list[Dispatch] = []
    first: int | None = None
    going_on: list[EpochEnd] = []
    for report in reports:
        out.extend(report.dispatch)
        end = report.epoch_end
        if end is None:
            continue
        sent = end_of_epoch(rt, end.region, end.study, end.trial, end.epoch, end.model,
                            end.manifest, first_shard=first)
        out.extend(sent)
        start = next((d.kwargs["shard"] for d in sent
                      if d.task == "hoptune.hop" and d.kwargs["position"] == 0), None)
        if start is not None:
            first = start if first is None else first  # the first member's choice
            going_on.append(end)
    if first is not None:
        out = _fill_at_boundary(rt, out, going_on, first)
    return form_cohorts(rt, out)


def _fill_at_boundary(rt: Runtime, out: list[Dispatch], going_on: list[EpochEnd], first: int
                      ) -> list[Dispatch]:
    """``out`` with its ``tune_step`` run here, its new trials joining the members that go
    on, where that starts them no later than a message would.

    A member that ended at this boundary freed a slot. Its ``tune_step`` message
    would start the new trial alone, one pass more for every hop of its first
    epoch; run here, before the cohort's next message is sent, the new trial
    starts its first epoch in that message. Only where no shard of the region
    has an idle owner: an idle worker starts a trial sent to it at once, sooner
    than the cohort's pass would, so there the message goes as before. Should the
    step fail here, the message goes as before too.
    """
    region, study = going_on[0].region, going_on[0].study
    steps = [d for d in out if d.task == "hoptune.tune_step" and d.kwargs["study"] == study["id"]]
    if not steps:  # no member ended here
        return out
    key = cohort_of(region, going_on[0].trial["params"])
    if key is None:
        return out
    members = sum(cohort_of(region, e.trial["params"]) == key for e in going_on)
    if members >= region.fuse:
        return out
    if idle_owners(rt.db.shard_loads(region.name, live_after()), region.shards):
        return out
    try:
        started = tune_step(rt, study["id"], joining=CohortStart(key, first, members))
    except Exception:  # noqa: BLE001 - the tune_step message fills the slots instead
        log.warning("study %d: filling the slots at a cohort's epoch boundary failed; "
                    "sending tune_step", study["id"], exc_info=True)
        return out
    return [d for d in out if d not in steps] + started
