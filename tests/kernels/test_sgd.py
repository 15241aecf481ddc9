from __future__ import annotations

import pytest
import torch

from hoptune import kernels
from tests.kernels.tracking import BoundTracker

OPTIONS = [
    {"momentum": 0.0, "weight_decay": 0.0},
    {"momentum": 0.0, "weight_decay": 1e-2},
    {"momentum": 0.9, "weight_decay": 0.0},
    {"momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-2},
    {"momentum": 0.9, "nesterov": True, "weight_decay": 0.0},
    {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-2},
    {"momentum": 0.5, "dampening": 0.5, "maximize": True},
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_follows_torch_sgd_for_200_steps(training, assert_follows, options, dtype):
    model, _ = training.run_together(
        lambda p: kernels.FusedSGD(p, lr=0.003, **options),
        lambda p: torch.optim.SGD(p, lr=0.003, foreach=False, **options),
        200,
        dtype,
        check=lambda t: assert_follows(t, "FusedSGD vs torch.optim, 200 trained steps"),
    )
    first = torch.nn.utils.parameters_to_vector(training.model(dtype).parameters())
    moved = torch.nn.utils.parameters_to_vector(model.parameters())
    assert (moved - first).abs().max() > 0.1, "the model did not train"


@pytest.mark.parametrize("path", ["reference", "kernel"])
@pytest.mark.parametrize("options", [OPTIONS[3], OPTIONS[5]], ids=str)
def test_resumes_bitwise_from_a_state_dict(request, training, snapshot, options, path) -> None:
    host = request.getfixturevalue("kernel_path_on_cpu") if path == "kernel" else None

    def make(p):
        return kernels.FusedSGD(p, lr=0.05, **options)

    straight = training.run(make, 12)
    resumed = training.run_resumed(make, 5, 12)
    for a, b in zip(snapshot(*straight), snapshot(*resumed), strict=True):
        assert torch.equal(a, b)
    assert host is None or ("ht_sgd_float32", 897) in host.launches  # all of RatingNet


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_kernel_path_follows_the_reference(kernel_path_on_cpu, assert_follows, options) -> None:
    # Every operation of the SGD step rounds correctly on both paths, so the error
    # model's bound is zero here: the kernel must equal the reference bit for bit.
    shapes = [(7, 5), (3,), (0,), (11, 13), (1,)]
    g = torch.Generator().manual_seed(3)
    start = [
        torch.randn(s, generator=g, dtype=torch.float64).to(
            torch.float32 if i % 2 else torch.float64
        )
        for i, s in enumerate(shapes)
    ]
    ours = kernels.FusedSGD([t.clone() for t in start], lr=0.1, **options)
    theirs = kernels.FusedSGD([t.clone() for t in start], lr=0.1, **options)
    tracker = BoundTracker(ours, theirs)

    def step_theirs() -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(kernels._dispatch, "choose_path", _reference_only)
            theirs.step()

    pairs = list(zip(ours.param_groups[0]["params"], theirs.param_groups[0]["params"],
                     strict=True))
    for step in range(8):
        for i, (a, b) in enumerate(pairs):
            late = i == 3 and step < 2  # starts its momentum two steps later
            grad = None if late else torch.randn(a.shape, generator=g).to(a.dtype)
            a.grad, b.grad = grad, None if grad is None else grad.clone()
        tracker.step(ours.step, step_theirs)
    assert_follows(tracker, "SGD kernel (host build) vs reference, 8 steps")
    for _, _, a, b, bound in tracker.tensors():
        assert torch.equal(a, b) and not bound.any()
    # One launch per dtype and step, plus one for the late float32 tensor's first momentum
    # step, which starts its buffer from the gradient while its neighbour's runs on.
    names = [name for name, _ in kernel_path_on_cpu.launches]
    assert names.count("ht_sgd_float64") == 8
    assert names.count("ht_sgd_float32") == 8 + (1 if options["momentum"] else 0)


def _reference_only(device: torch.device, dtype: torch.dtype) -> kernels._dispatch.PathChoice:
    return kernels._dispatch.PathChoice(kernels._dispatch.REFERENCE, "test")


def test_momentum_state_matches_torch() -> None:
    p = torch.ones(3, requires_grad=True)
    q = torch.ones(3, requires_grad=True)
    fused = kernels.FusedSGD([p], lr=0.1, momentum=0.9)
    plain = torch.optim.SGD([q], lr=0.1, momentum=0.9)
    none = kernels.FusedSGD([torch.ones(1, requires_grad=True)], lr=0.1)
    for opt, t in ((fused, p), (plain, q)):
        t.grad = torch.tensor([1.0, -2.0, 0.5])
        opt.step()
    assert fused.state[p].keys() == plain.state[q].keys() == {"momentum_buffer"}
    assert torch.equal(fused.state[p]["momentum_buffer"], plain.state[q]["momentum_buffer"])
    none.param_groups[0]["params"][0].grad = torch.ones(1)
    none.step()
    assert len(none.state) == 0


def test_rejects_what_torch_rejects() -> None:
    p = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="Nesterov"):
        kernels.FusedSGD(p, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="momentum"):
        kernels.FusedSGD(p, momentum=-1)
