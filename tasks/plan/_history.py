"""What the planner learns from the recorded studies besides the hop costs.

``median_gaps``: the seconds a schedule spends outside hops (an epoch's
validation, a message, a trial's start, a study's first ``tune_step``), as
medians over the recorded hops, epochs and trials. A trial's start is two
figures: one where its ``tune_step`` proposed a point of the optimizer's
initial design (milliseconds), one where it proposed from the optimizer's
model (a Gaussian process fitted to the results so far: about a tenth of a
second on a small host), as ``design_left`` tells them apart: the results the
optimizer still needs (its space's initial points, less the usable results of
the study's parent and those told so far). Each is the ``tune_step``'s
recorded work (``proposal_seconds``, one figure per step) between two
messages; for trials recorded without it, the gap from the end of the trial
whose slot it took to its first hop's start, counted from when that hop's
worker was free. That gap misses the step's work whenever the step ran on
another worker than the first hop: in a 16-trial study on 2 workers its
median was 0.009 s where the steps worked 0.05 to 0.17 s. ``pruning_record``: each tuned
study with rungs, its shape and how many epochs its finished trials trained
under ASHA, from which the planner fits the simulated metrics' trend.
"""

from __future__ import annotations

import bisect
import statistics
from typing import Any, NamedTuple

from hoptune.tuner import AshaPruner, HopRecords, HopRow, Space, StudyDB, StudyRow, TrialRow

__all__ = ["Gaps", "Shape", "design_left", "median_gaps", "pruning_record"]


class Gaps(NamedTuple):
    validation: float  # from an epoch's last hop to its end
    dispatch: float  # from a hop's end to the next hop's start, its worker free
    # from a trial's end to its successor's first hop, a design point's and the model's
    # (where the tune_steps' work is recorded: two messages and the median step's work)
    start: float
    start_model: float
    head: float  # from a study's start to its first hop's message
    turnaround: float = 0.0  # from a hop's end to its worker's next, its message waiting


def design_left(db: StudyDB, space: Space | None, parent_id: int | None, *, minimize: bool,
                select: str, told: int = 0) -> int | None:
    """How many more results a study's optimizer needs before it proposes from its model,
    ``told`` of its own known: the initial points of its ``space``, less those and the
    usable results of its parent (``parent_id``), as ``propose`` counts them. None: no
    space, no proposals."""
    from hoptune.tuner import select_prior, study_prior

    if space is None:
        return None
    prior = select_prior(space, study_prior(db, parent_id, space, minimize=minimize,
                                            select=select), minimize=minimize)
    return max(0, space.initial_points - len(prior) - told)


def _design_left(db: StudyDB, study: StudyRow) -> int | None:
    """``design_left`` of a recorded study, at its start."""
    from hoptune.tasks.worker import region_of

    space = Space.from_json(study.space) if study.space is not None else None
    return design_left(db, space, study.parent_id, minimize=bool(study.minimize),
                       select=region_of(study).select)


def median_gaps(db: StudyDB, studies: list[StudyRow], beside: list[StudyRow] = ()) -> Gaps:
    """Medians of the seconds from a hop's end to its epoch's end, to the next hop's start,
    from a trial's end to the start of the trial that took its slot (a design point's, a
    model's: the design's where no model proposal is recorded), from a study's start
    to its first hop's message (its first ``tune_step``), and from a hop's end to the start
    of its worker's next hop where that hop's message was waiting already (the worker's
    turnaround: the hand-on, the acknowledgement, the next message's fetch and claim).

    A hop that waited for its worker to finish another hop waited in the queue, which the
    simulator schedules itself: the gaps before a hop count from when its worker was free.
    ``beside``: other studies whose hops may have held the same workers meanwhile (a night's
    other regions): only those that overlap ``studies`` in time are read, and only to tell
    when a worker was free, never sampled. Without them, a region planned alone after a
    night of three on two workers took the other regions' hops for gaps: 0.17 s a message
    where its hops' hand-ons took 0.014.
    """
    done = _done_hops(db, studies)
    held = {**_done_hops(db, _overlapping(beside, studies)), **done}
    samples = _Samples(_Workers(held, sampled=set(done)))
    for study in studies:
        samples.add_study(db, study, done)
    return samples.medians()


def _overlapping(beside: list[StudyRow], studies: list[StudyRow]) -> list[StudyRow]:
    """Those of ``beside`` (``studies`` aside) that ran while any of ``studies`` did."""
    if not studies:
        return []
    ids = {s.id for s in studies}
    start = min(s.created_at for s in studies)
    end = None if any(s.finished_at is None for s in studies) else max(
        s.finished_at for s in studies)
    return [s for s in beside if s.id not in ids and (end is None or s.created_at <= end)
            and (s.finished_at is None or s.finished_at >= start)]


def _done_hops(db: StudyDB, studies: list[StudyRow]) -> dict[int, list[HopRow]]:
    """The studies' hops that ran to their end, by trial."""
    done: dict[int, list[HopRow]] = {}
    for study in studies:
        for h in HopRecords(db).all(study_id=study.id):
            if h.state == "done" and h.started_at is not None \
                    and h.finished_at is not None:
                done.setdefault(h.trial_id, []).append(h)
    return done


def _median(x: list[float]) -> float:
    return statistics.median(x) if x else 0.0


class _Workers:
    """The hops each worker ran, in the order they started: when was a hop's worker free."""

    def __init__(self, done: dict[int, list[HopRow]], sampled: set[int] | None = None
                 ) -> None:
        self.sampled = set(done) if sampled is None else sampled  # trials whose hops count
        self.hops: dict[str, list[HopRow]] = {}
        for h in (h for hops in done.values() for h in hops):
            self.hops.setdefault(h.worker, []).append(h)
        self.starts = {}
        for worker, hops in self.hops.items():
            hops.sort(key=lambda h: h.started_at)
            self.starts[worker] = [h.started_at for h in hops]

    def turnaround(self) -> list[float]:
        """From a hop's end to its worker's next hop's start, that hop's message waiting (the
        next hop one of the sampled trials')."""
        return [max(0.0, (b.started_at - a.finished_at).total_seconds())
                for hops in self.hops.values()
                for a, b in zip(hops, hops[1:], strict=False)
                if b.queued_at <= a.finished_at and b.trial_id in self.sampled]

    def ready(self, hop: HopRow, since: Any) -> float:
        """Seconds from ``since`` or its worker's previous hop's end, the later, to ``hop``."""
        i = bisect.bisect_left(self.starts[hop.worker], hop.started_at)
        free = self.hops[hop.worker][i - 1].finished_at if i > 0 else since
        return max(0.0, (hop.started_at - max(since, free)).total_seconds())


class _Samples:
    """The gaps measured in the recorded studies, by kind, before their medians."""

    def __init__(self, workers: _Workers) -> None:
        self.workers = workers
        self.hand_on: list[float] = []
        self.validation: list[float] = []
        self.head: list[float] = []
        self.start: dict[bool, list[float]] = {False: [], True: []}  # by: from the model
        # the work of each tune_step that started a trial once another had ended, where
        # recorded (``proposal_seconds``): one figure per step (its trials share their creation)
        self.held: dict[bool, dict[tuple[int, Any], float]] = {False: {}, True: {}}

    def add_study(self, db: StudyDB, study: StudyRow, done: dict[int, list[HopRow]]
                  ) -> None:
        """A study's hand-ons, validations, trial starts and head."""
        ends, firsts, queued = [], [], []
        trials = db.trials(study.id)
        needed = _design_left(db, study)
        told = sorted(t.finished_at for t in trials
                      if t.state in ("done", "pruned") and t.finished_at is not None)
        first_end = min((t.finished_at for t in trials if t.finished_at is not None),
                        default=None)
        for trial in trials:
            if trial.finished_at is not None:
                ends.append(trial.finished_at)
            modelled = needed is not None and \
                bisect.bisect_right(told, trial.created_at) >= needed
            if trial.proposal_seconds is not None and first_end is not None \
                    and trial.created_at >= first_end:
                self.held[modelled][study.id, trial.created_at] = trial.proposal_seconds
            hops = done.get(trial.id, [])
            if hops:
                firsts.append((min(hops, key=lambda h: h.started_at), modelled))
                queued.append(min(h.queued_at for h in hops))
            self.add_epochs(db, trial, hops)
        for first, modelled in firsts:  # a trial started once another had ended: its wait
            before = [e for e in ends if e <= first.started_at]
            if before:
                self.start[modelled].append(self.workers.ready(first, max(before)))
        if queued:
            self.head.append(max(0.0, (min(queued) - study.created_at).total_seconds()))

    def add_epochs(self, db: StudyDB, trial: TrialRow, hops: list[HopRow]) -> None:
        """A trial's hand-ons within each epoch, and each epoch's validation."""
        by_epoch: dict[int, list[HopRow]] = {}
        for h in hops:
            by_epoch.setdefault(h.epoch, []).append(h)
        for epoch, group in by_epoch.items():
            group.sort(key=lambda h: h.position)
            self.hand_on += [self.workers.ready(b, a.finished_at)
                             for a, b in zip(group, group[1:], strict=False)]
            record = db.epoch(trial.id, epoch)
            if record is not None and record.finished_at is not None:
                self.validation.append(max(0.0, (record.finished_at
                                                 - group[-1].finished_at).total_seconds()))

    def started(self, modelled: bool, dispatch: float) -> float | None:
        """A trial's start: its tune_step's message, work and first hop's message where
        the work is recorded; else the measured gap (None: neither)."""
        if self.held[modelled]:
            return 2 * dispatch + _median(list(self.held[modelled].values()))
        return _median(self.start[modelled]) if self.start[modelled] else None

    def medians(self) -> Gaps:
        dispatch = _median(self.hand_on)
        design = self.started(False, dispatch) or 0.0
        model = self.started(True, dispatch)
        return Gaps(_median(self.validation), dispatch, design,
                    design if model is None else model, _median(self.head),
                    _median(self.workers.turnaround()))


class Shape(NamedTuple):
    """What decides how many of a study's trials ASHA prunes, the metrics aside."""

    budget: int
    parallel: int
    epochs: int
    shards: int
    reduction_factor: int
    min_epochs: int
    recheck: bool = True
    brackets: int = 1


def pruning_record(db: StudyDB, studies: list[StudyRow]) -> list[tuple[Shape, int, int]]:
    """(shape, finished trials, epochs those trials trained) of each tuned study with rungs."""
    from hoptune.tasks.worker import region_of

    out = []
    for study in studies:
        p = region_of(study).pruner
        if study.kind != "tune" or study.space is None or not AshaPruner.from_settings(
                p, study.epochs).rungs():
            continue
        finished = [t for t in db.trials(study.id) if t.state in ("done", "pruned")]
        if finished:
            out.append((Shape(study.budget, study.parallel, study.epochs,
                              len(study.manifest["rows"]), p.reduction_factor,
                              p.min_epochs, p.recheck, p.brackets), len(finished),
                        sum(t.epochs_done for t in finished)))
    return out
