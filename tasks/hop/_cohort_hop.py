"""A cohort hop: the hop at one (position, shard) of several trials of one study, each at
its own epoch, trained as one fused model.

Every member is a hop of its own: it is claimed, its output checkpoint
written, its hop recorded and handed on by the single hop's code
(``_hop.claim``/``finish``); only the training is shared, one shard pass for
all (``train_cohort_pass``), fused where the family allows and each member
alone otherwise. So pruning, resuming, rewinding and replay work per trial as
they do for single hops, and:

- a message of a study that is not the region's, or of a shard this worker
  does not own, is set aside whole; a member the study database does not
  record so (no such trial, epoch or queued hop, another study's, placed on
  another shard) is set aside alone, and the others train (``_admission``);
- a member whose hop is done, held by a live worker or no longer running drops
  out of the cohort; a redelivered cohort message trains no member twice, since
  a member whose output exists only hands on (and only if the message came
  before, as a single hop's);
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
from hoptune.tasks.hop._admission import refusal
from hoptune.tasks.hop._cohort_pass import Member, train_cohort_pass
from hoptune.tasks.hop._delivery import Claimed, HopReport
from hoptune.tasks.hop._hop import (
    claim,
    finish,
    release,
    restore,
    save,
    set_aside_report,
    train_alone,
)
from hoptune.tasks.worker import (
    TRANSIENT,
    CohortMessage,
    Runtime,
    checkpoint_key,
    study_manifest,
)
from hoptune.tuner import HopRecords

__all__ = ["run_cohort_hop"]

log = logging.getLogger(__name__)

# What the cohort pass left for a member: its trained model, or the failure to raise in
# its own hop (where the single hop's handling records it).
_Outcome = torch.nn.Module | BaseException


def run_cohort_hop(rt: Runtime, trial_ids: Sequence[int], epochs: Sequence[int],
                   position: int, shard: int,
                   on_progress: Callable[[HopReport], None] | None = None, *,
                   message: CohortMessage | None = None, again: bool = True
                   ) -> list[HopReport]:
    """Run one delivery of a cohort message: one report per trial named, as ``run_hop``'s.

    ``epochs`` is each trial's epoch: the members share the
    position and the shard, not necessarily the epoch. ``message`` and ``again``
    are ``run_hop``'s: a message that fails its checks sets every member aside.
    A transient failure of the shared pass gives every claimed hop back and is
    raised (the task retries the message); any other failure is each trained
    member's own, recorded on its hop as a single hop's would be.
    """
    study = None
    if message is not None:
        found = refusal(rt, message.region, message.study, shard)
        if isinstance(found, str):
            reason = f"cohort hop of trials {list(trial_ids)} position {position}: {found}"
            return [set_aside_report(HopReport(t, e, position, shard), reason)
                    for t, e in zip(trial_ids, epochs, strict=True)]
        study = found
    reports: list[HopReport] = []
    claims: list[Claimed] = []
    try:
        for trial_id, epoch in zip(trial_ids, epochs, strict=True):
            c = claim(rt, trial_id, epoch, position, shard, study=study, again=again)
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
        outcome = outcomes.get(c.trial.id)
        if outcome is None:  # its stored output was unreadable: it trains alone after all
            return train_alone(rt_, c, manifest, key)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    place: int | None = None
    for i, c in enumerate(claims):
        c.place, c.in_pass = place, c.trial.id in outcomes
        try:
            reports.append(finish(rt, c, on_progress, take))
        except BaseException:
            for rest in claims[i + 1:]:
                if rest.claim == "claimed":
                    release(rt, rest)
            raise
        if place is None and position + 1 < len(c.record.visit_order):
            following = HopRecords(rt.db).get(c.trial.id, c.report.epoch, position + 1)
            place = following.shard if following is not None else None
    return reports


def _train_members(rt: Runtime, claims: list[Claimed], position: int, shard: int
                   ) -> dict[int, _Outcome]:
    """Train, in one pass per cohort key, every claimed member whose output does not exist;
    save each one's checkpoint. Returns each trained member's outcome by trial id."""
    todo = [c for c in claims if c.claim == "claimed" and not rt.store.exists(
        checkpoint_key(c.study.id, c.trial.id, c.report.epoch, position))]
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
            outcomes[c.trial.id] = exc
            continue
        c.report.load_seconds = time.perf_counter() - started
        key = cohort_key(family, c.trial.params)
        if isinstance(key, Unfusable):
            log_unfused(family, key)
        cohorts.setdefault(repr(key), []).append(
            (c, Member(c.trial.seed, c.trial.params, model, optimizer)))
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
                outcomes[c.trial.id] = exc
            continue
        for (c, member), trained in zip(group, passes, strict=True):
            c.report.load_seconds += loading
            key = checkpoint_key(c.study.id, c.trial.id, c.report.epoch, position)
            try:
                save(rt, c, key, member.model, member.optimizer, trained)
            except TRANSIENT:
                raise
            except Exception as exc:  # noqa: BLE001 - its own hop records it
                outcomes[c.trial.id] = exc
                continue
            outcomes[c.trial.id] = member.model
    return outcomes
