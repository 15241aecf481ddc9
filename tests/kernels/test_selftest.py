"""Kernels that check themselves: the self-test, the fallback it decides, its cache, the setting.

No GPU is needed: the real self-test runs on the CPU through the host build of
the kernels (the code a GPU would run), and the decision is fed fake results,
launches that raise and compile errors through an injected runner.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hoptune import kernels
from hoptune.core import ConfigError
from hoptune.kernels import _cupy, _dispatch, _selftest, _specs, _trust
from hoptune.kernels._selftest import SelfTestResult, run_self_test

CUDA = torch.device("cuda", 0)
IDENTITY = {"device_name": "Test GPU 80GB", "cupy": "13.9.0", "cuda": "12.8",
            "torch_cuda": "12.8"}


@pytest.fixture(autouse=True)
def fresh_trust(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("HOPTUNE_KERNELS", raising=False)
    kernels.reset()
    yield
    kernels.reset()


@pytest.fixture
def cupy_sees_a_gpu(monkeypatch: pytest.MonkeyPatch, fresh_log: None) -> None:
    """CuPy is installed and sees a device: what is left to decide is the self-test's."""
    monkeypatch.setattr(_cupy, "unavailable_reason", lambda: None)


class Runner:
    """A self-test runner that returns a fixed result and counts its runs."""

    def __init__(self, passed: bool, reason: str = "", error: float | None = 0.0) -> None:
        self.passed, self.reason, self.error = passed, reason, error
        self.runs: list[str] = []

    def __call__(self, spec, device: torch.device) -> SelfTestResult:  # noqa: ANN001
        self.runs.append(spec.name)
        return SelfTestResult(spec.name, str(device), self.passed, self.reason, self.error,
                              None if self.error is None else self.error * 1e6, 0.01)


def configure(runner: Runner, **kwargs) -> None:  # noqa: ANN003
    kernels.configure(runner=runner, identify=lambda device: dict(IDENTITY), **kwargs)


# --- the self-test itself, through the host build of the kernels -------------------------


@pytest.mark.parametrize("spec", _specs.ALL, ids=lambda s: s.name)
def test_every_kernel_passes_its_self_test_on_its_host_build(spec, host_kernels) -> None:
    result = run_self_test(spec, torch.device("cpu"), launch=host_kernels.launch)
    assert result.passed, result.reason
    assert result.max_ratio is not None and result.max_ratio <= 1.0
    assert result.seconds > 0  # "under a second" is for a GPU (tests/kernels/test_gpu.py)


def test_a_kernel_that_disagrees_fails_its_self_test(host_kernels) -> None:
    def off_by_a_little(spec, dtype, device, args, size) -> None:  # noqa: ANN001
        host_kernels.launch(spec, dtype, device, args, size)
        args["y"].mul_(1 + 1e-3)  # a wrong constant somewhere in the kernel

    result = run_self_test(_specs.SCALED_SIGMOID, torch.device("cpu"), launch=off_by_a_little)
    assert not result.passed
    assert result.max_ratio > 1.0
    assert result.reason.startswith("differs from the torch reference by up to ")


def test_a_compile_or_launch_error_fails_the_self_test() -> None:
    class CompileException(Exception):
        pass

    def broken(spec, dtype, device, args, size) -> None:  # noqa: ANN001
        raise CompileException("error: identifier \"ht_adamw_step\" is undefined\nmore lines")

    result = run_self_test(_specs.ADAMW, torch.device("cpu"), launch=broken)
    assert not result.passed and result.max_error is None
    assert result.reason == 'CompileException: error: identifier "ht_adamw_step" is undefined'


def test_the_self_test_covers_every_option_a_hop_uses(host_kernels) -> None:
    launches: list[dict] = []

    def recording(spec, dtype, device, args, size) -> None:  # noqa: ANN001
        launches.append({"kernel": spec.name, "dtype": dtype, **{
            k: v for k, v in args.items() if isinstance(v, int | float)},
            "tensors": len(args["sizes"]) if "sizes" in args else None})
        host_kernels.launch(spec, dtype, device, args, size)

    for spec in _specs.ALL:
        assert run_self_test(spec, torch.device("cpu"), launch=recording).passed
    adamw = {(a["dtype"], a["amsgrad"], a["decay"] != 1) for a in launches
             if a["kernel"] == "ht_adamw"}
    assert adamw == {(d, a, w) for d in ("float32", "float64") for a in (0, 1)
                     for w in (False, True)}
    sgd = {(a["momentum"] != 0, a["nesterov"], a["first_step"]) for a in launches
           if a["kernel"] == "ht_sgd"}
    assert sgd >= {(False, 0, 0), (True, 0, 1), (True, 0, 0), (True, 1, 1), (True, 1, 0)}
    assert {a["kernel"] for a in launches} == {s.name for s in _specs.ALL}
    # the optimizers' kernels checked reading vectors (aligned tensors) and elements (not)
    for kernel in ("ht_adamw", "ht_sgd"):
        assert {(a["dtype"], a["vector"]) for a in launches if a["kernel"] == kernel} == {
            ("float32", 4), ("float32", 1), ("float64", 2), ("float64", 1)}
    assert all(a["tensors"] == len(_selftest.SIZES) for a in launches if a["tensors"])


def test_a_tensor_that_requires_grad_is_detached_before_its_dlpack_export() -> None:
    x = torch.ones(4, requires_grad=True)
    with pytest.raises(BufferError, match="require gradient"):
        x.__dlpack__()  # what torch does without the detach

    class FakeCupy:
        @staticmethod
        def from_dlpack(tensor: torch.Tensor) -> object:
            return tensor.__dlpack__()

    args = {"x": x, "scale": 2.0, "y": torch.empty(4)}
    values = _cupy.kernel_arguments(FakeCupy, _specs.SCALED_SIGMOID, "float32", args)
    assert len(values) == 3 and float(values[1]) == 2.0


# --- the decision: trusted, or the torch path with one warning ---------------------------


def test_a_failed_self_test_sends_the_kernel_to_the_torch_path_once(cupy_sees_a_gpu,
                                                                    caplog) -> None:
    caplog.set_level(logging.INFO, logger="kernels")
    runner = Runner(False, "differs from the torch reference by up to 0.0123 (41 times the "
                           "allowed difference)", 0.0123)
    configure(runner)
    for _ in range(3):
        choice = _dispatch.kernel_path(_specs.ADAMW, CUDA, torch.float32)
        assert choice.path == "reference"
        assert kernels.optimizer_class("fused_adamw", CUDA, torch.float32) is \
            kernels.TorchFusedAdamW
    assert runner.runs == ["ht_adamw"]  # run once per process and device
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    for part in ("ht_adamw", "cuda:0", "Test GPU 80GB", "CuPy 13.9.0", "CUDA 12.8", "0.0123",
                 "torch path"):
        assert part in message, (part, message)
    report = kernels.kernel_report()
    assert report["fallbacks"] == [{"kernel": "ht_adamw", "device": "cuda:0",
                                    "reason": f"self-test failed: {runner.reason}"}]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("FusedAdamW on cuda:0 float32 runs torch.optim's fused implementation" in m
               for m in infos)
    # a kernel that passed stays on the CuPy path: decisions are per kernel
    configure(Runner(True, error=1e-7))
    assert _dispatch.kernel_path(_specs.SGD, CUDA, torch.float32).path == "kernel"
    assert kernels.optimizer_class("fused_sgd", CUDA, torch.float32) is kernels.FusedSGD


@pytest.mark.parametrize("failure", [
    "CompileException: error: identifier \"ht_adamw_step\" is undefined",
    "CUDADriverError: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure",
])
def test_a_kernel_that_cannot_compile_or_launch_falls_back(cupy_sees_a_gpu, failure) -> None:
    configure(Runner(False, failure, None))
    choice = _dispatch.kernel_path(_specs.SCALED_SIGMOID, CUDA, torch.float32)
    assert choice == _dispatch.PathChoice("reference", f"self-test failed: {failure}")


def test_a_passed_self_test_lets_the_kernel_run(cupy_sees_a_gpu) -> None:
    configure(Runner(True, error=3e-8))
    choice = _dispatch.kernel_path(_specs.ADAMW, CUDA, torch.float32)
    assert choice.path == "kernel"
    assert "self-test passed (largest error 3e-08)" in choice.reason
    assert kernels.optimizer_class("fused_adamw", CUDA, torch.float32) is kernels.FusedAdamW
    assert kernels.optimizer_class("fused_adamw", torch.device("cpu"), torch.float32) is \
        kernels.FusedAdamW  # the CPU runs the reference, never a self-test


# --- the setting -------------------------------------------------------------------------


def test_kernels_cupy_turns_a_failed_self_test_into_an_error(cupy_sees_a_gpu) -> None:
    configure(Runner(False, "differs from the torch reference by up to 1", 1.0), mode="cupy")
    with pytest.raises(kernels.KernelSelfTestError) as caught:
        kernels.optimizer_class("fused_adamw", CUDA, torch.float32)
    assert "ht_adamw on cuda:0 (Test GPU 80GB, CuPy 13.9.0, CUDA 12.8) failed its self-test" \
        in str(caught.value)
    assert str(caught.value).endswith("kernels = cupy makes this an error")


def test_kernels_cupy_refuses_a_gpu_where_cupy_cannot_run(monkeypatch) -> None:
    monkeypatch.setattr(_cupy, "unavailable_reason", lambda: "CuPy is not installed (test)")
    kernels.configure(mode="cupy")
    with pytest.raises(kernels.KernelSelfTestError, match="cannot run on cuda:0: CuPy is not"):
        _dispatch.kernel_path(_specs.SGD, CUDA, torch.float32)
    kernels.configure(mode="auto")
    assert _dispatch.kernel_path(_specs.SGD, CUDA, torch.float32).path == "reference"


def test_kernels_torch_never_runs_the_cupy_kernels(cupy_sees_a_gpu, monkeypatch) -> None:
    runner = Runner(True)
    monkeypatch.setenv("HOPTUNE_KERNELS", "torch")
    configure(runner)
    choice = _dispatch.kernel_path(_specs.ADAMW, CUDA, torch.float32)
    assert choice.path == "reference" and "kernels = torch" in choice.reason
    assert kernels.optimizer_class("fused_sgd", CUDA, torch.float32) is kernels.TorchFusedSGD
    assert runner.runs == []


def test_a_bad_kernels_setting_names_where_it_came_from(monkeypatch) -> None:
    monkeypatch.setenv("HOPTUNE_KERNELS", "fast")
    with pytest.raises(ConfigError,
                       match="HOPTUNE_KERNELS: expected one of auto, cupy, torch, got 'fast'"):
        kernels.mode()
    with pytest.raises(ConfigError, match="--kernels: expected one of auto, cupy, torch"):
        kernels.configure(mode="fast")


# --- the cache ----------------------------------------------------------------------------


def test_results_are_cached_per_source_device_name_and_cupy_version(tmp_path: Path) -> None:
    runner = Runner(True, error=1e-7)
    configure(runner, cache_dir=tmp_path)
    first = kernels.self_test(_specs.ADAMW, CUDA)
    assert runner.runs == ["ht_adamw"] and first.passed
    (cached,) = (tmp_path / "kernels").glob("selftest-ht_adamw-*.json")
    assert json.loads(cached.read_text())["versions"] == IDENTITY

    configure(runner, cache_dir=tmp_path)  # a restarted worker
    again = kernels.self_test(_specs.ADAMW, torch.device("cuda", 1))  # a GPU of the same model
    assert runner.runs == ["ht_adamw"]  # not run again
    assert again.passed and again.device == "cuda:1"

    kernels.configure(runner=runner, cache_dir=tmp_path,
                      identify=lambda d: {**IDENTITY, "cupy": "14.0.0"})
    kernels.self_test(_specs.ADAMW, CUDA)  # another CuPy: run again
    assert runner.runs == ["ht_adamw", "ht_adamw"]

    cached.write_text("{not json")
    configure(runner, cache_dir=tmp_path)
    kernels.self_test(_specs.ADAMW, CUDA)  # a damaged entry: run again
    assert runner.runs == ["ht_adamw"] * 3
    kernels.self_test(_specs.ADAMW, CUDA, fresh=True)  # hoptune doctor runs it afresh
    assert runner.runs == ["ht_adamw"] * 4


def test_the_cache_key_follows_the_kernel_source(tmp_path: Path, monkeypatch) -> None:
    configure(Runner(True), cache_dir=tmp_path)
    before = _trust._cache_path(_specs.ADAMW, IDENTITY)
    monkeypatch.setattr(_cupy, "NVRTC_OPTIONS", ("--fmad=true",))
    assert _trust._cache_path(_specs.ADAMW, IDENTITY) != before
    assert _trust._cache_path(_specs.SGD, IDENTITY) != before


# --- torch's fused optimizers stand in, and share the state format -----------------------


@pytest.mark.parametrize(("ours", "theirs", "hyper"), [
    (kernels.FusedAdamW, kernels.TorchFusedAdamW, {"lr": 0.01, "weight_decay": 0.1,
                                                   "amsgrad": True}),
    (kernels.FusedSGD, kernels.TorchFusedSGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True,
                                               "weight_decay": 1e-3}),
])
def test_a_checkpoint_moves_between_our_optimizer_and_torchs_stand_in(
        ours, theirs, hyper, training, snapshot) -> None:
    def run(first, second) -> list[torch.Tensor]:  # noqa: ANN001
        model = training.model(torch.float64)
        optimizer = first(model.parameters(), **hyper)
        training.steps(model, optimizer, 5)
        state = optimizer.state_dict()
        optimizer = second(model.parameters(), **hyper)
        optimizer.load_state_dict(state)
        for group in optimizer.param_groups:
            if second is theirs:
                assert group["fused"] is True
                assert group.get("decoupled_weight_decay", True) is True
        training.steps(model, optimizer, 5)
        return snapshot(model, optimizer)

    straight = run(ours, ours)
    for first, second in ((ours, theirs), (theirs, ours)):
        moved = run(first, second)
        assert len(moved) == len(straight)
        for a, b in zip(moved, straight, strict=True):
            torch.testing.assert_close(a.double(), b.double(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("spec", _specs.ALL, ids=lambda s: s.name)
def test_timing_a_kernel_against_the_torch_path(spec, host_kernels) -> None:
    ours, theirs = kernels.time_against_torch(spec, torch.device("cpu"), size=4096, repeats=2,
                                              launch=host_kernels.launch)
    assert ours > 0 and theirs > 0


@pytest.mark.parametrize("spec", _specs.ALL, ids=lambda s: s.name)
def test_a_self_tests_bounds_are_computed_on_the_device_of_what_it_checks(spec) -> None:
    """On the meta device a tensor made elsewhere along the way is an error, as on a GPU.

    The cohort SGD's bound once made the rows of its untouched momentum buffers on the
    CPU: on an H100 its self-test failed with a device mismatch and every cohort SGD step
    fell back to torch, while the CPU tests passed.
    """
    meta = torch.device("meta")

    def leave_as_is(spec, dtype, device, args, size) -> None:  # noqa: ANN001 - a launcher
        assert device == meta

    checks = list(_selftest.CASES[spec.name](meta, leave_as_is))
    assert checks
    for check in checks:
        assert _selftest._bound(check).device == meta, (check.kernel, check.output)


def test_a_kernel_may_flush_a_subnormal_exponential_to_zero(host_kernels) -> None:
    """CUDA's float32 exp may flush a subnormal result to zero (on an H100 the scaled
    sigmoid kernel at x = -100 differed from torch by 4 exp(-100) = 1.5e-43): within the
    bound. Flushing results of normal size (down to 1e-30) is not."""
    def flushing(spec, dtype, device, args, size) -> None:  # noqa: ANN001
        host_kernels.launch(spec, dtype, device, args, size)
        out = args["y"] if "y" in args else args["grad_x"]
        if out.dtype == torch.float32:
            out[out.abs() < torch.finfo(torch.float32).smallest_normal] = 0.0

    for spec in (_specs.SCALED_SIGMOID, _specs.SCALED_SIGMOID_GRAD):
        assert run_self_test(spec, torch.device("cpu"), launch=flushing).passed

    def flushing_too_much(spec, dtype, device, args, size) -> None:  # noqa: ANN001
        host_kernels.launch(spec, dtype, device, args, size)
        y = args["y"]
        y[y.abs() < 1e-30] = 0.0  # normal float32 results (down to 1.2e-38) lost

    result = run_self_test(_specs.SCALED_SIGMOID, torch.device("cpu"), launch=flushing_too_much)
    assert not result.passed


def test_a_launchs_tensors_are_checked_end_to_end_and_none_is_left_out() -> None:
    """The self-test compares a launch's tensors joined into one check per output: a
    difference in its smallest tensor alone still fails it, and the tensors agree
    element by element where nothing differs."""
    from hoptune.kernels.reference import SGDScalars

    scalars = SGDScalars.for_group(lr=0.01, weight_decay=0.0, momentum=0.0, dampening=0.0)
    state = [_selftest._inputs(torch.device("cpu"), torch.float32, 6),
             _selftest._inputs(torch.device("cpu"), torch.float32, 7), [None] * 3]
    want = [[None if t is None else t.clone() for t in role] for role in state]
    for p, g, _ in zip(*want, strict=True):
        kernels.reference.sgd_step_(p, g, None, scalars, nesterov=False, first_step=False)
    options = {"scalars": scalars, "nesterov": False, "first_step": False, "maximize": False}
    got = [[None if t is None else t.clone() for t in role] for role in want]
    checks = list(_selftest._checks("ht_sgd", _selftest._SGD_ROLES, ("param",), state, got,
                                    want, options))
    assert [c.got.numel() for c in checks] == [sum(_selftest.SIZES)]
    assert _selftest.agreement(checks[0]) == (0.0, 0.0)
    got[0][2][-1] += 1e-3  # the last element of the last tensor (7 elements)
    checks = list(_selftest._checks("ht_sgd", _selftest._SGD_ROLES, ("param",), state, got,
                                    want, options))
    assert _selftest.agreement(checks[0])[1] > 1
