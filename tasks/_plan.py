"""``hoptune plan``: a study's or a night's wall time on N workers, and the workers a deadline
needs.

The hop cost is fitted from the hops the cluster recorded (``fit_costs`` over
``recorded_observations``) for the region's model family, taking the (device,
host class) with the most recorded hops; the seconds an epoch's validation and
a message add are the medians of the gaps the recorded hops and epochs show.
The schedule is the simulator's (``tasks._simulate``), which runs the
cluster's own visit-order, placement and pruning. The range comes from the
cost model's spread: every hop ``1 - spread`` and ``1 + spread`` times its
fitted cost.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from typing import Any

from hoptune.core import HoptuneError, StudyError
from hoptune.regions import Config, RegionConfig, get_family
from hoptune.tasks._costs import parameter_count, recorded_observations
from hoptune.tasks._runtime import Runtime
from hoptune.tasks._simulate import SimResult, SimStudy, hop_seconds_from, simulate
from hoptune.tuner import AshaPruner, HopCost, fit_costs

__all__ = ["Plan", "Planner", "format_plan", "nightly_plan", "plan", "workers_for"]

log = logging.getLogger(__name__)

Workers = int | dict[tuple[str, int], list[str]]  # a count, or the owners of each shard
MAX_WORKERS = 256  # the deadline search stops here


@dataclass(frozen=True)
class _Inputs:
    """What the simulator needs for one region, from its configuration and history."""

    region: RegionConfig
    rows: list[int]
    cost: HopCost
    batch_size: int
    parameters: int


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
    costs: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _median_gaps(db: Any, studies: list[dict[str, Any]]) -> tuple[float, float]:
    """Medians of the seconds from a hop's end to the next hop's start, and to its epoch's end."""
    hand_on, validation = [], []
    for study in studies:
        for trial in db.trials(study["id"]):
            hops = [h for h in db.hops(trial["id"]) if h["state"] == "done"
                    and h["started_at"] is not None and h["finished_at"] is not None]
            by_epoch: dict[int, list[dict[str, Any]]] = {}
            for h in hops:
                by_epoch.setdefault(h["epoch"], []).append(h)
            for epoch, group in by_epoch.items():
                group.sort(key=lambda h: h["position"])
                hand_on += [max(0.0, (b["started_at"] - a["finished_at"]).total_seconds())
                            for a, b in zip(group, group[1:], strict=False)]
                record = db.epoch(trial["id"], epoch)
                if record is not None and record["finished_at"] is not None:
                    validation.append(max(0.0, (record["finished_at"] - group[-1]["finished_at"]
                                                ).total_seconds()))
    return (statistics.median(validation) if validation else 0.0,
            statistics.median(hand_on) if hand_on else 0.0)


def _inputs(rt: Runtime, region: RegionConfig, costs: dict[Any, HopCost]) -> _Inputs:
    mine = [c for k, c in costs.items() if k.family == region.family]
    if not mine:
        raise StudyError(f"no recorded hops of family {region.family!r} (region {region.name}): "
                         f"tune the region once (`hoptune tune {region.name}`) to record them")
    study = rt.db.latest_study(region.name)
    if study is None:
        raise StudyError(f"region {region.name} has no study: tune it once first")
    manifest = study["manifest"] or rt.manifest(region.name)
    params = {**get_family(region).default_params, **region.params}
    return _Inputs(region=region, rows=[int(r) for r in manifest["rows"]],
                   cost=max(mine, key=lambda c: c.hops),
                   batch_size=int(params.get("batch_size", region.batch_size)),
                   parameters=parameter_count(study, params))


def _studies(inputs: list[_Inputs], scale: float) -> list[SimStudy]:
    out = []
    for i in inputs:
        r = i.region
        pruner = (AshaPruner(reduction_factor=r.pruner.reduction_factor,
                             min_epochs=r.pruner.min_epochs, max_epochs=r.epochs)
                  if r.space else None)
        out.append(SimStudy(r.name, rows=i.rows, budget=r.trials, parallel=r.parallel,
                            epochs=r.epochs, seed=r.seed, pruner=pruner,
                            hop_seconds=hop_seconds_from(i.cost, i.batch_size, i.parameters,
                                                         scale)))
    return out


class Planner:
    """The inputs read once; ``plan(workers)`` simulates."""

    def __init__(self, rt: Runtime, config: Config, regions: list[str]) -> None:
        costs = fit_costs(recorded_observations(rt.db))
        self.inputs = [_inputs(rt, config.region(n), costs) for n in regions]
        studies = [s for n in regions for s in rt.db.studies(n) if s["state"] != "running"]
        self.validation, self.dispatch = _median_gaps(rt.db, studies)

    def _run(self, workers: Workers, scale: float = 1.0) -> SimResult:
        return simulate(_studies(self.inputs, scale), workers,
                        validation=self.validation, dispatch=self.dispatch)

    def wall(self, workers: int) -> float:
        """The predicted wall time alone (the fitted costs, no range)."""
        return self._run(workers).wall_seconds

    def plan(self, workers: Workers) -> Plan:
        spread = max(i.cost.spread for i in self.inputs)
        mid = self._run(workers)
        low, high = self._run(workers, max(0.0, 1.0 - spread)), self._run(workers, 1.0 + spread)
        return Plan(workers=len(mid.busy_share), wall_seconds=mid.wall_seconds,
                    low_seconds=low.wall_seconds, high_seconds=high.wall_seconds,
                    busy_share=mid.busy_share,
                    longest_backlog=mid.longest_backlog, hops=mid.hops,
                    train_seconds=mid.train_seconds,
                    validation_seconds=mid.validation_seconds,
                    dispatch_seconds=mid.dispatch_seconds, validation=self.validation,
                    dispatch=self.dispatch,
                    costs={i.region.name: {"device": i.cost.key.device, "host": i.cost.key.host,
                                           "hops": i.cost.hops, "error": i.cost.error,
                                           "spread": i.cost.spread} for i in self.inputs})


def plan(rt: Runtime, config: Config, regions: list[str], workers: int) -> Plan:
    return Planner(rt, config, regions).plan(workers)


def workers_for(planner: Planner, deadline: float) -> Plan:
    """The plan with the fewest workers whose predicted wall time meets ``deadline``.

    Searched upward from one worker to as many as let every trial in flight run
    on every shard at once (more can only wait): ``parallel`` owners per shard.
    """
    most = min(MAX_WORKERS, sum(i.region.parallel * len(i.rows) for i in planner.inputs))
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
    work = p.train_seconds + p.validation_seconds
    shares = sorted(p.busy_share.values())
    lines = [
        f"{p.workers} worker(s): {_hms(p.wall_seconds)} "
        f"(range {_hms(p.low_seconds)} to {_hms(p.high_seconds)}, from the cost model's spread)",
        f"busy share per worker: min {shares[0]:.0%}, median {statistics.median(shares):.0%}, "
        f"max {shares[-1]:.0%}; longest shard backlog {p.longest_backlog} hop(s); "
        f"{p.hops} hops",
        f"where the time goes: training {p.train_seconds / max(work, 1e-12):.0%} of worker time, "
        f"validation {p.validation_seconds / max(work, 1e-12):.0%} "
        f"({p.validation:.2f} s an epoch); {p.dispatch:.3f} s a message",
    ]
    for region, c in p.costs.items():
        lines.append(f"  {region}: cost of {c['device']} on {c['host']} from {c['hops']} hops, "
                     f"error {c['error']:.0%}, spread {c['spread']:.0%}")
    if deadline is not None:
        lines.append(f"deadline {_hms(deadline)}: {p.workers} worker(s) meet it")
    return "\n".join(lines)


def live_owners(rt: Runtime, regions: list[str]) -> Workers:
    """The live workers' shards of ``regions``, or their count where a shard has no owner yet."""
    from hoptune.tasks._liveness import live_after
    from hoptune.tuner import WorkerRecords

    live = WorkerRecords(rt.db).live(live_after())
    owners: dict[tuple[str, int], list[str]] = {}
    for w in live:
        for name, k in w["shards"] or []:
            if name in regions:
                owners.setdefault((name, int(k)), []).append(w["id"])
    return owners or max(1, len(live))


def nightly_plan(rt: Runtime, config: Config, regions: list[str], run_id: int,
                 workers: int | None = None) -> Plan | None:
    """Log the plan of a nightly run as it starts; warn at once when it predicts a miss.

    ``workers`` (a count) is for a run whose workers are still starting; by
    default the live workers and the shards they own. A plan that cannot be
    made (no recorded hops yet) is logged and the run goes on.
    """
    deadline = rt.settings.nightly_deadline
    try:
        planner = Planner(rt, config, regions)
        owners = workers or live_owners(rt, regions)
        if isinstance(owners, dict):
            shards = {(i.region.name, k) for i in planner.inputs for k in range(len(i.rows))}
            if not shards <= set(owners):  # a shard nobody owns yet: plan as many, round robin
                owners = len({w for o in owners.values() for w in o})
        p = planner.plan(owners)
    except HoptuneError as exc:
        log.info("nightly run %d: no plan: %s", run_id, exc)
        return None
    log.info("nightly run %d plan: %s", run_id, format_plan(p).replace("\n", "; "))
    if deadline is not None and p.wall_seconds > deadline:
        log.warning("nightly run %d: predicted to miss its deadline of %s: %s on %d worker(s) "
                    "(range %s to %s); `hoptune plan --nightly --deadline %ds` says how many "
                    "workers meet it", run_id, _hms(deadline), _hms(p.wall_seconds), p.workers,
                    _hms(p.low_seconds), _hms(p.high_seconds), round(deadline))
    return p
