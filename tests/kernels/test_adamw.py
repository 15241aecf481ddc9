from __future__ import annotations

import copy
import itertools

import pytest
import torch

from hoptune import kernels
from tests.kernels.tracking import BoundTracker

OPTIONS = [
    {"amsgrad": amsgrad, "weight_decay": weight_decay}
    for amsgrad, weight_decay in itertools.product([False, True], [0.0, 1e-2])
] + [{"amsgrad": True, "weight_decay": 1e-2, "maximize": True, "betas": (0.8, 0.99)}]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_follows_torch_adamw_for_200_steps(training, assert_follows, options, dtype):
    model, _ = training.run_together(
        lambda p: kernels.FusedAdamW(p, **options),
        lambda p: torch.optim.AdamW(p, foreach=False, **options),
        200,
        dtype,
        check=lambda t: assert_follows(t, "FusedAdamW vs torch.optim, 200 trained steps"),
    )
    first = torch.nn.utils.parameters_to_vector(training.model(dtype).parameters())
    moved = torch.nn.utils.parameters_to_vector(model.parameters())
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


def _steps_with_grads(tracker: BoundTracker, n: int, step_ours, step_theirs) -> None:
    """n steps of both optimizers on the same random gradients, some skipped now and then."""
    g = torch.Generator().manual_seed(4)
    ours = [p for group in tracker.ours.param_groups for p in group["params"]]
    theirs = [p for group in tracker.theirs.param_groups for p in group["params"]]
    for step in range(n):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if i == 4 and step % 3 == 0:
                a.grad = b.grad = None  # a parameter without a gradient this step is left alone
                continue
            grad = torch.randn(a.shape, generator=g, dtype=torch.float64).to(a.dtype) * 10
            a.grad, b.grad = grad.clone(), grad.clone()
        tracker.step(step_ours, step_theirs)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_kernel_path_follows_the_reference(kernel_path_on_cpu, assert_follows, options) -> None:
    dtypes = [torch.float32, torch.float64]
    ours = kernels.FusedAdamW(_fake_training_tensors(dtypes), lr=1e-2, **options)
    theirs = kernels.FusedAdamW(_fake_training_tensors(dtypes), lr=1e-2, **options)

    def step_theirs() -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(kernels._dispatch, "choose_path", _reference_only)
            theirs.step()

    tracker = BoundTracker(ours, theirs)
    _steps_with_grads(tracker, 10, ours.step, step_theirs)
    assert_follows(tracker, "AdamW kernel (host build) vs reference, 10 steps")
    # One launch per (dtype, step count) and step: 10 for the float64 tensors; 16 for the
    # float32 ones, two on the 6 steps where the one that skips steps (every third) is behind.
    names = [name for name, _ in kernel_path_on_cpu.launches]
    assert names.count("ht_adamw_float64") == 10
    assert names.count("ht_adamw_float32") == 16


def _reference_only(device: torch.device, dtype: torch.dtype) -> kernels._dispatch.PathChoice:
    return kernels._dispatch.PathChoice(kernels._dispatch.REFERENCE, "test")


def test_complex_and_strided_parameters_follow_torch(kernel_path_on_cpu, assert_follows) -> None:
    g = torch.Generator().manual_seed(5)
    base = [
        torch.randn(4, 3, generator=g, dtype=torch.complex64),
        torch.randn(6, 4, generator=g).t(),
    ]
    ours = [t.clone() for t in base]
    theirs = [t.clone() for t in base]
    assert not ours[1].is_contiguous()
    tracker = BoundTracker(
        kernels.FusedAdamW(ours, lr=1e-2, amsgrad=True),
        torch.optim.AdamW(theirs, lr=1e-2, amsgrad=True, foreach=False),
    )
    for _ in range(5):
        grads = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in base]
        for p, q, grad in zip(ours, theirs, grads, strict=True):
            p.grad, q.grad = grad.clone(), grad.clone()
        tracker.step()
    assert_follows(tracker, "FusedAdamW (complex, strided) vs torch.optim, 5 steps")
    assert ("ht_adamw_float32", 24) in kernel_path_on_cpu.launches  # the complex one, as pairs


def test_loads_a_torch_adamw_state_dict(training, assert_follows) -> None:
    model, plain = training.run(lambda p: torch.optim.AdamW(p, foreach=False), 5)
    fused = kernels.FusedAdamW(model.parameters())
    fused.load_state_dict(copy.deepcopy(plain.state_dict()))  # loading keeps the tensors
    going_on = copy.deepcopy(model)
    torch_going_on = torch.optim.AdamW(going_on.parameters(), foreach=False)
    torch_going_on.load_state_dict(copy.deepcopy(plain.state_dict()))
    tracker = BoundTracker(fused, torch_going_on)
    label = "FusedAdamW from a torch.optim state vs torch.optim, 5 steps"
    training.steps_together([model, going_on], tracker, 5, lambda t: assert_follows(t, label))


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
