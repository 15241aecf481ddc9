from __future__ import annotations

import itertools

import pytest
import torch

import kernels

OPTIONS = [
    {"amsgrad": amsgrad, "weight_decay": weight_decay}
    for amsgrad, weight_decay in itertools.product([False, True], [0.0, 1e-2])
] + [{"amsgrad": True, "weight_decay": 1e-2, "maximize": True, "betas": (0.8, 0.99)}]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_follows_torch_adamw_for_200_steps(training, snapshot, assert_follows, options, dtype):
    ours = training.run(lambda p: kernels.FusedAdamW(p, **options), 200, dtype)
    theirs = training.run(lambda p: torch.optim.AdamW(p, foreach=False, **options), 200, dtype)
    assert_follows(snapshot(*ours), snapshot(*theirs))
    first = torch.nn.utils.parameters_to_vector(training.model(dtype).parameters())
    moved = torch.nn.utils.parameters_to_vector(ours[0].parameters())
    assert (moved - first).abs().max() > 0.1, "the model did not train"


@pytest.mark.parametrize("path", ["reference", "kernel"])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_resumes_bitwise_from_a_state_dict(request, training, snapshot, amsgrad, path) -> None:
    host = request.getfixturevalue("kernel_path_on_cpu") if path == "kernel" else None

    def make(p):
        return kernels.FusedAdamW(p, lr=1e-2, amsgrad=amsgrad)

    straight = training.run(make, 12)
    resumed = training.run_resumed(make, 5, 12)
    for a, b in zip(snapshot(*straight), snapshot(*resumed), strict=True):
        assert torch.equal(a, b)
    assert host is None or ("ht_adamw_float32", 897) in host.launches  # all of RatingNet


def _fake_training_tensors(dtype_of: list[torch.dtype]) -> list[torch.Tensor]:
    shapes = [(7, 5), (3,), (0,), (11, 13), (1,), (2, 2, 2)]
    g = torch.Generator().manual_seed(3)
    return [
        torch.randn(shape, generator=g, dtype=torch.float64).to(dtype_of[i % len(dtype_of)])
        for i, shape in enumerate(shapes)
    ]


def _run_with_grads(params: list[torch.Tensor], optimizer: torch.optim.Optimizer, n: int) -> None:
    g = torch.Generator().manual_seed(4)
    for step in range(n):
        for i, p in enumerate(params):
            if i == 4 and step % 3 == 0:
                p.grad = None  # a parameter without a gradient this step is left alone
                continue
            p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 10
        optimizer.step()


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_kernel_path_equals_reference(kernel_path_on_cpu, options) -> None:
    dtypes = [torch.float32, torch.float64]
    results = []
    for use_kernel in (True, False):
        params = _fake_training_tensors(dtypes)
        optimizer = kernels.FusedAdamW(params, lr=1e-2, **options)
        if use_kernel:
            _run_with_grads(params, optimizer, 10)
        else:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(kernels._dispatch, "choose_path", _reference_only)
                _run_with_grads(params, optimizer, 10)
        results.append((params, optimizer))
    (kp, ko), (rp, ro) = results
    for a, b in zip(kp, rp, strict=True):
        # Equal but for torch's CPU sqrt, which is off by an ulp in about 1% of elements.
        tol = TOLERANCE[a.dtype]
        torch.testing.assert_close(a, b, **tol)
        sa, sb = ko.state[a], ro.state[b]
        assert sa.keys() == sb.keys()
        for key in sa:
            torch.testing.assert_close(sa[key], sb[key], **tol)
    # One launch per (dtype, step count) and step: 10 for the float64 tensors; 16 for the
    # float32 ones, two on the 6 steps where the one that skips steps (every third) is behind.
    names = [name for name, _ in kernel_path_on_cpu.launches]
    assert names.count("ht_adamw_float64") == 10
    assert names.count("ht_adamw_float32") == 16


TOLERANCE = {
    torch.float32: {"rtol": 1e-6, "atol": 1e-9},
    torch.float64: {"rtol": 1e-12, "atol": 1e-15},
}


def _reference_only(device: torch.device, dtype: torch.dtype) -> kernels._dispatch.PathChoice:
    return kernels._dispatch.PathChoice(kernels._dispatch.REFERENCE, "test")


def test_complex_and_strided_parameters_follow_torch(kernel_path_on_cpu) -> None:
    g = torch.Generator().manual_seed(5)
    base = [
        torch.randn(4, 3, generator=g, dtype=torch.complex64),
        torch.randn(6, 4, generator=g).t(),
    ]
    ours = [t.clone() for t in base]
    theirs = [t.clone() for t in base]
    assert not ours[1].is_contiguous()
    fused = kernels.FusedAdamW(ours, lr=1e-2, amsgrad=True)
    plain = torch.optim.AdamW(theirs, lr=1e-2, amsgrad=True, foreach=False)
    for _ in range(5):
        grads = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in base]
        for p, q, grad in zip(ours, theirs, grads, strict=True):
            p.grad, q.grad = grad.clone(), grad.clone()
        fused.step()
        plain.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)
    assert ("ht_adamw_float32", 24) in kernel_path_on_cpu.launches  # the complex one, as pairs


def test_loads_a_torch_adamw_state_dict(training, snapshot, assert_follows) -> None:
    model, plain = training.run(lambda p: torch.optim.AdamW(p, foreach=False), 5)
    fused = kernels.FusedAdamW(model.parameters())
    fused.load_state_dict(plain.state_dict())
    training.steps(model, fused, 5)
    expected = training.run(lambda p: torch.optim.AdamW(p, foreach=False), 10)
    assert_follows(snapshot(model, fused), snapshot(*expected))


def test_rejects_what_torch_rejects() -> None:
    p = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="learning rate"):
        kernels.FusedAdamW(p, lr=-1.0)
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        kernels.FusedAdamW(p, betas=(0.9, 1.0))
    opt = kernels.FusedAdamW(p)
    p[0].grad = torch.zeros(2).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


def test_step_calls_the_closure_with_gradients_enabled() -> None:
    p = torch.ones(3, requires_grad=True)
    opt = kernels.FusedAdamW([p], lr=0.1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 3.0
    assert torch.all(p < 1)
