"""The cohort optimizers: N trials' stacked parameters, per-trial hyperparameters, one step.

Trial i's slice of a cohort step runs exactly the operations of a single-trial
step with trial i's scalars (reference.adamw_cohort_step_, adamw.cuh through
ht_adamw_cohort), so on the same path a cohort must equal N single-trial
optimizers bit for bit. Across paths (the host build of the cohort kernel
against the torch reference) they are compared under the error model's bound,
trial by trial, as the single-trial kernels are.
"""

from __future__ import annotations

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _bounds, _dispatch, reference
from tests.host_build import device_steps_beside

SHAPES = [(7, 5), (3,), (0,), (11, 13)]
ADAMW_TRIALS = [
    {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2},
    {"lr": 3e-3, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.0},
    {"lr": 1e-1, "betas": (0.5, 0.9), "eps": 1e-8, "weight_decay": 0.3},
]
SGD_TRIALS = [
    {"lr": 0.1, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0},
    {"lr": 0.03, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-2},
    {"lr": 0.01, "momentum": 0.5, "dampening": 0.0, "weight_decay": 0.0},
]


def _start(dtype: torch.dtype, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn((n, *s), generator=g, dtype=torch.float64).to(dtype) for s in SHAPES]


def _cohort_adamw(params, trials, **flags):
    return kernels.CohortAdamW(
        params, lr=[t["lr"] for t in trials], betas=[t["betas"] for t in trials],
        eps=[t["eps"] for t in trials], weight_decay=[t["weight_decay"] for t in trials],
        **flags)


def _cohort_sgd(params, trials, **flags):
    return kernels.CohortSGD(
        params, **{k: [t[k] for t in trials] for k in ("lr", "momentum", "dampening",
                                                         "weight_decay")}, **flags)


def _random_grads(params, g: torch.Generator) -> list[torch.Tensor]:
    return [torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 3
            for p in params]


def _run_against_singles(make_cohort, make_single, trials, dtype, steps, *, ahead=(2, 0, 5)):
    """Each trial first steps alone ``ahead[i]`` times (so step counts and momentum
    buffers differ, as for trials that joined at different epoch boundaries); then a
    cohort is made from their weights and states, and the cohort and the single-trial
    optimizers step ``steps`` times more on the same random gradients."""
    n = len(trials)
    start = _start(dtype, n)
    singles = [[t[i].clone() for t in start] for i in range(n)]
    single_opts = [make_single(singles[i], trials[i]) for i in range(n)]
    g = torch.Generator().manual_seed(4)
    for i in range(n):
        for _ in range(ahead[i]):
            for p, grad in zip(singles[i], _random_grads(singles[i], g), strict=True):
                p.grad = grad
            single_opts[i].step()
    stacked = [torch.stack([singles[i][j].detach() for i in range(n)])
               for j in range(len(SHAPES))]
    cohort = make_cohort(stacked, trials)
    for i in range(n):
        for p, single in zip(stacked, singles[i], strict=True):
            cohort.set_member_state(p, i, single_opts[i].state.get(single, {}))
    for _ in range(steps):
        grads = _random_grads(stacked, g)
        for p, grad in zip(stacked, grads, strict=True):
            p.grad = grad.clone()
        cohort.step()
        for i in range(n):
            for p, grad in zip(singles[i], grads, strict=True):
                p.grad = grad[i].clone()
            single_opts[i].step()
    return stacked, cohort, singles, single_opts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("flags", [{}, {"amsgrad": True}, {"amsgrad": True, "maximize": True}],
                         ids=str)
@pytest.mark.parametrize("path", ["reference", "kernel"])
def test_adamw_cohort_equals_single_trials_bitwise(request, dtype, flags, path) -> None:
    host = request.getfixturevalue("kernel_path_on_cpu") if path == "kernel" else None
    stacked, cohort, singles, opts = _run_against_singles(
        lambda p, t: _cohort_adamw(p, t, **flags),
        lambda p, t: kernels.FusedAdamW(p, **t, **flags), ADAMW_TRIALS, dtype, 6)
    for i in range(len(ADAMW_TRIALS)):
        for p, single in zip(stacked, singles[i], strict=True):
            assert torch.equal(p[i], single), f"trial {i}"
            got, want = cohort.member_state(p, i), opts[i].state[single]
            assert sorted(got) == sorted(want)
            for name in want:
                assert torch.equal(got[name], torch.as_tensor(want[name])), (i, name)
    assert [float(cohort.member_state(stacked[0], i)["step"]) for i in range(3)] == [8, 6, 11]
    if host is not None:
        kinds = {name for name, _ in host.launches}
        assert f"ht_adamw_cohort_{str(dtype)[6:]}" in kinds


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("flags", [{}, {"maximize": True}], ids=str)
@pytest.mark.parametrize("path", ["reference", "kernel"])
def test_sgd_cohort_equals_single_trials_bitwise(request, dtype, flags, path) -> None:
    request.getfixturevalue("kernel_path_on_cpu") if path == "kernel" else None
    stacked, cohort, singles, opts = _run_against_singles(
        lambda p, t: _cohort_sgd(p, t, **flags),
        lambda p, t: kernels.FusedSGD(p, **t, **flags), SGD_TRIALS, dtype, 6, ahead=(1, 0, 2))
    for i in range(len(SGD_TRIALS)):
        for p, single in zip(stacked, singles[i], strict=True):
            assert torch.equal(p[i], single), f"trial {i}"
            got, want = cohort.member_state(p, i), opts[i].state.get(single, {})
            assert sorted(got) == sorted(want)
            for name in want:
                assert torch.equal(got[name], want[name]), (i, name)


def test_nesterov_cohort_equals_single_trials_bitwise(kernel_path_on_cpu) -> None:
    trials = [{**t, "momentum": 0.9, "dampening": 0.0} for t in SGD_TRIALS]
    stacked, _, singles, _ = _run_against_singles(
        lambda p, t: _cohort_sgd(p, t, nesterov=True),
        lambda p, t: kernels.FusedSGD(p, **t, nesterov=True), trials, torch.float32, 4)
    for i in range(len(trials)):
        for p, single in zip(stacked, singles[i], strict=True):
            assert torch.equal(p[i], single)


def _reference_only(device: torch.device, dtype: torch.dtype) -> _dispatch.PathChoice:
    return _dispatch.PathChoice(_dispatch.REFERENCE, "test")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_adamw_cohort_kernel_follows_the_reference(kernel_path_on_cpu, within_bound,
                                                   dtype) -> None:
    """One step through the host build against the reference, trial by trial under
    adamw_bound with that trial's scalars (the kernel's sqrt may round apart)."""
    n = len(ADAMW_TRIALS)
    start = _start(dtype, n)
    g = torch.Generator().manual_seed(5)
    grads = [torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype) for p in start]
    ours, theirs = [p.clone() for p in start], [p.clone() for p in start]
    for p, q, grad in zip(ours, theirs, grads, strict=True):
        p.grad, q.grad = grad.clone(), grad.clone()
    _cohort_adamw(ours, ADAMW_TRIALS).step()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_dispatch, "choose_path", _reference_only)
        _cohort_adamw(theirs, ADAMW_TRIALS).step()
    for p0, grad, p, q in zip(start, grads, ours, theirs, strict=True):
        for i, t in enumerate(ADAMW_TRIALS):
            scalars = reference.AdamWScalars.for_step(
                lr=t["lr"], beta1=t["betas"][0], beta2=t["betas"][1], eps=t["eps"],
                weight_decay=t["weight_decay"], step=1)
            zero = torch.zeros_like(p0[i])
            bound = _bounds.adamw_bound(p0[i], grad[i], zero, zero, None, scalars)["param"]
            within_bound(p[i], q[i], bound, kernel="AdamW cohort kernel (host build) vs "
                         "reference, one step")
    assert any(name.startswith("ht_adamw_cohort") for name, _ in kernel_path_on_cpu.launches)


def test_one_launch_for_the_whole_cohort(kernel_path_on_cpu) -> None:
    params = _start(torch.float32, 3)
    for p in params:
        p.grad = torch.ones_like(p)
    _cohort_adamw(params, ADAMW_TRIALS).step()
    size = sum(p.numel() for p in params)
    assert kernel_path_on_cpu.launches == [("ht_adamw_cohort_float32", size)]


def test_member_state_moves_a_trial_in_and_out() -> None:
    params = _start(torch.float32, 3)
    single = [p[1].clone() for p in params]
    opt = kernels.FusedAdamW(single, **ADAMW_TRIALS[1])
    for p in single:
        p.grad = torch.ones_like(p)
    opt.step()
    cohort = _cohort_adamw(params, ADAMW_TRIALS)
    for p, q in zip(params, single, strict=True):
        cohort.set_member_state(p, 1, opt.state[q])
        back = cohort.member_state(p, 1)
        assert sorted(back) == sorted(opt.state[q])
        for name, value in opt.state[q].items():
            assert torch.equal(back[name], torch.as_tensor(value))
        assert cohort.member_state(p, 0)["step"] == 0


def test_rejects_bad_per_trial_values() -> None:
    p = [torch.zeros(2, 3, requires_grad=True)]
    with pytest.raises(ValueError, match="one value per trial"):
        kernels.CohortAdamW(p, lr=[0.1, 0.1], betas=[(0.9, 0.99)], eps=[1e-8] * 2,
                            weight_decay=[0.0] * 2)
    with pytest.raises(ValueError, match="learning rate"):
        kernels.CohortSGD(p, lr=[0.1, -1.0], momentum=[0, 0], dampening=[0, 0],
                          weight_decay=[0, 0])
    opt = kernels.CohortSGD(p, lr=[0.1] * 3, momentum=[0] * 3, dampening=[0] * 3,
                            weight_decay=[0] * 3)
    p[0].grad = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="leading trial axis of 3"):
        opt.step()


@pytest.mark.parametrize("kind", ["adamw", "adamw-amsgrad", "sgd", "sgd-nesterov"])
def test_device_steps_of_a_cohort_are_bitwise_its_steps_from_python(kernel_path_on_cpu,
                                                                    kind) -> None:
    """A cohort's next steps from the device (``device_steps``: its per-trial tables of every
    step on the device, read at a counter each step advances) update weights and state as
    its steps from Python do, bit for bit; its step counts are counted on the host."""
    if kind.startswith("adamw"):
        def make(params):  # noqa: ANN001, ANN202
            return _cohort_adamw(params, ADAMW_TRIALS, amsgrad=kind.endswith("amsgrad"))
    else:
        trials = ([{**t, "momentum": 0.9, "dampening": 0.0} for t in SGD_TRIALS]
                  if kind.endswith("nesterov") else SGD_TRIALS)

        def make(params):  # noqa: ANN001, ANN202
            return _cohort_sgd(params, trials, nesterov=kind.endswith("nesterov"))
    start = _start(torch.float32, 3)
    a_params, b_params = [p.clone() for p in start], [p.clone() for p in start]
    a, b = make(a_params), make(b_params)
    g = torch.Generator().manual_seed(6)
    grads = [_random_grads(start, g) for _ in range(7)]
    for params, opt in ((a_params, a), (b_params, b)):  # a first step: states, buffers started
        for p, grad in zip(params, grads[0], strict=True):
            p.grad = grad.clone()
        opt.step()
    steps = a.device_steps(6)
    assert steps is not None
    kernel_path_on_cpu.launches.clear()

    def same() -> None:
        for x, y in zip(a_params, b_params, strict=True):
            assert torch.equal(x, y)
            for key in a.state[x]:
                assert torch.equal(a.state[x][key], b.state[y][key]), key

    device_steps_beside(steps, b, (a_params, b_params), grads[1:], same)
    launched = [k for k, _ in kernel_path_on_cpu.launches]
    name = "ht_adamw_cohort_float32" if kind.startswith("adamw") else "ht_sgd_cohort_float32"
    assert launched.count(name) == 12  # one launch each step of each: a's and b's


def test_a_cohort_takes_no_device_steps_before_its_first_step_or_off_the_kernel_path(
        kernel_path_on_cpu) -> None:
    params = _start(torch.float32, 3)
    cohort = _cohort_sgd(params, SGD_TRIALS)
    for p, grad in zip(params, _random_grads(params, torch.Generator().manual_seed(1)),
                       strict=True):
        p.grad = grad
    assert cohort.device_steps(3) is None  # momentum buffers not started yet
    cohort.step()
    assert cohort.device_steps(3) is not None
    params[0].grad = params[0].grad.transpose(1, 2).contiguous().transpose(1, 2)  # strided
    assert cohort.device_steps(3) is None
