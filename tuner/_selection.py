"""Which epoch of a trial counts, and what each ended trial tells the optimizer.

``select = "best"`` (the default): a trial's metric is that of its epoch with
the best validation metric (the first such epoch on a tie), and that epoch's
weights are the ones a champion is built from, as with early stopping.
``select = "last"``: its final epoch's metric and weights.

Multi-fidelity: a pruned trial's metric comes from fewer epochs than a
finished one's, so it is not a sample of what the Gaussian process models
(the metric a configuration reaches with its whole budget). The pruner judged
it outside the best ``1/reduction_factor`` at its rung; the optimizer is told
that much: a pruned trial counts as no better than the worst finished trial
(the worse of its own metric and that one), so its early metric never stands
beside finished ones as if it were final. Before any trial has finished it
tells its own metric: training usually improves a trial's metric epoch by
epoch, so an early metric seldom ranks the trial better than it would have
ended, and pruned trials keep their order among themselves. (Telling them all the worst
metric recorded, as hoptune once did, left the model one flat value for
most of a study: with 8 epochs and rungs at 1 and 3, the first trial of a
16-trial study to finish ended after most trials had been proposed, and a
trial at 0.82 after 3 epochs told the same as one that diverged.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from hoptune.tuner._rows import EpochRow, TrialRow

__all__ = ["best_trial", "selected_epoch", "told", "told_with_epochs", "trial_metric"]


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(value)


def trial_metric(trial: TrialRow, select: str) -> float | None:
    """The trial's metric under ``select``: its best epoch's, or its last epoch's."""
    value = trial.best_metric if select == "best" else trial.last_metric
    return float(value) if _finite(value) else None


def selected_epoch(epochs: Iterable[EpochRow], minimize: bool, select: str
                   ) -> tuple[int, float] | None:
    """(epoch, metric) of the epoch whose weights count, or None if none has a metric."""
    scored = [(e.epoch, float(e.metric)) for e in epochs if _finite(e.metric)]
    if not scored:
        return None
    if select == "last":
        return scored[-1]
    pick = min if minimize else max
    best = pick(value for _, value in scored)
    return next((epoch, value) for epoch, value in scored if value == best)


def told(trials: list[TrialRow], names: Iterable[str], *, minimize: bool, select: str,
         running: bool = False) -> list[tuple[dict[str, Any], float]]:
    """(params over ``names``, value) for each finished or pruned trial with a metric, and with
    ``running`` each running trial with one.

    Finished trials tell their metric under ``select``; pruned ones the
    penalised value described in the module's docstring; running ones (with
    ``running``) their metric so far under ``select``, as it stands: with
    ``select = "best"`` no better than where the trial will end.
    """
    names = list(names)
    worse = max if minimize else min
    states = ("done", "pruned", "running") if running else ("done", "pruned")
    scored = [(t, trial_metric(t, select)) for t in trials if t.state in states]
    scored = [(t, v) for t, v in scored if v is not None]
    floor = worse((v for t, v in scored if t.state == "done"), default=None)
    return [({k: t.params[k] for k in names},
             v if t.state != "pruned" or floor is None else worse(v, floor))
            for t, v in scored]


def told_with_epochs(trials: list[TrialRow], names: Iterable[str], *, select: str,
                     running: bool = False) -> list[tuple[dict[str, Any], float, int]]:
    """(params over ``names``, value, epochs trained) for the trials ``told`` tells about:
    each one's metric under ``select`` as it stands, a pruned trial's unpenalised, with
    the epochs it reached it in, for a model of configuration and fidelity together
    (``tell_epochs``: ``propose``'s ``fidelities``)."""
    names = list(names)
    states = ("done", "pruned", "running") if running else ("done", "pruned")
    scored = [(t, trial_metric(t, select)) for t in trials if t.state in states]
    return [({k: t.params[k] for k in names}, v, t.epochs_done)
            for t, v in scored if v is not None]


def best_trial(trials: list[TrialRow], minimize: bool, select: str = "best"
               ) -> TrialRow | None:
    """The best trial of a study: the one rule behind promotion, status, the report and serving.

    The best finished trial (pruned ones only if none finished), by its metric under
    ``select``: its best epoch's (the weights promotion takes) or its last epoch's.
    Running, pending and failed trials never count.
    """
    scored = [t for t in trials if t.state in ("done", "pruned")
              and trial_metric(t, select) is not None]
    finished = [t for t in scored if t.state == "done"] or scored
    if not finished:
        return None
    return (min if minimize else max)(finished, key=lambda t: trial_metric(t, select))
