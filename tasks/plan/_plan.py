"""``hoptune plan``: a study's or a night's wall time on N workers, and the workers a deadline
needs.

The hop cost is fitted from the hops the cluster recorded (``fit_costs`` over
``recorded_observations``) for the region's model family, taking the given
host class's or else the (device, host class) with the most recorded hops; the
seconds an epoch's validation, a message, a trial's start and a study's first
``tune_step`` add are the medians of the gaps the recorded hops, epochs and
trials show (counted from when the hop's worker was free).
The schedule is the simulator's (``tasks.plan._simulate``), which runs the
cluster's own visit-order, placement and pruning. Where the history holds
tuned studies with rungs, the epochs their trials trained under ASHA set the
simulated metrics' trend (later trials better: an optimizer that learns prunes
fewer than metrics in random order would), the trend whose simulated epochs
come closest (``tasks.plan._synthetic``). The range comes from the cost
model's spread: every hop ``1 - spread`` and ``1 + spread`` times its fitted cost.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, replace
from typing import Any

from hoptune.core import HoptuneError, StudyError
from hoptune.regions import Config, RegionConfig, get_family, region_batch_size
from hoptune.tasks.plan._costs import parameter_count, recorded_observations
from hoptune.tasks.plan._history import design_left, median_gaps, pruning_record
from hoptune.tasks.plan._simulate import SimResult, SimStudy, hop_seconds_from, simulate
from hoptune.tasks.plan._synthetic import _trend, draws, mean_result
from hoptune.tasks.worker import Runtime
from hoptune.tuner import (
    AshaPruner,
    HopCost,
    HopRecords,
    Space,
    StudyDB,
    StudyRow,
    fit_costs,
    parse_space,
)

__all__ = ["Plan", "Planner", "format_plan", "live_owners", "most_workers", "plan",
           "progress", "workers_for"]

log = logging.getLogger(__name__)

Workers = int | dict[tuple[str, int], list[str]]  # a count, or the owners of each shard
MAX_WORKERS = 256  # the deadline search stops here


@dataclass(frozen=True)
class _Inputs:
    """What the simulator needs for one region, from its configuration and history."""

    region: RegionConfig
    rows: list[int]
    cost: HopCost
    batch_size: float  # the harmonic mean over the trials (see ``_sizes``)
    parameters: float  # the mean over the trials
    budget: int  # trials to run, the ones in flight included
    parallel: int
    epochs: int
    seed: int
    in_flight: tuple[tuple[int, int], ...] = ()
    improving: float = 0.0  # the simulator's metric trend (see ``_trend``)
    design_left: int | None = None  # trials to end before the optimizer's model proposes


@dataclass
class Plan:
    workers: int
    wall_seconds: float
    low_seconds: float
    high_seconds: float
    busy_share: dict[str, float]
    longest_backlog: int
    hops: int
    train_seconds: float
    validation_seconds: float
    dispatch_seconds: float
    validation: float
    dispatch: float
    start: float
    start_model: float
    head: float
    turnaround: float
    costs: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _cost(region: RegionConfig, costs: dict[Any, HopCost], host: str | None = None
          ) -> HopCost:
    """The family's cost on host class ``host`` where it has one, else the one with the most
    recorded hops."""
    mine = [c for k, c in costs.items() if k.family == region.family]
    if not mine:
        raise StudyError(f"no recorded hops of family {region.family!r} (region {region.name}): "
                         f"tune the region once (`hoptune tune {region.name}`) or calibrate "
                         f"(`hoptune plan {region.name} --calibrate`) to record them")
    return max(mine, key=lambda c: (c.key.host == host, c.hops))


def _sizes(region: RegionConfig, region_config: dict[str, Any],
           recorded: dict[str, Any] | None, manifest: dict[str, Any]) -> dict[str, Any]:
    """The region's rows per shard, and the batch size and parameter count a hop's cost is
    predicted with: those of the configured parameters, or, for a tuned region, their
    expectation over the trials the study will run (``trial_sizes``). ``region_config`` and
    ``recorded`` (the manifest a study recorded, if any) size its models."""
    default = {**get_family(region).default_params, **region.params}
    trials = [default]
    if region.space:
        trials = [{**default, **p} for p in trial_sizes(region)]
    # the new study's batch size: "auto" resolved as the study will resolve it
    batch = region_batch_size(region, sum(int(r) for r in manifest["rows"]))
    batches = [int(p.get("batch_size", batch)) for p in trials]
    return {"rows": [int(r) for r in manifest["rows"]],
            # a hop's cost is linear in 1/batch size and in the parameter count: their means
            # give the mean cost
            "batch_size": len(batches) / sum(1 / b for b in batches),
            "parameters": statistics.fmean(parameter_count(region_config, recorded, p)
                                           for p in trials)}


def trial_sizes(region: RegionConfig, n: int | None = None) -> list[dict[str, Any]]:
    """Params spread over the region's space as its study's trials are: the optimizer's
    initial design of its seed, ``n`` points (default: its ``trials``). The model's later
    proposals are unknown before the study; this spread is the best guess of their sizes."""
    space = parse_space(region.space, f"regions.{region.name}.space")
    return space.design(region.seed, region.trials if n is None else n)


def _inputs(rt: Runtime, region: RegionConfig, costs: dict[Any, HopCost],
            host: str | None = None) -> _Inputs:
    """A new study of ``region`` as configured, sized like its latest study."""
    cost = _cost(region, costs, host)
    study = rt.db.latest_study(region.name, kind=None)
    if study is None:  # never tuned, its family's cost known: sized from its ingested data
        try:
            manifest = rt.manifest(region.name)
        except HoptuneError as exc:
            raise StudyError(f"region {region.name} has no study and no ingested data: "
                             f"`hoptune ingest {region.name}` first ({exc})") from None
        sizes = _sizes(region, region.model_dump(mode="json"), manifest, manifest)
    else:
        sizes = _sizes(region, study.region_config, study.manifest,
                       study.manifest or rt.manifest(region.name))
    parent = rt.db.latest_study(region.name, state="done")  # the warm start a study gets
    space = parse_space(region.space, f"regions.{region.name}.space") if region.space else None
    left = design_left(rt.db, space, parent.id if parent else None,
                       minimize=bool(parent.minimize) if parent else True,
                       select=region.select)
    return _Inputs(region=region, cost=cost, budget=region.trials, parallel=region.parallel,
                   epochs=region.epochs, seed=region.seed, design_left=left,
                   **sizes)


def progress(db: StudyDB, study: StudyRow) -> tuple[tuple[tuple[int, int], ...], int]:
    """A running study's trials in flight, as (epochs done, hops done in the current epoch),
    and how many of its trials are still to start."""
    trials = db.trials(study.id)
    done: dict[tuple[int, int], int] = {}
    for hop in HopRecords(db).all(study_id=study.id):
        if hop.state == "done":
            done[hop.trial_id, hop.epoch] = done.get((hop.trial_id, hop.epoch), 0) + 1
    shards = len(study.manifest["rows"])
    in_flight = []
    for t in trials:
        if t.state not in ("pending", "running"):
            continue
        epoch = min(int(t.epochs_done), study.epochs - 1)
        in_flight.append((epoch, min(done.get((t.id, epoch), 0), shards - 1)))
    return tuple(in_flight), max(0, study.budget - len(trials))


def _under_way(db: StudyDB, study: StudyRow, costs: dict[Any, HopCost]) -> _Inputs:
    """What is left of a running study."""
    from hoptune.tasks.worker import region_of

    region = region_of(study)
    in_flight, to_start = progress(db, study)
    space = Space.from_json(study.space) if study.space is not None else None
    told = sum(n for state, n in db.counts(study.id).items() if state in ("done", "pruned"))
    left = design_left(db, space, study.parent_id, minimize=bool(study.minimize),
                       select=region.select, told=told)
    return _Inputs(region=region, cost=_cost(region, costs),
                   budget=len(in_flight) + to_start, parallel=study.parallel,
                   epochs=study.epochs, seed=study.seed, in_flight=in_flight,
                   design_left=left,
                   **_sizes(region, study.region_config, study.manifest, study.manifest))


def _studies(inputs: list[_Inputs], scale: float) -> list[SimStudy]:
    out = []
    for i in inputs:
        r = i.region
        pruner = AshaPruner.from_settings(r.pruner, i.epochs) if r.space else None
        out.append(SimStudy(r.name, rows=i.rows, budget=i.budget, parallel=i.parallel,
                            epochs=i.epochs, seed=i.seed, pruner=pruner,
                            in_flight=i.in_flight, improving=i.improving,
                            design_left=i.design_left,
                            hop_seconds=hop_seconds_from(i.cost, i.batch_size, i.parameters,
                                                         scale)))
    return out


class Planner:
    """The inputs read once; ``plan(workers)`` simulates."""

    def __init__(self, rt: Runtime, config: Config, regions: list[str], *,
                 history: list[StudyRow] | None = None, host: str | None = None
                 ) -> None:
        """``history``: the studies whose hops and gaps to learn from (default: all);
        ``host``: the host class whose hop costs to plan with, where it has some."""
        costs = fit_costs(recorded_observations(rt.db, history))
        self._setup(rt.db, [_inputs(rt, config.region(n), costs, host) for n in regions],
                    history)

    @classmethod
    def under_way(cls, db: StudyDB, running: list[StudyRow]) -> Planner:
        """A planner of what is left of the ``running`` studies (their trials in flight
        go on from where they stand)."""
        planner = cls.__new__(cls)
        costs = fit_costs(recorded_observations(db))
        planner._setup(db, [_under_way(db, s, costs) for s in running])
        return planner

    def _setup(self, db: StudyDB, inputs: list[_Inputs],
               history: list[StudyRow] | None = None) -> None:
        """The gaps from the regions' own finished studies, or, where they have none yet,
        from every finished study of their families."""
        self.inputs = inputs
        regions = {i.region.name for i in inputs}
        families = {i.region.family for i in inputs}
        finished = [s for s in (db.studies() if history is None else history)
                    if s.state != "running"]
        own = [s for s in finished if s.region in regions]
        if not own:
            from hoptune.tasks.worker import region_of

            own = [s for s in finished if region_of(s).family in families]
        (self.validation, self.dispatch, self.start, self.start_model,
         self.head, self.turnaround) = median_gaps(db, own, beside=finished)
        trend = _trend(pruning_record(db, own))
        self.inputs = [replace(i, improving=trend if i.region.space else 0.0) for i in inputs]

    def _draws(self, workers: Workers, scale: float = 1.0) -> list[SimResult]:
        """The simulation once per draw of the studies' metrics: with rungs, ``draws`` of them,
        so each study's ``ORDERS`` orders are averaged (which trials a rung keeps changes the
        hops a study trains); without, once."""
        studies = _studies(self.inputs, scale)
        ranked = sum(s.pruner is not None and bool(s.pruner.rungs()) for s in studies)
        return [simulate([replace(s, draw=d) for s in studies], workers,
                         validation=self.validation, dispatch=self.dispatch, start=self.start,
                         start_model=self.start_model, head=self.head,
                         turnaround=self.turnaround)
                for d in range(draws(ranked) if ranked else 1)]

    def _run(self, workers: Workers, scale: float = 1.0) -> SimResult:
        """The simulation's expectation: its mean over the draws."""
        return mean_result(self._draws(workers, scale))

    def wall(self, workers: Workers) -> float:
        """The predicted wall time alone (the fitted costs, no range)."""
        return self._run(workers).wall_seconds

    def owners(self, owners: Workers) -> Workers:
        """``owners`` where every shard planned has one; else as many workers, round robin."""
        if isinstance(owners, dict):
            shards = {(i.region.name, k) for i in self.inputs for k in range(len(i.rows))}
            if not shards <= set(owners):
                return len({w for o in owners.values() for w in o})
        return owners

    def plan(self, workers: Workers) -> Plan:
        if not self.inputs:
            raise StudyError("nothing to plan: no region")
        spread = max(i.cost.spread for i in self.inputs)
        mid = self._run(workers)
        # the range: every hop at the cost model's spread either side, and where rungs prune,
        # the draws' 10th and 90th percentiles (how many hops ASHA keeps moves the wall time
        # more than the costs do: a 16-trial study trained 48 to 66 hops from run to run)
        low = _tail(self._draws(workers, max(0.0, 1.0 - spread)), low=True)
        high = _tail(self._draws(workers, 1.0 + spread), low=False)
        return Plan(workers=len(mid.busy_share), wall_seconds=mid.wall_seconds,
                    low_seconds=low, high_seconds=high,
                    busy_share=mid.busy_share,
                    longest_backlog=mid.longest_backlog, hops=mid.hops,
                    train_seconds=mid.train_seconds,
                    validation_seconds=mid.validation_seconds,
                    dispatch_seconds=mid.dispatch_seconds, validation=self.validation,
                    dispatch=self.dispatch, start=self.start, start_model=self.start_model,
                    head=self.head, turnaround=self.turnaround,
                    costs={i.region.name: {"device": i.cost.key.device, "host": i.cost.key.host,
                                           "hops": i.cost.hops, "error": i.cost.error,
                                           "spread": i.cost.spread} for i in self.inputs})


def _tail(results: list[SimResult], *, low: bool) -> float:
    """The 10th (``low``) or 90th percentile of the draws' wall times, and at least as far out
    as their mean."""
    walls = [r.wall_seconds for r in results]
    mean = statistics.fmean(walls)
    if len(walls) == 1:
        return mean
    cuts = statistics.quantiles(walls, n=10, method="inclusive")
    return min(cuts[0], mean) if low else max(cuts[-1], mean)


def plan(rt: Runtime, config: Config, regions: list[str], workers: int) -> Plan:
    return Planner(rt, config, regions).plan(workers)


def most_workers(planner: Planner) -> int:
    """As many workers as let every trial in flight run on every shard at once."""
    return min(MAX_WORKERS, sum(i.parallel * len(i.rows) for i in planner.inputs))


def workers_for(planner: Planner, deadline: float) -> Plan:
    """The plan with the fewest workers whose predicted wall time meets ``deadline``.

    Searched upward from one worker to as many as let every trial in flight run
    on every shard at once (more can only wait): ``parallel`` owners per shard.
    """
    most = most_workers(planner)
    best = None
    for n in range(1, most + 1):
        wall = planner.wall(n)
        if wall <= deadline:
            return planner.plan(n)
        if best is None or wall < best[1]:
            best = (n, wall)
    assert best is not None
    raise StudyError(f"no worker count up to {most} meets the deadline of {_hms(deadline)}: the "
                     f"fastest is {_hms(best[1])} with {best[0]} workers "
                     "(more trials in flight, `parallel`, would let more workers help)")


def _hms(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def format_plan(p: Plan, deadline: float | None = None) -> str:
    """The plan as text; each figure says what it is a share or a range of."""
    work = p.train_seconds + p.validation_seconds
    shares = sorted(p.busy_share.values())
    spread = max((c["spread"] for c in p.costs.values()), default=0.0)
    lines = [
        f"{p.workers} worker(s): {_hms(p.wall_seconds)} "
        f"(range {_hms(p.low_seconds)} to {_hms(p.high_seconds)}: the simulation again with "
        f"every hop {max(0.0, 1 - spread):.0%} and {1 + spread:.0%} of its fitted cost, the cost "
        f"model's spread, messages, validation and starts keeping their times; where rungs "
        f"prune, the 10th and 90th percentiles over the orders of the trials' metrics)",
        f"busy share per worker (its time training hops and validating, of the wall time): "
        f"min {shares[0]:.0%}, median {statistics.median(shares):.0%}, "
        f"max {shares[-1]:.0%}; longest shard backlog {p.longest_backlog} hop(s); "
        f"{p.hops} hops",
        f"where the workers' busy time goes: training {p.train_seconds / max(work, 1e-12):.0%}, "
        f"validation {p.validation_seconds / max(work, 1e-12):.0%} "
        f"({p.validation:.2f} s an epoch); {p.dispatch:.3f} s a message, "
        f"{p.turnaround:.3f} s a worker's turnaround after a hop, "
        f"{p.start:.2f} s to start a trial ({p.start_model:.2f} s from the optimizer's model), "
        f"{p.head:.2f} s to start a study",
    ]
    for region, c in p.costs.items():
        lines.append(f"  {region}: cost of {c['device']} on {c['host']} from {c['hops']} hops, "
                     f"error {c['error']:.0%} (median relative error of a hop's fitted cost), "
                     f"spread {c['spread']:.0%} (its 90th percentile)")
    if deadline is not None:
        lines.append(f"deadline {_hms(deadline)}: {p.workers} worker(s) meet it")
    return "\n".join(lines)


def live_owners(db: StudyDB, regions: list[str]) -> Workers:
    """The live workers' shards of ``regions``, or their count where a shard has no owner yet."""
    from hoptune.tasks.worker import live_after
    from hoptune.tuner import WorkerRecords

    live = WorkerRecords(db).live(live_after())
    owners: dict[tuple[str, int], list[str]] = {}
    for w in live:
        for name, k in w["shards"] or []:
            if name in regions:
                owners.setdefault((name, int(k)), []).append(w["id"])
    return owners or max(1, len(live))
