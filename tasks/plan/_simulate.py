"""A discrete-event simulation of studies on N workers, running the cluster's own policies.

Each study has K shards (rows per shard), a ``budget`` of trials with at most
``parallel`` in flight, and ``epochs`` epochs per trial. Its first hops are
placed as ``tune_step`` places them (``choose_visit_order`` then
``first_shards``), every later hop as ``StudyDB.hand_on_hop`` does
(``next_shard`` over the epoch's unvisited shards, ``placed_order``), and an
epoch's end decides as ``end_of_epoch`` does, with the real ``AshaPruner``.
The functions are looked up on their modules at call time, so the simulation
always runs the policy the cluster runs.

Workers consume the queues of the shards they own (replicas allowed), one hop
at a time, the oldest waiting message first. A hop holds its worker for
``hop_seconds(rows)``; an epoch's last hop also validates (``validation``
seconds); each message takes ``dispatch`` seconds from send to queue; after a
hop its worker takes ``turnaround`` seconds (the hand-on sent, the message
acknowledged, the next one fetched and claimed) before its next task. A
trial's end sends a ``tune_step`` to the control queue, which every worker
consumes as the cluster's workers do: it waits its turn with the hops, the
oldest message first, and holds the worker that takes it while the optimizer
proposes and the new trials are recorded; the trials it starts then send their
first hops. As ``tune_step`` does, it proposes for the slots free when it
starts (a slot freed meanwhile waits for its own step) and, where another
step recorded trials meanwhile, proposes again. ``start`` is the seconds
from a trial's end to its successor's first hop (the ``tune_step`` message,
its work and the hop's message), so a ``tune_step`` holds its worker
``start - 2 * dispatch`` seconds (at least 0) for each proposal;
``start_model`` replaces ``start`` once the study's optimizer proposes from
its model (``design_left`` of its trials have ended: fitting the model takes
longer than picking a point of the initial design); one with no slot to fill
(a slot another one filled, or the study's last, which records its end) only
reads, in no time. A study's
first trials wait ``head`` seconds instead (its first ``tune_step``, on a
worker that may still be importing, with nothing else to do yet). For
pruning each trial has a deterministic synthetic metric (its rank in a seeded
shuffle, the same at every epoch; ``draw`` picks the shuffle), so ASHA keeps
about one trial in ``reduction_factor`` at each rung, as it would on metrics in
random order;
``improving`` blends in a trend, later trials better (an optimizer that learns
from the earlier ones), so fewer are pruned.

A study under way is simulated from where it stands: ``in_flight`` names the
(epochs done, hops done in the current epoch) of each trial already started;
those trials are the study's first, they go on from there, and the rest of
the ``budget`` starts as they finish. A hop running now counts whole.

Plain functions over plain data: no Celery, Redis or database.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hoptune import tuner
from hoptune.tasks import hop
from hoptune.tasks.hop import trial_seed
from hoptune.tuner import AshaPruner, HopCost

__all__ = ["SimResult", "SimStudy", "assign_shards", "hop_seconds_from", "simulate",
           "worker_shards"]


def hop_seconds_from(cost: HopCost, batch_size: float, parameters: float, scale: float = 1.0
                     ) -> Callable[[int], float]:
    """A hop's seconds by its rows, from a fitted cost (times ``scale``, for a range)."""
    return lambda rows: scale * cost.seconds(rows, batch_size, parameters)


_CONTROL = ("", -1)  # the control queue's key among the shards' queues


@dataclass(frozen=True)
class SimStudy:
    """One study to simulate: a region's shards and its tuning settings."""

    region: str
    rows: Sequence[int]  # rows per shard; K = len(rows)
    hop_seconds: Callable[[int], float]
    budget: int  # trials to run, the ones in flight included
    parallel: int
    epochs: int
    seed: int = 0
    pruner: AshaPruner | None = None  # None: no pruning (a fixed configuration)
    minimize: bool = True
    # the metric a trial reports after an epoch (trial index, 1-based epoch); None: seeded ranks
    metric: Callable[[int, int], float] | None = None
    # trials already started, as (epochs done, hops done in the current epoch): a study under way
    in_flight: Sequence[tuple[int, int]] = ()
    # 0: the seeded ranks, in random order; 1: every trial better than the one before
    improving: float = 0.0
    # which random order of the ranks (one draw of many: a planner averages over draws)
    draw: int = 0
    # trials to end before its tune_steps propose from the model; None: never (no space)
    design_left: int | None = None

    @property
    def shards(self) -> int:
        return len(self.rows)


@dataclass
class SimResult:
    wall_seconds: float
    busy_share: dict[str, float]  # each worker's busy time over the wall time
    longest_backlog: int  # the most hops ever waiting on one shard's queue
    hops: int
    train_seconds: float  # hop time, summed over workers
    validation_seconds: float
    dispatch_seconds: float  # message time, summed over messages
    trials: dict[str, dict[str, int]] = field(default_factory=dict)  # per region: by outcome


def worker_shards(shards: dict[str, int], workers: int) -> list[list[tuple[str, int]]]:
    """The (region, shard) pairs each of ``workers`` workers owns: the one placement rule of
    local clusters (``hoptune up``, ``tune --local-workers``, the demo) and of the planner.

    A region with at least as many shards as workers: shard k to worker k mod N, so its hops
    spread over every worker. A region with fewer shards than workers: worker i holds shard
    i mod K, a replica where K < N, so every worker holds one shard of every region and none
    is idle; with one shard (``shards = "auto"``'s task parallelism) every worker holds it.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    out: list[list[tuple[str, int]]] = [[] for _ in range(workers)]
    for region in sorted(shards):
        k = shards[region]
        if k >= workers:
            for shard in range(k):
                out[shard % workers].append((region, shard))
        else:
            for i in range(workers):
                out[i].append((region, i % k))
    return out


def assign_shards(shards: dict[str, int], workers: int) -> dict[tuple[str, int], list[str]]:
    """Owners of each (region, shard), named ``w0``, ``w1``, …, as ``worker_shards`` places
    them."""
    owners: dict[tuple[str, int], list[str]] = {
        (r, k): [] for r, n in shards.items() for k in range(n)}
    for i, owned in enumerate(worker_shards(shards, workers)):
        for slot in owned:
            owners[slot].append(f"w{i}")
    return owners


@dataclass
class _Trial:
    index: int
    seed: int
    epoch: int = 0
    position: int = 0
    order: list[int] = field(default_factory=list)


@dataclass
class _Study:
    spec: SimStudy
    metrics: list[float]
    next_trial: int = 0
    running: dict[int, _Trial] = field(default_factory=dict)
    rung_values: dict[int, list[float]] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)


def _synthetic_metrics(spec: SimStudy) -> list[float]:
    ranks = list(range(spec.budget))
    random.Random(f"simulate:{spec.seed}" + (f":{spec.draw}" if spec.draw else "")
                  ).shuffle(ranks)
    trend = range(spec.budget - 1, -1, -1) if spec.minimize else range(spec.budget)
    return [(1 - spec.improving) * r + spec.improving * t
            for r, t in zip(ranks, trend, strict=True)]


def simulate(studies: Sequence[SimStudy], workers: int | dict[tuple[str, int], list[str]],
             *, validation: float = 0.0, dispatch: float = 0.0, start: float = 0.0,
             start_model: float | None = None, head: float = 0.0,
             turnaround: float = 0.0) -> SimResult:
    """Simulate ``studies`` started together on ``workers`` (a count, or owners per shard);
    ``start_model`` defaults to ``start``."""
    names = [s.region for s in studies]
    if len(set(names)) != len(names):
        raise ValueError("one study per region")
    owners = (assign_shards({s.region: s.shards for s in studies}, workers)
              if isinstance(workers, int) else workers)
    return _Simulation(studies, owners, validation=validation, dispatch=dispatch, start=start,
                       start_model=start_model, head=head, turnaround=turnaround).run()


class _Simulation:
    """One run of ``simulate``: the clock, the events to come, the queues and the workers.

    An event is ``(at, seq, kind, payload)``: the heap pops the earliest, and of
    events at the same time the one pushed first. A queued message is
    ``(arrived, seq, region, trial)``, ``seq`` the last event's number when it
    arrived; a worker takes the oldest message of the queues it consumes.
    """

    def __init__(self, studies: Sequence[SimStudy], owners: dict[tuple[str, int], list[str]],
                 *, validation: float, dispatch: float, start: float,
                 start_model: float | None, head: float, turnaround: float) -> None:
        self.owners = owners
        self.validation = validation
        self.dispatch = dispatch
        self.start = start
        self.head = head
        self.turnaround = turnaround
        self.state = {s.region: _Study(s, _synthetic_metrics(s)) for s in studies}
        self.everyone = sorted({w for o in owners.values() for w in o})
        self.busy = dict.fromkeys(self.everyone, 0.0)
        self.idle = set(self.everyone)
        self.queued: dict[tuple[str, int], list[tuple[float, int, str, int]]] = {
            s: [] for s in owners}
        self.queued[_CONTROL] = []  # tune_steps: (arrived, seq, region, -1), taken by any worker
        # a tune_step's work on its worker: proposing from the initial design, from the model
        model = start if start_model is None else start_model
        self.hold = {False: max(0.0, start - 2 * dispatch), True: max(0.0, model - 2 * dispatch)}
        self.running = dict.fromkeys(owners, 0)
        self.sent = dict.fromkeys(owners, 0)  # hops on their way: queued already
        self.held = dict.fromkeys(self.everyone, 0)
        self.events: list[tuple[float, int, str, tuple]] = []
        self.seq = 0
        self.totals = {"hops": 0, "train": 0.0, "validation": 0.0, "dispatch": 0.0, "backlog": 0}
        self.now = 0.0

    def run(self) -> SimResult:
        """Start every study, then play the events until none is left."""
        for study in self.state.values():
            self.resume_trials(study)
            self.start_trials(study, self.start if study.spec.in_flight else self.head)
        steps = {"arrive": self.arrive, "tune_step": self.recorded, "free": self.take,
                 "done": self.hop_done}
        while self.events:
            self.now, _, kind, payload = heapq.heappop(self.events)
            steps[kind](*payload)
        wall, totals = self.now, self.totals
        return SimResult(
            wall_seconds=wall,
            busy_share={w: (b / wall if wall > 0 else 0.0) for w, b in self.busy.items()},
            longest_backlog=totals["backlog"], hops=totals["hops"],
            train_seconds=totals["train"], validation_seconds=totals["validation"],
            dispatch_seconds=totals["dispatch"],
            trials={r: dict(s.outcomes) for r, s in self.state.items()})

    def push(self, at: float, kind: str, payload: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def loads(self, region: str) -> tuner.ShardLoads:
        """The region's shards as the cluster's placement reads them."""
        k = self.state[region].spec.shards
        return tuner.ShardLoads(
            queued={s: len(self.queued[(region, s)]) + self.sent[(region, s)] for s in range(k)},
            running={s: self.running[(region, s)] for s in range(k)},
            owners={s: list(self.owners[(region, s)]) for s in range(k)}, held=dict(self.held))

    def send(self, region: str, trial: int, shard: int, delay: float = 0.0) -> None:
        """A hop's message, on its way to the shard's queue."""
        self.totals["dispatch"] += self.dispatch + delay
        self.sent[(region, shard)] += 1
        self.push(self.now + delay + self.dispatch, "arrive", (region, trial, shard))

    def first_order(self, study: _Study, trial: _Trial, epoch: int, here: str | None = None
                    ) -> list[int]:
        """An epoch's visit order, placed as ``tune_step`` and ``end_of_epoch`` place it."""
        others = [(t.order, t.position) for t in study.running.values() if t is not trial]
        tentative = hop.choose_visit_order(study.spec.shards, trial.seed, epoch, others)
        return tuner.first_shards([tentative], self.loads(study.spec.region), here)[0]

    def resume_trials(self, study: _Study) -> None:
        """The trials of a study under way, each sending the hop it stands at."""
        spec = study.spec
        if len(spec.in_flight) > spec.budget:
            raise ValueError(f"{spec.region}: {len(spec.in_flight)} trials in flight, more "
                             f"than the budget of {spec.budget}")
        for epoch, position in spec.in_flight:
            if not (0 <= epoch < spec.epochs and 0 <= position < spec.shards):
                raise ValueError(f"{spec.region}: a trial in flight at epoch {epoch}, hop "
                                 f"{position} is outside {spec.epochs} epochs of "
                                 f"{spec.shards} hops")
            self.new_trial(study, epoch, position)
            # it passed the rungs below its epoch: its values stand there, as they do in the
            # study database, for the trials judged at those rungs later (itself included,
            # with ``recheck``)
            for rung in spec.pruner.rungs() if spec.pruner is not None else ():
                if rung <= epoch:
                    study.rung_values.setdefault(rung, []).append(
                        self.metric_at(study, study.next_trial - 1, rung))

    def start_trials(self, study: _Study, delay: float, limit: int | None = None) -> None:
        """New trials in the study's free slots (at most ``limit``), each sending its first hop."""
        spec = study.spec
        started = 0
        while len(study.running) < spec.parallel and study.next_trial < spec.budget \
                and (limit is None or started < limit):
            started += 1
            self.new_trial(study, delay=delay)

    def new_trial(self, study: _Study, epoch: int = 0, position: int = 0, delay: float = 0.0
                  ) -> None:
        """The study's next trial, standing at ``epoch`` and ``position``: it sends that hop."""
        spec = study.spec
        trial = _Trial(study.next_trial, seed=trial_seed(spec.seed, study.next_trial),
                       epoch=epoch, position=position)
        study.next_trial += 1
        study.running[trial.index] = trial
        trial.order = self.first_order(study, trial, epoch)
        self.send(spec.region, trial.index, trial.order[position], delay)

    def arrive(self, region: str, trial: int, shard: int) -> None:
        """A hop, or a ``tune_step`` (trial -1), reaches its queue and wakes an idle worker."""
        key = (region, shard) if trial >= 0 else _CONTROL
        if trial >= 0:
            self.sent[key] -= 1
            self.totals["backlog"] = max(self.totals["backlog"], len(self.queued[key]) + 1)
        heapq.heappush(self.queued[key], (self.now, self.seq, region, trial))
        for worker in sorted(self.owners[key]) if trial >= 0 else self.everyone:
            if worker in self.idle:
                self.take(worker)
                break

    def take(self, worker: str) -> None:
        """``worker`` takes the oldest message of its queues, or goes idle."""
        mine = [s for s, o in self.owners.items() if worker in o and self.queued[s]]
        if self.queued[_CONTROL]:
            mine.append(_CONTROL)
        if not mine:
            self.idle.add(worker)
            return
        shard = min(mine, key=lambda s: self.queued[s][0][:2])
        _, _, region, trial = heapq.heappop(self.queued[shard])
        self.idle.discard(worker)
        if shard == _CONTROL:
            self.propose(worker, region)
        else:
            self.train(worker, shard, region, trial)

    def train(self, worker: str, shard: tuple[str, int], region: str, trial: int) -> None:
        """A hop on ``worker``, validating after an epoch's last shard."""
        study = self.state[region]
        t = study.running[trial]
        seconds = study.spec.hop_seconds(study.spec.rows[shard[1]])
        self.totals["train"] += seconds
        if t.position == study.spec.shards - 1:
            seconds += self.validation
            self.totals["validation"] += self.validation
        self.running[shard] += 1
        self.held[worker] += 1
        self.busy[worker] += seconds
        self.totals["hops"] += 1
        self.push(self.now + seconds, "done", (worker, shard, region, trial))

    def propose(self, worker: str, region: str) -> None:
        """A ``tune_step`` on ``worker`` proposes for the slots free now (its work holds the
        worker); with no slot free it only reads, in no time."""
        study = self.state[region]
        free = min(study.spec.parallel - len(study.running),
                   study.spec.budget - study.next_trial)
        if free <= 0:
            self.push(self.now, "tune_step", (worker, region, study.next_trial, 0))
            return
        left = study.spec.design_left
        modelled = left is not None and sum(study.outcomes.values()) >= left
        self.push(self.now + self.hold[modelled], "tune_step",
                  (worker, region, study.next_trial, free))

    def recorded(self, worker: str, region: str, seen: int, free: int) -> None:
        """A ``tune_step`` records its proposals, or proposes again if another one recorded."""
        if free and self.state[region].next_trial != seen:
            self.propose(worker, region)
            return
        self.start_trials(self.state[region], 0.0, free)
        self.take(worker)

    def hop_done(self, worker: str, shard: tuple[str, int], region: str, trial: int) -> None:
        """A hop ends: its trial hands on or ends its epoch; its worker takes its next task."""
        self.running[shard] -= 1
        self.held[worker] -= 1
        study = self.state[region]
        t = study.running[trial]
        if t.position + 1 < study.spec.shards:
            self.hand_on(study, t, worker)
        else:
            self.end_epoch(study, t, worker)
        if self.turnaround > 0:
            self.push(self.now + self.turnaround, "free", (worker,))
        else:
            self.take(worker)

    def hand_on(self, study: _Study, t: _Trial, here: str) -> None:
        """The trial's next hop, placed as ``StudyDB.hand_on_hop`` places it."""
        shards = study.spec.shards
        following = t.position + 1
        nxt = t.order[following]
        if following + 1 < shards:
            nxt = tuner.next_shard(t.order[following:], self.loads(study.spec.region), shards,
                                   here)
        t.order = tuner.placed_order(t.order, following, nxt)
        t.position = following
        self.send(study.spec.region, t.index, nxt)

    @staticmethod
    def metric_at(study: _Study, trial: int, epoch: int) -> float:
        """The metric trial ``trial`` reports after ``epoch`` (1-based)."""
        spec = study.spec
        return spec.metric(trial, epoch) if spec.metric else study.metrics[trial]

    def pruned(self, study: _Study, t: _Trial, epoch: int) -> bool:
        """Whether the study's pruner stops the trial after ``epoch`` (1-based), as
        ``end_of_epoch`` asks it: judged at this rung and again at those it passed."""
        spec = study.spec
        history = [self.metric_at(study, t.index, e) for e in range(1, epoch + 1)]
        rungs = {r: study.rung_values.get(r, []) for r in spec.pruner.rungs() if r <= epoch}
        return spec.pruner.should_stop(epoch, history, rungs, minimize=spec.minimize,
                                       number=t.index)

    def end_epoch(self, study: _Study, t: _Trial, here: str) -> None:
        """The trial's epoch ends as ``end_of_epoch`` ends it: the next epoch, or the trial
        done or pruned, which sends its study a ``tune_step`` where that has work."""
        spec = study.spec
        epoch = t.epoch + 1  # 1-based, as end_of_epoch passes it
        metric = self.metric_at(study, t.index, epoch)
        values = study.rung_values.setdefault(epoch, [])
        values.append(metric)
        if epoch >= spec.epochs:
            outcome = "done"
        elif spec.pruner is not None and self.pruned(study, t, epoch):
            outcome = "pruned"
        else:
            t.epoch, t.position = epoch, 0
            t.order = self.first_order(study, t, epoch, here)
            self.send(spec.region, t.index, t.order[0])
            return
        study.outcomes[outcome] = study.outcomes.get(outcome, 0) + 1
        del study.running[t.index]
        if study.next_trial >= spec.budget and study.running:
            return  # its tune_step would have no work: none is sent (``tune_step_after_end``)
        self.totals["dispatch"] += self.dispatch
        self.push(self.now + self.dispatch, "arrive", (spec.region, -1, _CONTROL[1]))
