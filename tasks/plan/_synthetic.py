"""The synthetic metrics a plan's simulations run on: the orders of them a prediction
averages over (``ORDERS``, ``draws``, ``mean_result``) and the trend that makes the
simulated studies train as many epochs under ASHA as the recorded ones did (``_trend``).

ASHA keeps at each rung the trials whose metrics rank best so far, so the order of the
metrics decides how many hops a study trains; an optimizer that learns from the earlier
trials makes later ones better and prunes fewer than metrics in random order would.
"""

from __future__ import annotations

import functools
import math
import statistics

from hoptune.tasks.plan._history import Shape
from hoptune.tasks.plan._simulate import SimResult, SimStudy, simulate
from hoptune.tuner import AshaPruner

__all__ = ["FIT_STEPS", "ORDERS", "PRIOR_TREND", "draws", "mean_result"]


#: Orders of a study's synthetic metrics a prediction averages over, in all. One order decides
#: which trials ASHA keeps and so how many hops a study trains: for 16 trials with two rungs,
#: two orders gave 46 and 62 hops where runs of the same study trained 50 to 66. The orders'
#: epochs a trial spread 0.26 for an 8-trial study, so 16 of them left a mean that moved with
#: the study's seed: 1.89 to 2.10 epochs a trial over eight seeds at a trend of 0.25, where
#: 256 orders give 1.95; 64 leave it within about 2%.
ORDERS = 64
#: Halvings of the trend's interval [0, 1] that ``_trend`` searches: to within 1/128.
FIT_STEPS = 7
#: The trend a plan assumes where no study with rungs is recorded yet. Not 0 (metrics in
#: random order): an optimizer that learns from earlier trials makes later ones better. The
#: studies of ``bench/quality.py`` on real data (16 trials, 4 in flight, 8 epochs, 2 shards)
#: trained as trends of 0.15 to 0.35 simulate (MovieLens with ``reg``: 0.35, with
#: ``weight_decay``: 0.2; diabetes: 0.15; breast cancer: 0.25): 0.2 is below their middle.
#: Without it, the first 16-trial study with rungs of ``bench/plan.py`` was predicted 54 or 55
#: hops in every run, where it trained 54 to 66 on two hosts.
PRIOR_TREND = 0.2


def draws(studies: int) -> int:
    """Draws of a night's metrics that average ``ORDERS`` orders of each study, for a night of
    ``studies`` studies with rungs: each study orders its metrics from its own seed, so one
    draw of a night of many already averages many orders (and costs as many studies)."""
    return max(1, math.ceil(ORDERS / max(1, studies)))


def mean_result(results: list[SimResult]) -> SimResult:
    """The mean of simulations of the same studies on the same workers (counts rounded)."""
    if len(results) == 1:
        return results[0]
    mean = statistics.fmean
    outcomes: dict[str, dict[str, int]] = {}
    for region in results[0].trials:
        states = {k for r in results for k in r.trials[region]}
        outcomes[region] = {k: round(mean(r.trials[region].get(k, 0) for r in results))
                            for k in sorted(states)}
    return SimResult(
        wall_seconds=mean(r.wall_seconds for r in results),
        busy_share={w: mean(r.busy_share[w] for r in results) for w in results[0].busy_share},
        longest_backlog=max(r.longest_backlog for r in results),
        hops=round(mean(r.hops for r in results)),
        train_seconds=mean(r.train_seconds for r in results),
        validation_seconds=mean(r.validation_seconds for r in results),
        dispatch_seconds=mean(r.dispatch_seconds for r in results),
        trials=outcomes)


def _trend(record: list[tuple[Shape, int, int]]) -> float:
    """The trend whose simulated studies of the recorded shapes train as many epochs as the
    recorded ones did, in all; ``PRIOR_TREND`` with no record. Epochs, not the pruned share:
    hops are what a plan's wall time is made of, and the recorded trials were pruned later
    than metrics in a fixed order prune them (judged again at rungs they had passed: on a
    2-core host a 16-trial study pruned 10 of its trials and trained 66 hops, where the
    trend fitted to its pruned share simulated 61). A shape's epochs are the trend's, not
    the history's: of the same metrics, 8 trials in flight 2 at a time train 1.9 epochs
    each of 3, 16 trials 1.8, so one recorded figure would mislead a plan of another shape."""
    if not record:
        return PRIOR_TREND
    trained = sum(n for _, _, n in record)

    def simulated(improving: float) -> float:
        return sum(_epochs_per_trial(shape, improving) * finished
                   for shape, finished, _ in record)

    # later trials better prune fewer: the simulated epochs grow with the trend, so halve
    low, high = 0.0, 1.0
    if simulated(low) >= trained:
        return low
    if simulated(high) <= trained:
        return high
    for _ in range(FIT_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if simulated(middle) < trained else (low, middle)
    return low if trained - simulated(low) <= simulated(high) - trained else high


@functools.lru_cache(maxsize=1024)
def _epochs_per_trial(shape: Shape, improving: float) -> float:
    """The epochs a trial of a study of ``shape`` trains under ASHA and trend ``improving``:
    the mean over ``ORDERS`` orders of the metrics (one order of 8 trials prunes 2 to 6), a
    second a hop: a tenth of a second on a small host, once a process."""
    pruner = AshaPruner.from_settings(shape, shape.epochs)  # a shape holds the pruner's fields
    epochs = []
    for draw in range(ORDERS):
        study = SimStudy("fit", rows=[1] * shape.shards, hop_seconds=lambda _rows: 1.0,
                         budget=shape.budget, parallel=shape.parallel, epochs=shape.epochs,
                         pruner=pruner, improving=improving, draw=draw)
        result = simulate([study], shape.parallel)
        epochs.append(result.hops / shape.shards / max(1, sum(result.trials["fit"].values())))
    return statistics.fmean(epochs)
