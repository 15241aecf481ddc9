"""The hop cost model: exact on exact data, robust to a stalled hop, keyed apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hoptune.tuner import CostKey, HopObservation, fit_costs, fit_hop_cost

CPU = CostKey("rating_mf", "cpu", "host-a")
GPU = CostKey("rating_mf", "cuda:0", "host-b")


def truth(rows: int, batch: int, params: int) -> float:
    return 0.05 + rows * (2e-6 + 3e-4 / batch + 1e-11 * params)


def grid(key: CostKey = CPU, noise: float = 0.0, seed: int = 0) -> list[HopObservation]:
    rng = np.random.default_rng(seed)
    out = []
    for rows in (500, 1000, 2000, 4000):
        for batch in (64, 256, 1024):
            for params in (10_000, 100_000, 1_000_000):
                seconds = truth(rows, batch, params) * (1 + noise * rng.standard_normal())
                out.append(HopObservation(key, rows, batch, params, seconds))
    return out


def test_exact_observations_give_back_the_coefficients() -> None:
    cost = fit_hop_cost(grid())
    assert cost.outliers == 0 and cost.hops == 36
    # the fit is a least-squares solve of a well-conditioned 4-column system in float64:
    # the coefficients come back to far better than a part in a million
    assert cost.overhead == pytest.approx(0.05, rel=1e-6)
    assert cost.per_row == pytest.approx(2e-6, rel=1e-6)
    assert cost.per_row_batch == pytest.approx(3e-4, rel=1e-6)
    assert cost.per_row_param == pytest.approx(1e-11, rel=1e-6)
    assert cost.error < 1e-9
    assert cost.seconds(3000, 128, 50_000) == pytest.approx(truth(3000, 128, 50_000), rel=1e-6)


def test_a_stalled_hop_is_dropped_by_the_outlier_rule_and_the_fit_holds() -> None:
    observations = grid(noise=0.02, seed=1)
    stalled = observations[5]
    observations[5] = HopObservation(CPU, stalled.rows, stalled.batch_size, stalled.parameters,
                                     stalled.seconds + 30.0)
    cost = fit_hop_cost(observations)
    assert cost.outliers >= 1 and cost.hops + cost.outliers == 36
    # 2% noise: the kept hops' median relative error stays of that order, not 30 s worth
    assert cost.error < 0.05
    for o in grid():
        assert cost.seconds(o.rows, o.batch_size, o.parameters) == pytest.approx(o.seconds,
                                                                                rel=0.1)


def test_the_slow_tail_of_a_shared_host_is_kept_so_hops_add_up(monkeypatch) -> None:
    """Hops slowed now and then by other work on their host (a right tail, as contention
    gives it) are part of a study's time: the fit keeps them, so the hops it predicts add
    up to the hops measured. Three deviations, the normal distribution's rule, cut the
    tail and fell short."""
    from hoptune.tuner import _costs

    rng = np.random.default_rng(7)
    observations = [HopObservation(CPU, 2000, 256, 100_000,
                                   truth(2000, 256, 100_000) * (1 + 0.3 * rng.exponential()))
                    for _ in range(200)]
    measured = sum(o.seconds for o in observations)

    def predicted() -> float:
        cost = fit_hop_cost(observations)
        return sum(cost.seconds(o.rows, o.batch_size, o.parameters) for o in observations)

    # least squares with an intercept fits the mean of what it keeps: all of it, here (to
    # the solver's tolerance, far below the tail's few percent)
    assert fit_hop_cost(observations).outliers == 0
    assert predicted() == pytest.approx(measured, rel=1e-6)
    monkeypatch.setattr(_costs, "OUTLIER_MADS", 3.0)
    assert predicted() < 0.98 * measured


def test_costs_are_never_negative() -> None:
    # hops whose time falls with rows (nonsense, noise) still fit non-negative coefficients
    observations = [HopObservation(CPU, rows, 128, 1000, 1.0 / rows) for rows in (10, 20, 40)]
    cost = fit_hop_cost(observations)
    assert min(cost.overhead, cost.per_row, cost.per_row_batch, cost.per_row_param) >= 0
    assert math.isfinite(cost.error)


def test_each_key_is_fitted_apart_and_a_lone_hop_is_not_a_cost() -> None:
    fast = [HopObservation(GPU, o.rows, o.batch_size, o.parameters, o.seconds / 10)
            for o in grid()]
    lone = HopObservation(CostKey("mlp", "cpu", "host-a"), 100, 32, 1000, 0.1)
    costs = fit_costs([*grid(), *fast, lone])
    assert set(costs) == {CPU, GPU}
    assert costs[GPU].per_row == pytest.approx(costs[CPU].per_row / 10, rel=1e-6)
    with pytest.raises(ValueError, match="at least two"):
        fit_hop_cost([lone])
    with pytest.raises(ValueError, match="fit each key apart"):
        fit_hop_cost([*grid()[:2], *fast[:2]])
