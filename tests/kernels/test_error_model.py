"""The error model: sound where correct code rounds apart, and still catching real mistakes."""

from __future__ import annotations

import math
import types

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _adamw, _sgd
from hoptune.kernels._error_model import ErrorModel
from hoptune.kernels.reference import AdamWScalars, SGDScalars
from tests.kernels.tracking import BoundTracker


def test_the_issues_cancellation_is_within_the_bound() -> None:
    # From issue 8: the host build's param against the reference's on an AMD EPYC, float32,
    # lr 1e-2 at step 10 with amsgrad; a fixed relative tolerance of 1e-6 failed it.
    scalars = AdamWScalars.for_step(
        lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, step=10
    )
    one = lambda x: torch.tensor([x], dtype=torch.float32)  # noqa: E731
    bound = kernels.adamw_bound(
        one(1.5), one(3.3050813030614067e-36), one(1.75), one(2.2849701508675935e-06),
        one(1.9363057414993452e-29), scalars,
    )
    got, want = one(-0.09692680835723877), one(-0.09692704677581787)
    assert (got - want).abs() > 1e-6 * want.abs()
    comparison = kernels.compare_by_bound(got, want, bound["param"])
    assert comparison.ok and comparison.error_ulps == 32  # 2 ulps of |param| = 1.5
    assert bound["exp_avg"].item() == bound["exp_avg_sq"].item() == 0  # no sqrt on their way


def test_correctly_rounded_steps_of_equal_inputs_must_be_equal() -> None:
    g = torch.Generator().manual_seed(0)
    t = [torch.randn(100, generator=g) for _ in range(3)]
    scalars = SGDScalars.for_group(lr=0.1, weight_decay=1e-2, momentum=0.9, dampening=0.1)
    bound = kernels.sgd_bound(t[0], t[1], t[2], scalars, nesterov=False, first_step=False)
    assert not bound["param"].any() and not bound["momentum_buffer"].any()
    spread = {"grad": torch.full((100,), 1e-9)}
    widened = kernels.sgd_bound(t[0], t[1], t[2], scalars, nesterov=False, first_step=False,
                                spreads=spread)
    assert (widened["param"] >= 0.1 * 0.9 * 1e-9).all()  # lr * (1 - dampening) * |d grad|
    assert (kernels.scale_bound(t[0], 0.37) == 0).all()


def test_a_moving_average_forgets_its_inputs_spread() -> None:
    # exp_avg = exp_avg + 0.1 (g - exp_avg): counted operation by operation exp_avg's spread
    # would grow by 1.1 a step; carried through 0.9 exp_avg + 0.1 g it shrinks by 0.9.
    model = ErrorModel(torch.float32)
    start, end = model.input(torch.ones(10), torch.full((10,), 1e-3)), model.input(torch.zeros(10))
    by_operation = model.add(start, model.mul(model.sub(end, start), 0.1))
    assert (by_operation.spread > 1.1e-3).all()
    lerp = model.lerp(start, end, 0.1).spread
    assert (lerp > 0.9e-3).all() and (lerp < 0.9e-3 + 1e-6).all()  # plus its roundings


def test_comparison_matches_non_finite_values_exactly() -> None:
    want = torch.tensor([math.nan, math.inf, -math.inf, 1.0, 2.0])
    bound = torch.tensor([math.inf, math.inf, 0.0, 0.0, 1e-3])
    assert kernels.allclose_by_bound(want.clone(), want, bound)
    for i, wrong in [(0, 1.0), (1, 1e30), (2, math.inf), (3, math.nan), (4, math.inf)]:
        got = want.clone()
        got[i] = wrong
        assert not kernels.allclose_by_bound(got, want, bound), (i, wrong)
    got = want.clone()
    got[4] = 2.0 + 5e-4
    comparison = kernels.compare_by_bound(got, want, bound)
    assert comparison.ok and comparison.worst_ratio == pytest.approx(0.5, rel=1e-3)
    assert comparison.error_ulps == pytest.approx(5e-4 / 2**-22, rel=1e-3)
    assert not kernels.allclose_by_bound(got, want, torch.full((5,), math.nan))


# Mutations of a copy of kernels.reference: the comparison that the kernel path passes
# against the reference must fail against a reference that is wrong in a small way.


def _adamw_step_copy(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars, *,
                     maximize=False, mistake=None) -> None:
    """kernels.reference.adamw_step_, copied, with an optional mistake."""
    s = scalars
    g = torch.neg(grad) if maximize else grad
    exp_avg.add_(torch.sub(g, exp_avg).mul_(s.one_minus_beta1))
    exp_avg_sq.mul_(s.beta2).add_(torch.mul(g, s.one_minus_beta2).mul_(g))
    v = exp_avg_sq
    if max_exp_avg_sq is not None:
        torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        v = max_exp_avg_sq
    correction = s.bias_correction2_sqrt
    if mistake == "bias correction":  # divides by 1 - beta2^t, not by its square root
        correction = s.bias_correction2_sqrt**2
    denom = torch.sqrt(v).div_(correction).add_(s.eps)
    if s.decay != 1:
        param.mul_(s.decay)
    param.add_(torch.mul(exp_avg, s.neg_step_size).div_(denom))
    if mistake == "drift":  # every value written moves up by one ulp
        for t in (param, exp_avg, exp_avg_sq, max_exp_avg_sq):
            if t is not None:
                t.copy_(torch.nextafter(t, torch.full_like(t, math.inf)))


def _sgd_step_copy(param, grad, momentum_buffer, scalars, *, nesterov, first_step,
                   maximize=False, mistake=None) -> None:
    """kernels.reference.sgd_step_, copied, with an optional mistake."""
    s = scalars
    g = torch.neg(grad) if maximize else grad
    if s.weight_decay != 0:
        g = torch.add(g, torch.mul(param, s.weight_decay))
    if s.momentum != 0:
        if first_step:
            momentum_buffer.copy_(g)
        else:
            momentum_buffer.mul_(s.momentum).add_(torch.mul(g, s.one_minus_dampening))
        g = torch.add(g, torch.mul(momentum_buffer, s.momentum)) if nesterov else momentum_buffer
    param.add_(torch.mul(g, s.neg_lr))
    if mistake == "drift":
        for t in (param, momentum_buffer):
            if t is not None:
                t.copy_(torch.nextafter(t, torch.full_like(t, math.inf)))


def _follow_the_copy(monkeypatch, kind: str, mistake: str | None) -> dict[str, bool]:
    """10 steps of the kernel path (host build) against the fused optimizer running the
    copy of the reference; whether each state name stays within the error model's bound."""
    if kind == "adamw":
        make = lambda p: kernels.FusedAdamW(p, lr=1e-2, weight_decay=1e-2, amsgrad=True)  # noqa: E731
        module, name, copy = _adamw, "adamw_step_", _adamw_step_copy
    else:
        make = lambda p: kernels.FusedSGD(p, lr=0.1, momentum=0.9, weight_decay=1e-2)  # noqa: E731
        module, name, copy = _sgd, "sgd_step_", _sgd_step_copy
    g = torch.Generator().manual_seed(6)
    start = [torch.randn(shape, generator=g) for shape in [(7, 5), (3,), (11, 13)]]
    ours = make([t.clone() for t in start])
    theirs = make([t.clone() for t in start])
    tracker = BoundTracker(ours, theirs)

    def step_theirs() -> None:
        def mistaken(*args, **kwargs) -> None:
            copy(*args, **kwargs, mistake=mistake)

        with pytest.MonkeyPatch.context() as mp:  # only the name the fused optimizer calls
            mp.setattr(module, "reference", types.SimpleNamespace(**{name: mistaken}))
            mp.setattr(kernels._dispatch, "choose_path", _reference_only)
            theirs.step()

    for _ in range(10):
        grads = [torch.randn(t.shape, generator=g) for t in start]
        for group in (ours, theirs):
            for p, grad in zip(group.param_groups[0]["params"], grads, strict=True):
                p.grad = grad.clone()
        tracker.step(ours.step, step_theirs)
    within: dict[str, bool] = {}
    for _, state, a, b, bound in tracker.tensors():
        ok = kernels.allclose_by_bound(a, b, bound)
        within[state] = within.get(state, True) and ok
    return within


def _reference_only(device: torch.device, dtype: torch.dtype) -> kernels._dispatch.PathChoice:
    return kernels._dispatch.PathChoice(kernels._dispatch.REFERENCE, "test")


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_the_unchanged_copy_passes_the_comparison(kernel_path_on_cpu, monkeypatch, kind) -> None:
    assert all(_follow_the_copy(monkeypatch, kind, None).values())


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_a_one_ulp_per_step_drift_fails_the_comparison(kernel_path_on_cpu, monkeypatch, kind):
    """A copy of the reference whose every written value drifts one ulp a step is caught.

    It is caught where the two paths must agree bit for bit (every operation on the way
    rounds correctly on both): AdamW's moments, SGD's param and momentum buffer. In
    AdamW's param a one-ulp-a-step drift is what a legal rounding difference can do
    once the sqrt of the two paths may round apart (each step's final add may then round
    the other way), so no sound bound can tell the two apart there.
    """
    within = _follow_the_copy(monkeypatch, kind, "drift")
    failing = {name for name, ok in within.items() if not ok}
    assert failing == ({"exp_avg", "exp_avg_sq", "max_exp_avg_sq"} if kind == "adamw"
                       else {"param", "momentum_buffer"})


def test_a_wrong_bias_correction_fails_the_comparison(kernel_path_on_cpu, monkeypatch) -> None:
    within = _follow_the_copy(monkeypatch, "adamw", "bias correction")
    assert not within["param"]
    assert within["exp_avg"] and within["exp_avg_sq"]  # the moments do not see it
