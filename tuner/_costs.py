"""What a hop costs, fitted from the hops the cluster recorded: the planner's input.

For each (family, device kind, host class) a hop holds its worker for

    seconds = overhead + rows * (per_row + per_row_batch / batch_size
                                 + per_row_param * parameters)

``overhead`` is what a hop pays whatever its size (claim, checkpoint load and
save, recording); the per-row cost falls as the batch grows (fewer optimizer
steps per row) and rises with the model's size. The four coefficients are
fitted by non-negative least squares (a cost is never negative) on the
recorded hops of earlier studies, robustly: after a first fit, every hop whose
residual is more than ``OUTLIER_MADS`` scaled median absolute deviations from
the median residual (a stalled host, a cold cache) is dropped, once, and the
rest fitted again. The model's error is the median, and its spread the 90th
percentile, of the kept hops' absolute relative residuals.

The planner adds hops up, so the fit must keep their mean: hops that share a
host with other work (the optimizer's ``tune_step``, other workers) run slow
now and then, a right tail that is part of their time. Three deviations, the
rule for a normal distribution, cut that tail: on the 2-core host of
``bench/plan.py`` it dropped 5% to 25% of the hop time of most studies (a
16-trial study's hops: median 0.39 s, mean 0.43 s, the slowest 8.5 deviations
out), and given its own hops' costs the simulated study came out 12% short;
at ten deviations it drops one hop in 17 studies and comes out 5% short. A
stalled hop (seconds against tenths) lies far beyond either.

Plain data in, plain data out: the observations come from the study database
(``observations``) or from a calibration run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["OUTLIER_MADS", "CostKey", "HopCost", "HopObservation", "fit_costs", "fit_hop_cost"]

OUTLIER_MADS = 10.0  # deviations: the slow tail of a shared host is kept, a stall is not
MAD_SCALE = 1.4826  # a normal distribution's standard deviation per median absolute deviation


@dataclass(frozen=True, order=True)
class CostKey:
    """What a hop's cost depends on besides its size: the model family, device and host."""

    family: str
    device: str  # the device kind: "cpu", "cuda:NVIDIA H100 80GB HBM3", ...
    host: str  # the host class: workers on hosts of one class share a cost


@dataclass(frozen=True)
class HopObservation:
    key: CostKey
    rows: int
    batch_size: int
    parameters: int
    seconds: float  # how long the hop held its worker


@dataclass(frozen=True)
class HopCost:
    """A fitted hop cost for one ``CostKey``; ``seconds`` predicts a hop."""

    key: CostKey
    overhead: float
    per_row: float
    per_row_batch: float
    per_row_param: float
    hops: int  # observations the fit kept
    outliers: int  # observations the outlier rule dropped
    error: float  # median absolute relative residual of the kept hops
    spread: float  # 90th percentile of the same

    def seconds(self, rows: float, batch_size: float, parameters: float) -> float:
        return self.overhead + rows * (self.per_row + self.per_row_batch / batch_size
                                       + self.per_row_param * parameters)


def _design(observations: list[HopObservation]) -> np.ndarray:
    rows = np.array([o.rows for o in observations], dtype=np.float64)
    batch = np.array([o.batch_size for o in observations], dtype=np.float64)
    params = np.array([o.parameters for o in observations], dtype=np.float64)
    return np.column_stack([np.ones_like(rows), rows, rows / batch, rows * params])


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares with each column scaled to unit size first."""
    from scipy.optimize import nnls

    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(x / scale, y)
    return coef / scale


def fit_hop_cost(observations: list[HopObservation]) -> HopCost:
    """The cost of one key's hops; raises ValueError with fewer than two observations."""
    if len(observations) < 2:
        raise ValueError(f"{len(observations)} hop(s) recorded: a cost needs at least two")
    keys = {o.key for o in observations}
    if len(keys) != 1:
        raise ValueError(f"observations of {len(keys)} keys: fit each key apart (fit_costs)")
    x = _design(observations)
    y = np.array([o.seconds for o in observations], dtype=np.float64)
    coef = _nnls(x, y)
    residual = y - x @ coef
    mad = float(np.median(np.abs(residual - np.median(residual))))
    keep = np.abs(residual - np.median(residual)) <= OUTLIER_MADS * MAD_SCALE * mad
    if mad > 0 and keep.sum() >= 2 and not keep.all():
        coef = _nnls(x[keep], y[keep])
    else:
        keep = np.ones_like(y, dtype=bool)
    fitted = x[keep] @ coef
    relative = np.abs(y[keep] - fitted) / np.maximum(y[keep], 1e-12)
    return HopCost(key=observations[0].key, overhead=float(coef[0]), per_row=float(coef[1]),
                   per_row_batch=float(coef[2]), per_row_param=float(coef[3]),
                   hops=int(keep.sum()), outliers=int((~keep).sum()),
                   error=float(np.median(relative)), spread=float(np.quantile(relative, 0.9)))


def fit_costs(observations: Iterable[HopObservation]) -> dict[CostKey, HopCost]:
    """A cost per key that has at least two recorded hops."""
    by_key: dict[CostKey, list[HopObservation]] = defaultdict(list)
    for o in observations:
        by_key[o.key].append(o)
    return {key: fit_hop_cost(group) for key, group in sorted(by_key.items())
            if len(group) >= 2}
