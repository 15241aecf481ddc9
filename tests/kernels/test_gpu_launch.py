"""On a CUDA device, the kernels run through the real ``_cupy.launch`` and change the tensors.

Everywhere else in the suite ``_cupy.launch`` is replaced by a host build, so a
launch that did nothing would go unnoticed there. These tests call the real
one (and the public functions that reach it) on CUDA tensors: each output is
first filled with NaN, or the parameters' starting values are kept, so a launch
that wrote nothing fails. Skipped, with the reason, where no CUDA device is
usable; run them with ``python -m pytest -m gpu tests`` (see GPU.md).
"""

from __future__ import annotations

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _cupy, _dispatch, _specs, reference


def _no_device_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False"
    return _cupy.unavailable_reason()


REASON = _no_device_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

DTYPES = [torch.float32, torch.float64]


def _cuda(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype).cuda()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_kernel_path_is_chosen_on_a_cuda_device(dtype: torch.dtype) -> None:
    choice = _dispatch.choose_path(torch.device("cuda", 0), dtype)
    assert choice.path == _dispatch.KERNEL, choice.reason


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_launch_writes_every_element_of_its_output(dtype: torch.dtype) -> None:
    x = _cuda(3, 1000, dtype=dtype)
    grad_out = _cuda(3, 1000, dtype=dtype, seed=1)
    y = torch.full_like(x, float("nan"))
    grad_x = torch.full_like(x, float("nan"))
    name = _dispatch.dtype_name(dtype)
    _cupy.launch(_specs.SCALED_SIGMOID, name, x.device, {"x": x, "scale": 4.0, "y": y}, x.numel())
    _cupy.launch(_specs.SCALED_SIGMOID_GRAD, name, x.device,
                 {"x": x, "grad_out": grad_out, "scale": 4.0, "grad_x": grad_x}, x.numel())
    torch.cuda.synchronize()
    torch.testing.assert_close(y, reference.scaled_sigmoid(x, 4.0))
    torch.testing.assert_close(grad_x, reference.scaled_sigmoid_grad(x, grad_out, 4.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fused", ["adamw", "sgd"])
def test_fused_optimizers_update_cuda_parameters_like_torch(fused: str,
                                                            dtype: torch.dtype) -> None:
    shapes = [(64, 32), (32,), (7, 3, 5)]
    start = [_cuda(*s, dtype=dtype, seed=i) for i, s in enumerate(shapes)]
    grads = [[_cuda(*s, dtype=dtype, seed=100 * step + i) for i, s in enumerate(shapes)]
             for step in range(5)]

    def run(make) -> list[torch.Tensor]:  # noqa: ANN001
        params = [torch.nn.Parameter(t.clone()) for t in start]
        optimizer = make(params)
        for step_grads in grads:
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
        torch.cuda.synchronize()
        return [p.detach() for p in params]

    if fused == "adamw":
        ours = run(lambda p: kernels.FusedAdamW(p, lr=1e-2, weight_decay=1e-2))
        theirs = run(lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=1e-2, foreach=False))
    else:
        ours = run(lambda p: kernels.FusedSGD(p, lr=1e-2, momentum=0.9, nesterov=True))
        theirs = run(lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True,
                                               foreach=False))
    for before, mine, torch_s in zip(start, ours, theirs, strict=True):
        assert not torch.equal(mine, before), "the kernel left the parameters as they were"
        torch.testing.assert_close(mine, torch_s)


@pytest.mark.parametrize("fused", ["adamw", "sgd"])
def test_a_planned_step_on_cuda_is_bitwise_the_unplanned_one(fused: str) -> None:
    """Many tensors, some of several chunks and one empty: the plan's cached chunk table and
    launch shape give, launch after launch, exactly what a step built anew gives."""
    shapes = [(300, 301), (0,), (5,), (70_001,), (3, 3)] + [(13 * i + 1,) for i in range(60)]
    start = [_cuda(*s, dtype=torch.float32, seed=i) for i, s in enumerate(shapes)]

    def make(params):  # noqa: ANN001, ANN202
        if fused == "adamw":
            return kernels.FusedAdamW(params, lr=1e-2, weight_decay=1e-2)
        return kernels.FusedSGD(params, lr=1e-2, momentum=0.9, weight_decay=1e-3)

    runs = []
    for planned in (True, False):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        optimizer = make(params)
        optimizer.planned = planned
        for step in range(4):
            for i, p in enumerate(params):
                p.grad = _cuda(*shapes[i], dtype=torch.float32, seed=1000 * step + i)
            optimizer.step()
        torch.cuda.synchronize()
        plans = optimizer.__dict__.get("_plans", {}).values()
        assert any(plan is not None for plan in plans) is planned
        runs.append([p.detach() for p in params])
    for before, a, b in zip(start, *runs, strict=True):
        assert torch.equal(a, b)
        if before.numel():
            assert not torch.equal(a, before), "the kernel left the parameters as they were"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clip_grad_norm_scales_cuda_gradients(dtype: torch.dtype) -> None:
    params = [torch.nn.Parameter(_cuda(100, dtype=dtype, seed=i)) for i in range(3)]
    for i, p in enumerate(params):
        p.grad = 10 * _cuda(100, dtype=dtype, seed=10 + i)
    expected = [p.grad.clone() for p in params]
    norm = kernels.clip_grad_norm_(params, 1.0)
    torch.cuda.synchronize()
    coef = min(1.0, 1.0 / (float(norm) + 1e-6))
    assert coef < 0.5  # the gradients were large: a launch that did nothing shows
    for p, g in zip(params, expected, strict=True):
        torch.testing.assert_close(p.grad, g * coef)
