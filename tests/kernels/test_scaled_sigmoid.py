from __future__ import annotations

import math

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import reference


def test_is_scale_times_sigmoid() -> None:
    x = torch.linspace(-30, 30, 601, dtype=torch.float64)
    for scale in (1.0, 5.0, 0.25):
        torch.testing.assert_close(
            kernels.scaled_sigmoid(x, scale), scale * torch.sigmoid(x), rtol=1e-15, atol=1e-300
        )


def test_saturates_without_overflow() -> None:
    x = torch.tensor([-math.inf, -1e30, -200.0, 200.0, 1e30, math.inf, math.nan])
    x.requires_grad_()
    y = kernels.scaled_sigmoid(x, 5.0)
    assert y.tolist()[:6] == [0.0, 0.0, 0.0, 5.0, 5.0, 5.0]
    assert math.isnan(y[6].item())
    y.sum().backward()
    assert x.grad.tolist()[:6] == [0.0] * 6


def test_gradient_is_exact() -> None:
    x = torch.randn(50, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: kernels.scaled_sigmoid(t, 3.0), (x,))
    grad_out = torch.randn(50, dtype=torch.float64)
    (ours,) = torch.autograd.grad(kernels.scaled_sigmoid(x, 3.0), x, grad_out)
    (theirs,) = torch.autograd.grad(3.0 * torch.sigmoid(x), x, grad_out)
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_kernel_path_matches_the_reference(kernel_path_on_cpu, within_bound, dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 257, generator=g, dtype=torch.float64) * 20).to(dtype)
    grad_out = torch.randn(3, 257, generator=g, dtype=torch.float64).to(dtype)
    leaf = x.clone().requires_grad_()
    y = kernels.scaled_sigmoid(leaf, 5.0)
    y.backward(grad_out)
    assert [name for name, _ in kernel_path_on_cpu.launches] == [
        f"ht_scaled_sigmoid_{str(dtype)[6:]}",
        f"ht_scaled_sigmoid_grad_{str(dtype)[6:]}",
    ]
    # The host build's exp (the C library's) and torch's may differ by an ulp or two.
    within_bound(y.detach(), reference.scaled_sigmoid(x, 5.0),
                 kernels.scaled_sigmoid_bound(x, 5.0),
                 kernel="scaled_sigmoid kernel path vs reference", inputs={"x": x})
    within_bound(leaf.grad, reference.scaled_sigmoid_grad(x, grad_out, 5.0),
                 kernels.scaled_sigmoid_grad_bound(x, grad_out, 5.0),
                 kernel="scaled_sigmoid_grad kernel path vs reference",
                 inputs={"x": x, "grad_out": grad_out})
