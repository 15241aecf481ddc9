"""The tuning workflow: fill free trial slots, end epochs, finish studies.

No step waits on another: ``tune_step`` starts trials and returns; the last
hop of an epoch reports the epoch's end, and ``hand_on`` calls ``end_of_epoch``,
which continues, prunes or ends the trial and asks for another ``tune_step``
when a slot frees. Each function
returns the messages to send; the Celery tasks only send them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from hoptune.core import CheckpointError
from hoptune.regions import RegionConfig, get_family, trial_settings
from hoptune.tasks.hop import (
    EpochEnd,
    HopReport,
    choose_visit_order,
    cohort_of,
    form_cohorts,
    fuse_size,
    model_at,
    rewind,
    trial_seed,
)
from hoptune.tasks.study._nightly_lock import renew as renew_nightly_lock
from hoptune.tasks.study._study import create_study
from hoptune.tasks.worker import (
    Dispatch,
    Runtime,
    checkpoint_key,
    describe,
    hop_dispatch,
    keep_final,
    live_after,
    promote_dispatch,
    region_of,
    tune_step_after_end,
)
from hoptune.tuner import (
    AshaPruner,
    EpochRow,
    HopRecords,
    StudyDB,
    StudyRow,
    TrialRow,
    best_trial,
    cohort_size,
    first_shards,
    idle_owners,
    placed_order,
    selected_epoch,
    told,
    trial_metric,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["CohortStart", "create_study", "tune_step", "hand_on", "hand_on_cohort",
           "end_of_epoch", "trial_seed", "others_positions"]

log = logging.getLogger(__name__)

# How many times tune_step re-reads the study when another tune_step added trials meanwhile.
_PROPOSAL_ATTEMPTS = 5


def others_positions(rt: Runtime, study_id: int, conn: Any = None) -> list[tuple[list[int], int]]:
    return [(r.visit_order, r.position)
            for r in HopRecords(rt.db).running_positions(study_id, conn)]


def _proposals(rt: Runtime, study: StudyRow, trials: list[TrialRow]
               ) -> list[dict[str, Any]]:
    """New parameter sets for the free slots, proposed outside any lock."""
    if study.space is None:
        return []
    active = [t for t in trials if t.state in ("pending", "running")]
    free = min(study.parallel - len(active), study.budget - len(trials))
    if free <= 0:
        return []
    # scikit-optimize (seconds to import) loads here, in the worker, never in a driver
    from hoptune.tuner import Space, epoch_fidelity, propose, study_prior, told_with_epochs

    space = Space.from_json(study.space)
    names = set(space.names)
    region = region_of(study)
    minimize, select, running = bool(study.minimize), region.select, region.tell_running
    prior = study_prior(rt.db, study.parent_id, space, minimize=minimize, select=select)
    # a running trial told what it reached so far is no longer a pending point of the batch
    pending = [t for t in active
               if not (running and t.state == "running" and trial_metric(t, select) is not None)]
    fidelities = None
    if region.tell_epochs:  # each result with the epochs it was reached in
        reached = told_with_epochs(trials, names, select=select, running=running)
        results = [(p, v) for p, v, _ in reached]
        fidelities = [epoch_fidelity(e, region.epochs) for _, _, e in reached]
    else:
        results = told(trials, names, minimize=minimize, select=select, running=running)
    return propose(space, results, [{k: t.params[k] for k in names} for t in pending],
                   free, seed=study.seed, minimize=bool(study.minimize),
                   prior=prior, fidelities=fidelities)


class CohortStart(NamedTuple):
    """A cohort whose members start their next epoch now, together: its ``cohort_of`` key,
    the shard its next pass trains on, how many members go on, and the most it may have
    (``fuse_size``)."""

    cohort: str
    shard: int
    members: int
    most: int


def tune_step(rt: Runtime, study_id: int, joining: CohortStart | None = None
              ) -> list[Dispatch]:
    """Fill the study's free trial slots; finish the study when its budget is spent.

    With ``joining`` (a cohort at its epoch boundary), the new trials of its key
    start their first epoch in it, up to the region's ``fuse`` members: their first
    hops take the cohort's shard and travel in its message.

    Each trial it records carries the seconds this step had worked by then
    (``proposal_seconds``): what the planner holds a worker for a trial's start.
    """
    began = time.perf_counter()
    db = rt.db
    for _ in range(_PROPOSAL_ATTEMPTS):
        snapshot = db.trials(study_id)
        study = db.study(study_id)
        if study.state != "running":
            return []
        proposals = _proposals(rt, study, snapshot)
        with db.locked_study(study_id) as (conn, study):
            if study.state != "running":
                return []
            trials = db.trials(study_id, conn)
            if len(trials) != len(snapshot):
                continue  # another tune_step added trials meanwhile: propose again
            return _fill_slots(rt, conn, study, trials, proposals, began, joining)
    log.warning("study %d: tune_step gave way %d times; the next one fills the slots",
                study_id, _PROPOSAL_ATTEMPTS)
    return []


def _fill_slots(rt: Runtime, conn: Any, study: StudyRow, trials: list[TrialRow],
                proposals: list[dict[str, Any]], began: float,
                joining: CohortStart | None = None) -> list[Dispatch]:
    db = rt.db
    region = region_of(study)
    defaults = {**get_family(region).default_params, **region.params}
    if proposals:
        start = len(trials)
        entries = [({**defaults, **p}, trial_seed(study.seed, start + i))
                   for i, p in enumerate(proposals)]
        db.add_trials(conn, study.id, entries,
                      proposal_seconds=time.perf_counter() - began)
        trials = db.trials(study.id, conn)
    running = [t for t in trials if t.state == "running"]
    pending = [t for t in trials if t.state == "pending"]
    free = study.parallel - len(running)
    out: list[Dispatch] = []
    loads = HopRecords(db).shard_loads(region.name, live_after(), conn)
    starting = pending[: max(free, 0)]
    keys = [cohort_of(region, t.params) for t in starting]
    idle = len(idle_owners(loads, region.shards)) if region.fuses else 0
    params = {k: t.params for t, k in zip(starting, keys, strict=True) if k is not None}
    sizes = {k: cohort_size(keys.count(k), fuse_size(region, p, lambda: study.manifest["meta"]),
                            idle) for k, p in params.items()}
    # cohort -> its first shard, members so far, most members
    cohorts: dict[str, tuple[int, int, int]] = (
        {joining.cohort: (joining.shard, joining.members, joining.most)}
        if joining is not None else {})
    for trial, cohort in zip(starting, keys, strict=True):
        tentative = choose_visit_order(region.shards, trial.seed, 0,
                                       others_positions(rt, study.id, conn))
        joined = cohorts.get(cohort) if cohort is not None else None
        if joined is not None and joined[1] < joined[2]:  # starts with its cohort
            order = placed_order(tentative, 0, joined[0])
            cohorts[cohort] = (joined[0], joined[1] + 1, joined[2])
        else:
            order = first_shards([tentative], loads)[0]
            if cohort is not None:
                cohorts[cohort] = (order[0], 1, sizes[cohort])
        order, created = db.start_epoch(trial.id, 0, order, conn)
        if created:
            out.append(hop_dispatch(region.name, study.id, trial.id, 0, 0, order[0]))
    if not running and not pending and len(trials) >= study.budget:
        if _finish_study(rt, conn, study, trials):
            out.append(promote_dispatch(study.id))
    if not region.fuses:
        return out
    return form_cohorts(rt, out, regions={study.id: region},
                        params={t.id: t.params for t in trials})


def _finish_study(rt: Runtime, conn: Any, study: StudyRow,
                  trials: list[TrialRow]) -> bool:
    """End the study (in the caller's transaction); False if it had already ended."""
    best = best_trial(trials, bool(study.minimize), region_of(study).select)
    ended = rt.db.finish_study(study.id, "done" if best else "failed",
                               best_trial_id=best.id if best else None,
                               failure=None if best else "every trial failed", conn=conn)
    log.info("study %d of region %s finished: %s", study.id, study.region,
             "done" if best else "failed")
    return ended


def hand_on(rt: Runtime, report: HopReport) -> list[Dispatch]:
    """The messages a hop delivery sends: its own, and the epoch's end after its last hop."""
    end = report.epoch_end
    if end is None:
        return list(report.dispatch)
    return [*report.dispatch, *end_of_epoch(rt, end.region, end.study, end.trial, end.epoch,
                                            end.model, end.manifest, written=end.written)]


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
                            end.manifest, first_shard=first, written=end.written)
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
    steps = [d for d in out if d.task == "hoptune.tune_step" and d.kwargs["study"] == study.id]
    if not steps:  # no member ended here
        return out
    key = cohort_of(region, going_on[0].trial.params)
    if key is None:
        return out
    members = sum(cohort_of(region, e.trial.params) == key for e in going_on)
    most = fuse_size(region, going_on[0].trial.params, lambda: going_on[0].manifest["meta"])
    if members >= most:
        return out
    if idle_owners(HopRecords(rt.db).shard_loads(region.name, live_after()), region.shards):
        return out
    try:
        started = tune_step(rt, study.id, joining=CohortStart(key, first, members, most))
    except Exception:  # noqa: BLE001 - the tune_step message fills the slots instead
        log.warning("study %d: filling the slots at a cohort's epoch boundary failed; "
                    "sending tune_step", study.id, exc_info=True)
        return out
    return [d for d in out if d not in steps] + started


def end_of_epoch(rt: Runtime, region: RegionConfig, study: StudyRow,
                 trial: TrialRow, epoch: int, model: torch.nn.Module | None,
                 manifest: dict[str, Any], first_shard: int | None = None,
                 written: Future[Any] | None = None) -> list[Dispatch]:
    """Validate after an epoch's last hop; continue, prune or end the trial, once.

    ``first_shard`` (a cohort's, chosen by a member that went on first) is where
    the next epoch starts if the trial goes on; by default the placement chooses.
    ``written``: the write of the last hop's checkpoint, still under way behind it;
    the epoch is decided only once it landed (after a write that failed, it stays
    undecided and the last hop runs again: ``_write_failed``).

    The decision is one atomic step per (trial, epoch): a redelivered last hop
    finds it taken and changes nothing, so a copy never prunes a trial that
    already went on. It only sends again the next epoch's first hop while that
    still waits (the first decider may have died before sending it).
    """
    db = rt.db
    record = db.epoch(trial.id, epoch)
    if record is None or record.finished_at is not None:
        return _next_epoch_again(rt, region, study, trial.id, epoch)
    family = get_family(region)
    if model is None:  # a redelivered last hop: the weights are in its checkpoint
        model, _ = model_at(rt, region, study, trial, epoch, region.shards - 1, manifest["meta"])
    metric = float(family.evaluate(model, rt.validation(manifest)))
    if written is not None:  # validated while it was written; decided once it is
        try:
            written.result()
        except Exception as exc:  # noqa: BLE001 - logged by the writer: the hop runs again
            return _write_failed(rt, region, study, trial, epoch, exc)
    minimize = bool(study.minimize)
    order = None
    failure = None
    # what the decision reads, in one transaction that takes no write lock: a worker that
    # decides never queues behind another's record, and pays one round trip, not six
    with db.reading() as conn:
        history = [e for e in db.epochs(trial.id, conn) if e.epoch < epoch]
        if not math.isfinite(metric):
            outcome = "failed"
            name = family.scoring(manifest["meta"], trial.params)[0]
            failure = f"validation {name} is {metric} after epoch {epoch}"
        elif epoch + 1 >= min(study.epochs, trial_settings(region, trial.params).epochs):
            outcome = "done"  # the trial's own epochs (a hyperparameter) within the study's
        elif study.space is not None and _pruned(db, region, study, trial, epoch, metric,
                                                 conn=conn, history=history):
            outcome = "pruned"
        else:
            outcome = "continue"
            order = _next_order(rt, region, study, trial, epoch + 1, first_shard, conn)
    decided = db.end_epoch(trial.id, epoch, metric if math.isfinite(metric) else None,
                           minimize=minimize, outcome=outcome, failure=failure,
                           next_order=order)
    if not decided:
        return _next_epoch_again(rt, region, study, trial.id, epoch)
    renew_nightly_lock(rt, study)
    kept = _selected_end(region, [*history, dataclasses.replace(
        record, metric=metric if math.isfinite(metric) else None)], minimize)
    if order is not None:
        _drop_epoch_ends(rt, study.id, trial.id, region.shards, before=epoch, kept=kept)
        return [hop_dispatch(region.name, study.id, trial.id, epoch + 1, 0, order[0])]
    keep_final(rt.store, study.id, trial.id, epoch if outcome != "failed" else None,
               region.shards, also=kept if outcome != "failed" else ())
    return tune_step_after_end(db, study)


def _next_order(rt: Runtime, region: RegionConfig, study: StudyRow, trial: TrialRow,
                epoch: int, first_shard: int | None, conn: Any) -> list[int]:
    """The visit order of the trial's ``epoch``, placed by the others' hops and the shards'
    loads (read in ``conn``), or starting at ``first_shard`` where that is given. One shard
    has one order: nothing is read for it."""
    if region.shards == 1:
        return [0]
    tentative = choose_visit_order(region.shards, trial.seed, epoch,
                                   others_positions(rt, study.id, conn))
    if first_shard is not None:
        return placed_order(tentative, 0, first_shard)
    loads = HopRecords(rt.db).shard_loads(region.name, live_after(), conn)
    return first_shards([tentative], loads, rt.holder)[0]


def _write_failed(rt: Runtime, region: RegionConfig, study: StudyRow, trial: TrialRow,
                  epoch: int, exc: Exception) -> list[Dispatch]:
    """The epoch's last hop could not write its checkpoint: the epoch stays undecided and that
    hop runs again, as a reader that found the checkpoint missing would have it."""
    position = region.shards - 1
    report = HopReport(trial.id, epoch, position, -1)
    missing = CheckpointError(checkpoint_key(study.id, trial.id, epoch, position),
                              f"its write failed: {describe(exc)}")
    rewind(rt, region, study, trial, report, missing, at=(epoch, position))
    return report.dispatch


def _pruned(db: StudyDB, region: RegionConfig, study: StudyRow, trial: TrialRow, epoch: int,
            metric: float, *, conn: Any = None, history: list[EpochRow] | None = None) -> bool:
    """Whether the pruner stops the trial after ``epoch`` (0-based) with ``metric``: judged at
    this epoch's rung, and again at each rung it passed, on what the study recorded there.
    ``conn``: the caller's transaction to read in; ``history``: the trial's epochs before
    ``epoch``, where the caller read them already."""
    if conn is None:
        with db.reading() as own:
            return _pruned(db, region, study, trial, epoch, metric, conn=own, history=history)
    pruner = AshaPruner.from_settings(region.pruner, study.epochs,
                                      where=f"regions.{region.name}.pruner")
    if history is None:
        history = [e for e in db.epochs(trial.id, conn) if e.epoch < epoch]
    values = [float("nan") if e.metric is None else float(e.metric) for e in history] + [metric]
    rungs = {r: db.rung_values(study.id, r - 1, conn) for r in pruner.rungs() if r <= epoch}
    if epoch + 1 in pruner.rungs():
        rungs[epoch + 1] = [*db.rung_values(study.id, epoch, conn), metric]
    return pruner.should_stop(epoch + 1, values, rungs, minimize=bool(study.minimize),
                              number=trial.number)


def _selected_end(region: RegionConfig, ended: list[EpochRow], minimize: bool
                  ) -> tuple[int, ...]:
    """The epoch whose end ``select`` keeps beside the latest one (none for ``last``), of the
    trial's ``ended`` epochs, the one just decided last."""
    if region.select != "best":
        return ()
    chosen = selected_epoch(ended, minimize, "best")
    return () if chosen is None else (chosen[0],)


def _drop_epoch_ends(rt: Runtime, study_id: int, trial_id: int, shards: int, *, before: int,
                     kept: tuple[int, ...]) -> None:
    """Remove the ends of epochs before ``before - 1`` that are not selected.

    The hop keeps every epoch's end (it cannot tell the best one). The end of
    epoch ``before`` is what the next hop reads; the one before it stays one
    epoch longer, for a one-shard region to rewind into if the latest is unreadable.
    """
    for epoch in range(before - 1):
        if epoch not in kept:
            rt.store.delete(checkpoint_key(study_id, trial_id, epoch, shards - 1))


def _next_epoch_again(rt: Runtime, region: RegionConfig, study: StudyRow, trial_id: int,
                      epoch: int) -> list[Dispatch]:
    first = HopRecords(rt.db).get(trial_id, epoch + 1, 0)
    if first is None or first.state != "queued":
        return []
    return [hop_dispatch(region.name, study.id, trial_id, epoch + 1, 0, first.shard)]
