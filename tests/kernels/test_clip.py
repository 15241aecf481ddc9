from __future__ import annotations

import math

import pytest
import torch

from hoptune import kernels


def _params(seed: int, dtypes=(torch.float32,), empty: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 4), (7,), (empty,), (3, 3, 2), (1,)]
    params = []
    for i, shape in enumerate(shapes):
        p = torch.zeros(shape, dtype=dtypes[i % len(dtypes)], requires_grad=True)
        if i != 4:  # the last one has no gradient
            p.grad = torch.randn(shape, generator=g, dtype=torch.float64).to(p.dtype) * 3
        params.append(p)
    return params


def _clip_both(max_norm: float, norm_type: float, dtypes=(torch.float32,), empty: int = 0):
    ours, theirs = _params(0, dtypes, empty), _params(0, dtypes, empty)
    total_ours = kernels.clip_grad_norm_(ours, max_norm, norm_type)
    total_theirs = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    return ours, theirs, total_ours, total_theirs


def _assert_same_grads(within_bound, ours, theirs, total, max_norm, dtypes, empty, kernel):
    """Each clipped gradient within the error model's bound of torch's (the scale step
    is one correctly rounded product of equal inputs, so the bound is zero)."""
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p, q, before in zip(ours, theirs, _params(0, dtypes, empty), strict=True):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            bound = kernels.scale_bound(before.grad, coef)
            within_bound(p.grad, q.grad, bound, kernel=kernel, inputs={"grad": before.grad})


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_same_as_torch(within_bound, norm_type, max_norm) -> None:
    # An empty gradient has no inf-norm (torch raises): give it one element then.
    empty = 1 if norm_type == math.inf else 0
    ours, theirs, total_ours, total_theirs = _clip_both(max_norm, norm_type, empty=empty)
    assert torch.equal(total_ours, total_theirs)
    _assert_same_grads(within_bound, ours, theirs, total_theirs, max_norm, (torch.float32,),
                       empty, "clip_grad_norm_ reference vs torch")
    if max_norm == 0.5:
        grads = [p.grad for p in ours if p.grad is not None]
        clipped = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]), norm_type)
        assert clipped.item() == pytest.approx(0.5, rel=1e-5)


@pytest.mark.parametrize("dtypes", [(torch.float32,), (torch.float32, torch.float64)], ids=str)
def test_kernel_path_same_as_torch(kernel_path_on_cpu, within_bound, dtypes) -> None:
    ours, theirs, total_ours, total_theirs = _clip_both(0.5, 2.0, dtypes)
    assert torch.equal(total_ours, total_theirs)
    _assert_same_grads(within_bound, ours, theirs, total_theirs, 0.5, dtypes, 0,
                       "scale kernel (host build) vs torch clip")
    # One launch per dtype over its non-empty gradients: (5, 4), (7,), (3, 3, 2).
    if len(dtypes) == 1:
        expected = [("ht_scale_float32", 20 + 7 + 18)]
    else:
        expected = [("ht_scale_float32", 20), ("ht_scale_float64", 7 + 18)]
    assert kernel_path_on_cpu.launches == expected


def test_edge_cases_as_torch() -> None:
    no_grad = torch.zeros(2, requires_grad=True)
    assert torch.equal(kernels.clip_grad_norm_([no_grad], 1.0), torch.tensor(0.0))
    single = torch.zeros(3, requires_grad=True)
    single.grad = torch.tensor([3.0, 4.0, 0.0])
    assert kernels.clip_grad_norm_(single, 1.0).item() == 5.0
    torch.testing.assert_close(single.grad, torch.tensor([0.6, 0.8, 0.0]), rtol=1e-6, atol=0)
    bad = torch.zeros(2, requires_grad=True)
    bad.grad = torch.tensor([math.inf, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        kernels.clip_grad_norm_([bad], 1.0, error_if_nonfinite=True)
    with pytest.warns(UserWarning, match="empty generator"):
        kernels.clip_grad_norm_((p for p in []), 1.0)
    empty = torch.zeros(0, requires_grad=True)
    empty.grad = torch.zeros(0)
    with pytest.raises(RuntimeError, match="infinity norm on an empty tensor"):
        kernels.clip_grad_norm_([empty], 1.0, math.inf)
