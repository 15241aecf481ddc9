"""The CuPy kernels on a real GPU, through the real ``_cupy.launch``; skipped without one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _cupy, _specs, reference
from hoptune.kernels._selftest import Check, agreement, run_self_test

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

CUDA = torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def real_kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The real CuPy launch, spied on: the names of the kernels it launched."""
    pytest.importorskip("cupy", reason="CuPy is not installed here")
    monkeypatch.delenv("HOPTUNE_KERNELS", raising=False)
    kernels.reset()
    launched: list[str] = []
    real = _cupy.launch

    def spy(spec, dtype, device, args, size) -> None:  # noqa: ANN001
        launched.append(spec.name)
        real(spec, dtype, device, args, size)

    monkeypatch.setattr(_cupy, "launch", spy)
    for spec in _specs.ALL:  # the self-tests run before first use: run them now, then count
        assert kernels.self_test(spec, CUDA).passed
    launched.clear()
    yield launched
    kernels.reset()


@pytest.mark.parametrize("spec", _specs.ALL, ids=lambda s: s.name)
def test_every_kernel_passes_its_self_test_here_in_under_a_second(spec) -> None:
    result = kernels.self_test(spec, CUDA, fresh=True)  # compiles, if CuPy has not cached it
    assert result.passed, result.reason
    assert result.versions["device_name"] == torch.cuda.get_device_name(CUDA)
    again = run_self_test(spec, CUDA)
    assert again.passed and again.seconds < 1.0, again


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("name", "hyper"), [
    ("fused_adamw", {"lr": 1e-3, "weight_decay": 0.01}),
    ("fused_adamw", {"lr": 1e-3, "weight_decay": 0.0, "amsgrad": True}),
    ("fused_sgd", {"lr": 0.01, "momentum": 0.9, "nesterov": True}),
    ("fused_sgd", {"lr": 0.01}),
])
def test_a_fused_optimizer_launches_its_kernel_and_agrees_with_the_reference(
        name, hyper, dtype, real_kernels) -> None:
    """Three steps; each one compared with the reference from the same state, by the error model."""
    g = torch.Generator().manual_seed(0)
    shapes = [(300, 7), (64,), (1,)]
    params = [torch.randn(s, generator=g, dtype=torch.float64).to(CUDA, dtype).requires_grad_()
              for s in shapes]
    optimizer = kernels.make_optimizer(name, params, **hyper)
    assert type(optimizer) in (kernels.FusedAdamW, kernels.FusedSGD)
    kernel = "ht_adamw" if name == "fused_adamw" else "ht_sgd"
    for step in range(1, 4):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64).to(CUDA, dtype)
        before = [_inputs(name, hyper, p, optimizer.state[p]) for p in params]
        optimizer.step()
        for p, inputs in zip(params, before, strict=True):
            want = {k: None if v is None else v.clone() for k, v in inputs.items()}
            options = _reference_step(name, hyper, want, step)
            got = {"param": p.detach(), **{k: v for k, v in optimizer.state[p].items()
                                           if k != "step"}}
            for output, tensor in got.items():
                check = Check(kernel, output, tensor.reshape(-1),
                              want[output].reshape(-1),
                              {k: None if v is None else v.reshape(-1)
                               for k, v in inputs.items()}, options)
                assert agreement(check)[1] <= 1.0, (output, step)
    assert real_kernels.count(kernel) == 3


def _inputs(name: str, hyper: dict, p: torch.Tensor, state: dict
            ) -> dict[str, torch.Tensor | None]:
    """The reference's inputs to p's next step, as copies (absent state: what ours starts from)."""
    zeros = torch.zeros_like(p.detach())
    inputs = {"param": p.detach().clone(), "grad": p.grad.clone()}
    if name == "fused_adamw":
        for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            inputs[key] = state[key].clone() if key in state else zeros.clone()
        if not hyper.get("amsgrad"):
            inputs["max_exp_avg_sq"] = None
    else:
        buf = state.get("momentum_buffer")
        inputs["momentum_buffer"] = (None if not hyper.get("momentum")
                                     else zeros.clone() if buf is None else buf.clone())
    return inputs


def _reference_step(name: str, hyper: dict, t: dict, step: int) -> dict:
    """One reference step on t (the inputs' copies) in place; the options of its bound."""
    if name == "fused_adamw":
        scalars = reference.AdamWScalars.for_step(lr=hyper["lr"], beta1=0.9, beta2=0.999,
                                                  eps=1e-8, weight_decay=hyper["weight_decay"],
                                                  step=step)
        reference.adamw_step_(t["param"], t["grad"], t["exp_avg"], t["exp_avg_sq"],
                              t["max_exp_avg_sq"], scalars)
        return {"scalars": scalars, "maximize": False}
    scalars = reference.SGDScalars.for_group(lr=hyper["lr"], weight_decay=0.0,
                                             momentum=hyper.get("momentum", 0.0), dampening=0.0)
    nesterov = hyper.get("nesterov", False)
    reference.sgd_step_(t["param"], t["grad"], t["momentum_buffer"], scalars, nesterov=nesterov,
                        first_step=step == 1)
    return {"scalars": scalars, "nesterov": nesterov, "first_step": step == 1,
            "maximize": False}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scaled_sigmoid_forward_and_backward_on_cuda(dtype, real_kernels) -> None:
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(5000, generator=g, dtype=torch.float64) * 6).to(CUDA, dtype)
    x.requires_grad_()  # the autograd input that torch refuses to export without a detach
    y = kernels.scaled_sigmoid(x, 4.0)
    grad_out = torch.randn(5000, generator=g, dtype=torch.float64).to(CUDA, dtype)
    y.backward(grad_out)
    assert real_kernels == ["ht_scaled_sigmoid", "ht_scaled_sigmoid_grad"]
    detached = x.detach()
    forward = Check("ht_scaled_sigmoid", "y", y.detach(),
                    reference.scaled_sigmoid(detached, 4.0), {"x": detached}, {"scale": 4.0})
    backward = Check("ht_scaled_sigmoid_grad", "grad_x", x.grad,
                     reference.scaled_sigmoid_grad(detached, grad_out, 4.0),
                     {"x": detached, "grad_out": grad_out}, {"scale": 4.0})
    assert agreement(forward)[1] <= 1.0 and agreement(backward)[1] <= 1.0


def test_clipping_scales_on_cuda_like_torch(real_kernels) -> None:
    g = torch.Generator().manual_seed(2)
    params = [torch.zeros(s, device=CUDA, requires_grad=True) for s in (1000, 33)]
    grads = [torch.randn(p.shape, generator=g).to(CUDA) * 10 for p in params]
    theirs = [p.detach().clone().requires_grad_() for p in params]
    for p, q, grad in zip(params, theirs, grads, strict=True):
        p.grad, q.grad = grad.clone(), grad.clone()
    norm = kernels.clip_grad_norm_(params, 1.0)
    torch_norm = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert real_kernels == ["ht_scale"]
    torch.testing.assert_close(norm, torch_norm)
    for p, q in zip(params, theirs, strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_kernels_run_on_torchs_current_stream(real_kernels) -> None:
    stream = torch.cuda.Stream()
    x = torch.linspace(-5, 5, 10_000, device=CUDA)
    with torch.cuda.stream(stream):
        y = kernels.scaled_sigmoid(x, 2.0)
    stream.synchronize()
    torch.testing.assert_close(y, reference.scaled_sigmoid(x, 2.0))
