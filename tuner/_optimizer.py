"""Batch proposals from scikit-optimize's Gaussian process, rebuilt on every call.

This is the only module of hoptune that imports scikit-optimize. ``propose`` keeps
no state between calls: the study database holds the told and pending trials,
and every call refits the model from them, so a restarted driver proposes
exactly what the old one would have.

Policy, chosen by measurement (bench/tuner.py; medians over 20 seeds):

- Initial design: while fewer than ``n_initial_points`` results are known (told
  plus usable prior), points come from a scrambled Sobol' sequence seeded by
  ``seed`` alone, skipping points already told or pending, so successive calls
  with the same seed walk along one low-discrepancy sequence.
- Model: scikit-optimize's ``GaussianProcessRegressor`` with its default kernel
  (constant * Matern 5/2 with one length scale per transformed dimension, a
  Hamming kernel when every dimension is categorical, a fitted white-noise
  term, normalised targets). Its hyperparameters are fitted once per call, with
  one random restart: about 0.5 s at 200 points, no better on the benchmarks
  than none, kept against bad local optima of the likelihood on real metrics.
- Batch: constant liar. The pending trials, then each new point of the batch,
  are told the liar value (the mean of the known values; the minimum and the
  maximum did no better) and the model is refitted with its hyperparameters
  held fixed: one Cholesky factorisation per point, not a likelihood fit.
- Acquisition: expected improvement (stateless, unlike scikit-optimize's
  ``gp_hedge``, whose gains live in memory; LCB did as well), with its margin
  ``xi`` scaled by the spread of the values so it does not depend on the
  metric's units. Maximised over candidates: a Sobol' sweep of the space plus
  Gaussian perturbations of the best known points. The perturbations are the
  local refinement that plain sampling lacks (without them Hartmann-6 reached
  -2.84 instead of -3.27 in 60 evaluations) and let a warm start exploit its
  prior at once.
- No duplicates: a candidate equal to a told, pending or already-batched point
  (after rounding ints) is skipped for the next best one.
- Non-finite values (a diverged trial) count as the worst finite value known.
- BLAS runs on one thread: the matrices are small (a few hundred rows), where
  threads only add overhead, and on a busy host (the driver shares it with
  workers) spinning BLAS threads made a proposal several times slower.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from itertools import product
from typing import Any

import numpy as np
from scipy.stats import qmc
from sklearn.base import clone
from skopt.acquisition import gaussian_ei
from skopt.learning import GaussianProcessRegressor
from skopt.learning.gaussian_process.kernels import WhiteKernel
from skopt.space import Categorical, Integer, Real
from skopt.space import Space as SkoptSpace
from skopt.utils import cook_estimator, normalize_dimensions
from threadpoolctl import threadpool_limits

from hoptune.tuner._space import CategoricalDim, IntDim, RealDim, Space
from hoptune.tuner._warmstart import select_prior

__all__ = ["default_initial_points", "epoch_fidelity", "propose", "skopt_dimensions"]

GP_RESTARTS = 1
#: The model's input for a result's fidelity (``propose``'s ``fidelities``).
FIDELITY = "__fidelity"
GLOBAL_CANDIDATES = 1024
LOCAL_CANDIDATES = 512
LOCAL_CENTRES = 4
LOCAL_SCALES = (0.02, 0.08, 0.2)
EI_XI = 0.01
SHORTLIST = 256
SHORTLIST_PER_POINT = 32
MAX_ENUMERATION = 50_000


def default_initial_points(space: Space) -> int:
    """Size of the initial design: enough points for the GP to fit length scales."""
    return space.initial_points


def epoch_fidelity(epochs_done: int, epochs: int) -> float:
    """A result's fidelity after ``epochs_done`` of ``epochs`` epochs: log(done) / log(epochs),
    0 after the first epoch, 1 at the last (rungs halving the trials, at epochs 1, 2,
    4, ..., lie evenly between)."""
    if epochs <= 1 or epochs_done >= epochs:
        return 1.0
    return math.log(max(1, epochs_done)) / math.log(epochs)


def skopt_dimensions(space: Space) -> list[Any]:
    """The scikit-optimize dimensions of ``space``, in order."""
    dims: list[Any] = []
    for d in space.dimensions:
        if isinstance(d, CategoricalDim):
            dims.append(Categorical(list(d.choices), name=d.name))
        elif isinstance(d, IntDim):
            prior = "log-uniform" if d.prior == "log" else "uniform"
            dims.append(Integer(d.low, d.high, prior=prior, name=d.name))
        else:
            prior = "log-uniform" if d.prior == "log" else "uniform"
            dims.append(Real(d.low, d.high, prior=prior, name=d.name))
    return dims


def propose(
    space: Space,
    told: Sequence[tuple[Mapping[str, Any], float]],
    pending: Sequence[Mapping[str, Any]],
    n: int,
    seed: int,
    *,
    minimize: bool = True,
    prior: Iterable[tuple[Mapping[str, Any], float]] = (),
    n_initial_points: int | None = None,
    fidelities: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """Propose ``n`` new, distinct params for the free trial slots of a study.

    ``told`` holds the (params, value) of finished trials, ``pending`` the params
    of trials still running; both must lie inside ``space``. ``prior`` holds the
    results of the region's previous study: those inside ``space`` are told to
    the model as well, and count towards the initial design, so a warm-started
    study (usually with more prior results than ``n_initial_points``) skips
    the random phase and starts near the previous optimum. The result is
    deterministic in all arguments. Fewer than ``n`` params come back only when
    a finite space has fewer free points left.

    ``fidelities`` (one per ``told`` result, in (0, 1]: how much of its budget the
    trial had trained when it reached its value, ``epoch_fidelity``) makes the model
    one of configuration and fidelity together, and proposes for the whole budget
    (fidelity 1): a result reached after a few epochs then informs the model without
    standing beside final ones as if it were final. Without it, or with every
    fidelity 1, every result counts as final.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    told_c = [(space.canonical(p), float(v)) for p, v in told]
    if fidelities is not None and len(fidelities) != len(told_c):
        raise ValueError(f"fidelities: one per told result ({len(told_c)}), "
                         f"got {len(fidelities)}")
    pending_c = [space.canonical(p) for p in pending]
    taken = {_key(p) for p, _ in told_c} | {_key(p) for p in pending_c}
    if n == 0:
        return []
    known = select_prior(space, prior, minimize=minimize) + told_c
    # a prior's results are its study's final ones
    levels = None
    if fidelities is not None and any(float(f) < 1.0 for f in fidelities):
        levels = [1.0] * (len(known) - len(told_c)) + [float(f) for f in fidelities]
    finite = [v for _, v in known if math.isfinite(v)]
    if n_initial_points is None:
        n_initial_points = default_initial_points(space)
    entropy = [seed % 2**63, len(told_c), len(pending_c), n]
    rng = np.random.default_rng(entropy)
    if len(known) < n_initial_points or len(set(finite)) < 2:
        batch = _initial_design(space, taken, n, seed)
    else:
        worst = max(finite) if minimize else min(finite)
        sign = 1.0 if minimize else -1.0
        observed = [(p, sign * (v if math.isfinite(v) else worst)) for p, v in known]
        with threadpool_limits(limits=1, user_api="blas"):
            batch = _model_batch(space, observed, pending_c, taken, n, rng, levels)
    if len(batch) < n:
        batch += _fill(space, taken | {_key(p) for p in batch}, n - len(batch), rng)
    return batch


def _key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(params.values())


def _pick_free(
    candidates: Iterable[dict[str, Any]], taken: set[tuple[Any, ...]], n: int
) -> list[dict[str, Any]]:
    """The first ``n`` candidates not in ``taken`` (nor repeated), in order."""
    seen = set(taken)
    picked = []
    for params in candidates:
        key = _key(params)
        if key not in seen:
            seen.add(key)
            picked.append(params)
            if len(picked) == n:
                break
    return picked


def _initial_design(
    space: Space, taken: set[tuple[Any, ...]], n: int, seed: int
) -> list[dict[str, Any]]:
    """The first free points of the scrambled Sobol' sequence of ``seed``."""
    # Twice as many points as could be taken: room for repeats in discrete spaces.
    points = 2 ** max(3, (len(taken) + n).bit_length() + 1)
    return _pick_free(space.design(seed, points), taken, n)


def _fill(
    space: Space, taken: set[tuple[Any, ...]], n: int, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """``n`` free points drawn at random, or every free point of a small finite space."""
    size = _cardinality(space)
    if size is not None and size <= MAX_ENUMERATION:
        values = [
            d.choices if isinstance(d, CategoricalDim) else range(d.low, d.high + 1)
            for d in space.dimensions
        ]
        free = [dict(zip(space.names, row, strict=True)) for row in product(*values)]
        free = [p for p in free if _key(p) not in taken]
        order = rng.permutation(len(free))
        return [free[i] for i in order[:n]]
    return _pick_free(space.sample(rng, 64 * n), taken, n)


def _cardinality(space: Space) -> int | None:
    """The number of points of a space without real dimensions, else None."""
    size = 1
    for d in space.dimensions:
        if isinstance(d, RealDim):
            return None
        size *= len(d.choices) if isinstance(d, CategoricalDim) else d.high - d.low + 1
    return size


def _model_batch(
    space: Space,
    observed: list[tuple[dict[str, Any], float]],
    pending: list[dict[str, Any]],
    taken: set[tuple[Any, ...]],
    n: int,
    rng: np.random.Generator,
    levels: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """A constant-liar batch of ``n`` points maximising expected improvement; with
    ``levels`` (each observed point's fidelity), over a model whose last input is the
    fidelity, every candidate, pending point and lie at fidelity 1."""
    dimensions = skopt_dimensions(space)
    if levels is not None:
        dimensions.append(Real(0.0, 1.0, name=FIDELITY))
    sk_space = SkoptSpace(normalize_dimensions(dimensions))

    def transform(points: Sequence[Mapping[str, Any]],
                  at: Sequence[float] | None = None) -> np.ndarray:
        """Points in the model's input space; with ``levels``, each at fidelity ``at`` (1)."""
        rows = [[p[name] for name in space.names] for p in points]
        if levels is not None:
            fidelity = [1.0] * len(rows) if at is None else [float(f) for f in at]
            rows = [[*row, f] for row, f in zip(rows, fidelity, strict=True)]
        return sk_space.transform(rows)

    X = transform([p for p, _ in observed], levels)
    y = np.array([v for _, v in observed])
    gp = cook_estimator(
        "GP",
        space=sk_space.dimensions,
        random_state=int(rng.integers(2**31 - 1)),
        n_restarts_optimizer=GP_RESTARTS,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gp.fit(X, y)
    fixed = _fixed_kernel(gp)
    y_best = float(y.min())
    if levels is not None:
        # the best the model expects of a configuration tried so far, given its whole budget
        y_best = float(gp.predict(transform([p for p, _ in observed])).min())
    xi = EI_XI * float(y.std())
    lie = _lie(y)

    candidates = _candidates(space, observed, rng)
    C = transform(candidates)
    keys = [_key(p) for p in candidates]
    if pending:
        X = np.vstack([X, transform(pending)])
        y = np.concatenate([y, np.full(len(pending), lie)])
        gp = _refit(fixed, X, y)

    batch: list[dict[str, Any]] = []
    seen = set(taken)
    order = np.arange(len(candidates))
    for i in range(n):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ei = gaussian_ei(C[order], gp, y_opt=y_best, xi=xi)
        ranked = [j for j in order[np.argsort(-ei, kind="stable")] if keys[j] not in seen]
        if not ranked:
            break
        best = ranked[0]
        batch.append(candidates[best])
        seen.add(keys[best])
        if i == n - 1:
            break
        if i == 0:
            # A lie changes expected improvement mostly near its own point: the rest
            # of the batch comes from the best candidates of the first ranking.
            order = np.array(ranked[: max(SHORTLIST, SHORTLIST_PER_POINT * n)])
        X = np.vstack([X, C[best]])
        y = np.append(y, lie)
        gp = _refit(fixed, X, y)
    return batch


def _lie(y: np.ndarray) -> float:
    """The constant liar's value: the mean of the known values."""
    return float(y.mean())


def _candidates(
    space: Space, observed: list[tuple[dict[str, Any], float]], rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Where expected improvement is evaluated: a global sweep and local perturbations."""
    dim = len(space.dimensions)
    sobol = qmc.Sobol(dim, scramble=True, rng=rng)
    units = [sobol.random(GLOBAL_CANDIDATES)]
    centres = sorted(observed, key=lambda pv: pv[1])[:LOCAL_CENTRES]
    per_centre = LOCAL_CANDIDATES // max(1, len(centres))
    for params, _ in centres:
        scales = rng.choice(LOCAL_SCALES, size=(per_centre, 1))
        local = space.to_unit(params) + scales * rng.standard_normal((per_centre, dim))
        units.append(np.clip(local, 0.0, 1.0))
    return space.from_unit(np.vstack(units))


def _fixed_kernel(gp: GaussianProcessRegressor) -> Any:
    """The fitted kernel with its noise term restored, for refits without optimisation.

    The fitted kernel is ``amplitude * matern + white noise`` (``k1 + k2``), and
    scikit-optimize zeroes its noise term after fitting (so that predictions are
    noise-free); a refit must put it back.
    """
    kernel = clone(gp.kernel_)
    kernel.set_params(k2=WhiteKernel(noise_level=gp.noise_, noise_level_bounds="fixed"))
    return kernel


def _refit(kernel: Any, X: np.ndarray, y: np.ndarray) -> GaussianProcessRegressor:
    """A GP on (X, y) with the given kernel hyperparameters held fixed."""
    gp = GaussianProcessRegressor(kernel=kernel, optimizer=None, normalize_y=True, noise="gaussian")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gp.fit(X, y)
    return gp
