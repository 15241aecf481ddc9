"""The self-test of one kernel on one device: small inputs through both paths, compared.

Every kernel runs once, through the same launch functions a hop uses
(``_launches``), on a few thousand elements in every dtype and every option
combination a hop can ask for (AdamW with and without amsgrad and weight
decay, at a first and a later step, its scalars from the host or from a
table on the device; SGD without momentum, with momentum, with
Nesterov, first and later steps; the scaled sigmoid forward and backward,
with large, infinite and NaN inputs; the clipping scale), and is compared
with its torch reference on the same device by ``agreement``, under the
kernel tests' error model. A compile error, a launch error or a disagreement
fails the test; none is raised.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from hoptune.kernels import _launches, reference
from hoptune.kernels._bounds import (
    adamw_bound,
    scale_bound,
    scaled_sigmoid_bound,
    scaled_sigmoid_grad_bound,
    sgd_bound,
)
from hoptune.kernels._error_model import compare_by_bound
from hoptune.kernels._launches import Launcher
from hoptune.kernels._multi_tensor import step_rows
from hoptune.kernels._source import KernelSpec
from hoptune.kernels.reference import AdamWScalars, SGDScalars

__all__ = ["SIZES", "Check", "SelfTestResult", "agreement", "run_self_test"]

#: The tensor sizes of a self-test: a few thousand elements, several tensors per launch.
SIZES = (1000, 2048, 7)
DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class SelfTestResult:
    """What one kernel's self-test on one device found.

    ``max_error`` is the largest difference from the reference, and
    ``max_ratio`` the largest difference over the error model's bound (the test
    passes when it is at most 1); both are None when the kernel did not run to
    the end.
    """

    kernel: str
    device: str
    passed: bool
    reason: str = ""
    max_error: float | None = None
    max_ratio: float | None = None
    seconds: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SelfTestResult:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Check:
    """One output tensor of one self-test launch, with what produced it.

    ``inputs`` are the reference's arguments by name (``param``, ``grad``,
    ``exp_avg``… for the optimizers, ``x``/``grad_out`` for the scaled sigmoid,
    ``values`` for the scale), before the update; ``options`` the scalars and
    flags of the launch. An error model that bounds each kernel from its
    operands needs no more than this.
    """

    kernel: str
    output: str
    got: torch.Tensor
    want: torch.Tensor
    inputs: dict[str, torch.Tensor | None]
    options: dict[str, Any] = field(default_factory=dict)


def _bound(check: Check) -> torch.Tensor:
    """The error model's bound on |kernel - reference| for check's output, element by element."""
    i, o = check.inputs, check.options
    if check.kernel in ("ht_adamw", "ht_adamw_rows"):
        return adamw_bound(i["param"], i["grad"], i["exp_avg"], i["exp_avg_sq"],
                           i["max_exp_avg_sq"], o["scalars"], maximize=o["maximize"]
                           )[check.output]
    if check.kernel == "ht_sgd":
        return sgd_bound(i["param"], i["grad"], i["momentum_buffer"], o["scalars"],
                         nesterov=o["nesterov"], first_step=o["first_step"],
                         maximize=o["maximize"])[check.output]
    if check.kernel in ("ht_adamw_cohort", "ht_sgd_cohort"):
        # trial by trial, the single-trial kernel's bound with that trial's scalars
        rows = []
        for r, scalars in enumerate(o["scalars"]):
            if check.output == "momentum_buffer" and scalars.momentum == 0:
                rows.append(torch.zeros((), dtype=torch.float64,
                                        device=check.want.device))  # left untouched
                continue
            trial = {k: None if v is None else v[r] for k, v in i.items()}
            options = {**o, "scalars": scalars}
            if "first_step" in o:
                options["first_step"] = o["first_step"][r]
            rows.append(_bound(Check(check.kernel.removesuffix("_cohort"), check.output,
                                     check.got[r], check.want[r], trial, options)))
        return torch.stack([torch.broadcast_to(b, check.want.shape[1:]) for b in rows])
    if check.kernel == "ht_scale":
        return scale_bound(i["values"], o["coef"])
    if check.kernel == "ht_scaled_sigmoid":
        return scaled_sigmoid_bound(i["x"], o["scale"])
    return scaled_sigmoid_grad_bound(i["x"], i["grad_out"], o["scale"])


def agreement(check: Check) -> tuple[float, float]:
    """(largest difference, largest difference over its bound) of the kernel's output.

    The bound is the error model's (``kernels._bounds``, the one the kernel tests
    use): a few ulps of the operands where the two sides may round apart, zero
    where both round every operation correctly. A non-finite reference value must
    be matched exactly (NaN by NaN); where it is not, both figures are infinite.
    """
    comparison = compare_by_bound(check.got, check.want, _bound(check))
    got, want = check.got.double(), check.want.double()
    same = (got == want) | (got.isnan() & want.isnan())
    difference = torch.where(same, 0.0, (got - want).abs().nan_to_num(nan=math.inf))
    largest = float(difference.max()) if difference.numel() else 0.0
    if comparison.ok:
        return largest, comparison.worst_ratio
    return largest, comparison.worst_ratio if comparison.worst_ratio > 1 else math.inf


def run_self_test(spec: KernelSpec, device: torch.device, launch: Launcher | None = None
                  ) -> SelfTestResult:
    """Run spec's self-test on device; ``launch`` defaults to the CuPy launch."""
    started = time.perf_counter()
    worst, worst_ratio = 0.0, 0.0
    try:
        for check in CASES[spec.name](device, launch):
            error, ratio = agreement(_on_host(check))
            worst, worst_ratio = max(worst, error), max(worst_ratio, ratio)
    except Exception as exc:  # noqa: BLE001 - a compile or launch error fails the test
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return SelfTestResult(spec.name, str(device), False,
                              f"{type(exc).__name__}: {first}".rstrip(": "),
                              seconds=time.perf_counter() - started)
    passed = worst_ratio <= 1.0
    reason = "" if passed else (f"differs from the torch reference by up to {worst:.3g} "
                                f"({worst_ratio:.3g} times the allowed difference)")
    return SelfTestResult(spec.name, str(device), passed, reason, worst, worst_ratio,
                          time.perf_counter() - started)


def _on_host(check: Check) -> Check:
    """check with its tensors copied to the CPU, where its bound is computed.

    A bound is about a hundred elementwise operations on a few thousand float64
    values: on a GPU each is a launch of its own (AdamW's 168 checks took 1.5 s on an
    H100), on the host a few microseconds.
    """
    def host(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().cpu()

    return Check(check.kernel, check.output, host(check.got), host(check.want),
                 {k: host(v) for k, v in check.inputs.items()}, check.options)


def _inputs(device: torch.device, dtype: torch.dtype, seed: int, *, positive: bool = False,
            scale: float = 1.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in SIZES:
        t = torch.randn(n, generator=g, dtype=torch.float64) * scale
        out.append((t.abs() if positive else t).to(device, dtype))
    return out


def _copy(t: torch.Tensor, aligned: bool) -> torch.Tensor:
    """A copy of t: its own allocation (16-byte aligned: the optimizers' kernels read it in
    vectors), or a view one element into a larger one (not: they read it element by
    element)."""
    if aligned:
        return t.clone()
    buffer = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    buffer[1:] = t
    return buffer[1:]


_ADAMW_ROLES = ("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")
_SGD_ROLES = ("param", "grad", "momentum_buffer")


def _checks(kernel: str, roles: tuple[str, ...], outputs: tuple[str, ...],
            state: list[list[torch.Tensor | None]], got: list[list[torch.Tensor | None]],
            want: list[list[torch.Tensor | None]], options: dict[str, Any]) -> Iterator[Check]:
    """One Check per output role of a multi-tensor launch, its tensors end to end.

    The error model is elementwise, so one bound over the launch's tensors joined
    along their last axis is each tensor's bound side by side: a third of the checks
    (and of the bound's operations) of one check per tensor, with the same verdict.
    """
    def joined(role: list[torch.Tensor | None]) -> torch.Tensor | None:
        return None if role[0] is None else torch.cat(role, dim=-1)

    inputs = {role: joined(state[r]) for r, role in enumerate(roles)}
    for output in outputs:
        r = roles.index(output)
        yield Check(kernel, output, joined(got[r]), joined(want[r]), inputs, options)


def _adamw(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    for dtype in DTYPES:
        for amsgrad in (False, True):
            for weight_decay in (0.0, 0.01):
                for step in (1, 10):
                    scalars = AdamWScalars.for_step(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                                                    weight_decay=weight_decay, step=step)
                    # the first step's tensors aligned (vectors), the tenth's not (elements)
                    yield from _adamw_checks(
                        "ht_adamw", functools.partial(_inputs, device, dtype), amsgrad,
                        lambda slots, a=amsgrad, s=scalars, d=dtype: _launches.adamw(
                            slots, device, d, s, amsgrad=a, maximize=False, launch=launch),
                        lambda *slot, s=scalars: reference.adamw_step_(*slot, s),
                        {"scalars": scalars, "maximize": False}, aligned=step == 1)


def _adamw_rows(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    """A table of a first and a tenth step's scalars on the device, the launch told to read
    the tenth's (row 1)."""
    steps = [AdamWScalars.for_step(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                                   weight_decay=0.01, step=step) for step in (1, 10)]
    for dtype in DTYPES:
        rows, row = step_rows([s.as_tuple() for s in steps], device, dtype)
        row.fill_(1)
        for amsgrad in (False, True):
            # without amsgrad aligned (vectors), with it not (elements)
            yield from _adamw_checks(
                "ht_adamw_rows", functools.partial(_inputs, device, dtype), amsgrad,
                lambda slots, a=amsgrad, d=dtype, r=rows, w=row: _launches.adamw_rows(
                    slots, device, d, r, w, amsgrad=a, maximize=False, launch=launch),
                lambda *slot: reference.adamw_step_(*slot, steps[1]),
                {"scalars": steps[1], "maximize": False}, aligned=not amsgrad)


def _adamw_checks(kernel: str, inputs: Callable[..., list[torch.Tensor]], amsgrad: bool,
                  launch_kernel: Callable[[list[Any]], None],
                  step_reference: Callable[..., None], options: dict[str, Any],
                  aligned: bool = True) -> Iterator[Check]:
    """One AdamW launch on fresh inputs and the reference's step on copies, compared; the
    launch's tensors ``aligned`` for the kernel's vectors, or not (``_copy``)."""
    state: list[list[torch.Tensor | None]] = [
        inputs(1), inputs(2), inputs(3, scale=0.1), inputs(4, positive=True, scale=0.01),
        inputs(5, positive=True, scale=0.02)]
    if not amsgrad:
        state[4] = [None] * len(SIZES)
    got = [[None if t is None else _copy(t, aligned) for t in role] for role in state]
    launch_kernel(list(zip(*got, strict=True)))
    want = [[None if t is None else t.clone() for t in role] for role in state]
    for slot in zip(*want, strict=True):
        step_reference(*slot)
    outputs = _ADAMW_ROLES[:1] + _ADAMW_ROLES[2:5 if amsgrad else 4]
    yield from _checks(kernel, _ADAMW_ROLES, outputs, state, got, want, options)


def _sgd(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    for dtype in DTYPES:
        for momentum, nesterov in ((0.0, False), (0.9, False), (0.9, True)):
            for first_step in (True, False) if momentum else (False,):
                for weight_decay in (0.0, 1e-4):
                    scalars = SGDScalars.for_group(lr=0.01, weight_decay=weight_decay,
                                                   momentum=momentum, dampening=0.0)
                    state: list[list[torch.Tensor | None]] = [
                        _inputs(device, dtype, 6), _inputs(device, dtype, 7),
                        _inputs(device, dtype, 8, scale=0.1)]
                    if not momentum:
                        state[2] = [None] * len(SIZES)
                    # without weight decay aligned (vectors), with it not (elements)
                    got = [[None if t is None else _copy(t, weight_decay == 0.0) for t in role]
                           for role in state]
                    _launches.sgd(list(zip(*got, strict=True)), device, dtype, scalars,
                                  nesterov=nesterov, first_step=first_step, maximize=False,
                                  launch=launch)
                    want = [[None if t is None else t.clone() for t in role] for role in state]
                    for p, g, buf in zip(*want, strict=True):
                        reference.sgd_step_(p, g, buf, scalars, nesterov=nesterov,
                                            first_step=first_step)
                    options = {"scalars": scalars, "nesterov": nesterov,
                               "first_step": first_step, "maximize": False}
                    outputs = ("param", "momentum_buffer") if momentum else ("param",)
                    yield from _checks("ht_sgd", _SGD_ROLES, outputs, state, got, want, options)


_SCALE_COEF = 0.37  # the check's options hold it as a host float, read on any device


def _scale(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    for dtype in DTYPES:
        values = _inputs(device, dtype, 9)
        coef = torch.tensor([_SCALE_COEF], dtype=torch.float64).to(device, dtype)
        got = [t.clone() for t in values]
        _launches.scale(got, device, dtype, coef, launch)
        want = [t.clone() for t in values]
        for t in want:
            reference.scale_(t, coef)
        for before, mine, theirs in zip(values, got, want, strict=True):
            yield Check("ht_scale", "values", mine, theirs, {"values": before},
                        {"coef": _SCALE_COEF})


_SPECIAL = (0.0, -0.0, 30.0, -30.0, 100.0, -100.0, 800.0, -800.0, float("inf"), float("-inf"),
            float("nan"))
_SIGMOID_SCALE = 4.0


def _sigmoid_inputs(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(10)
    x = torch.cat([torch.randn(sum(SIZES), generator=g, dtype=torch.float64) * 8,
                   torch.tensor(_SPECIAL, dtype=torch.float64)])
    return x.to(device, dtype)


def _scaled_sigmoid(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    for dtype in DTYPES:
        x = _sigmoid_inputs(device, dtype)
        yield Check("ht_scaled_sigmoid", "y", _launches.scaled_sigmoid(x, _SIGMOID_SCALE, launch),
                    reference.scaled_sigmoid(x, _SIGMOID_SCALE), {"x": x},
                    {"scale": _SIGMOID_SCALE})


def _scaled_sigmoid_grad(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    for dtype in DTYPES:
        x = _sigmoid_inputs(device, dtype)
        g = torch.Generator().manual_seed(11)
        grad_out = torch.randn(x.numel(), generator=g, dtype=torch.float64).to(device, dtype)
        got = _launches.scaled_sigmoid_grad(x, grad_out, _SIGMOID_SCALE, launch)
        want = reference.scaled_sigmoid_grad(x, grad_out, _SIGMOID_SCALE)
        yield Check("ht_scaled_sigmoid_grad", "grad_x", got, want,
                    {"x": x, "grad_out": grad_out}, {"scale": _SIGMOID_SCALE})


#: Three trials with their own hyperparameters and step counts (a trial that joined later).
_COHORT_ADAMW = ((1e-3, 0.9, 0.999, 1e-8, 0.0, 1), (3e-2, 0.8, 0.99, 1e-6, 0.1, 10),
                 (1e-1, 0.5, 0.9, 1e-8, 0.01, 4))
_COHORT_SGD = ((0.01, 0.0, 0.0, 0.0), (0.1, 1e-4, 0.9, 0.0), (0.03, 1e-2, 0.5, 0.0))


def _stacked(device: torch.device, dtype: torch.dtype, seed: int, **kwargs: Any
             ) -> list[torch.Tensor]:
    trials = [_inputs(device, dtype, seed + 100 * r, **kwargs) for r in range(3)]
    return [torch.stack(parts) for parts in zip(*trials, strict=True)]


def _adamw_cohort(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    scalars = [AdamWScalars.for_step(lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd,
                                     step=step) for lr, b1, b2, eps, wd, step in _COHORT_ADAMW]
    for dtype in DTYPES:
        for amsgrad in (False, True):
            yield from _adamw_checks(
                "ht_adamw_cohort", functools.partial(_stacked, device, dtype), amsgrad,
                lambda slots, a=amsgrad, d=dtype: _launches.adamw_cohort(
                    slots, device, d, scalars, amsgrad=a, maximize=False, launch=launch),
                lambda *slot: reference.adamw_cohort_step_(*slot, scalars),
                {"scalars": scalars, "maximize": False})


def _sgd_cohort(device: torch.device, launch: Launcher | None) -> Iterator[Check]:
    scalars = [SGDScalars.for_group(lr=lr, weight_decay=wd, momentum=m, dampening=d)
               for lr, wd, m, d in _COHORT_SGD]
    for dtype in DTYPES:
        for nesterov in (False, True):
            first_step = (False, not nesterov, nesterov)
            state: list[list[torch.Tensor | None]] = [
                _stacked(device, dtype, 6), _stacked(device, dtype, 7),
                _stacked(device, dtype, 8, scale=0.1)]
            got = [[t.clone() for t in role] for role in state]
            _launches.sgd_cohort(list(zip(*got, strict=True)), device, dtype, scalars,
                                 first_step, nesterov=nesterov, maximize=False, launch=launch)
            want = [[t.clone() for t in role] for role in state]
            for p, g, buf in zip(*want, strict=True):
                reference.sgd_cohort_step_(p, g, buf, scalars, first_step, nesterov=nesterov)
            options = {"scalars": scalars, "nesterov": nesterov, "first_step": first_step,
                       "maximize": False}
            yield from _checks("ht_sgd_cohort", _SGD_ROLES, ("param", "momentum_buffer"),
                               state, got, want, options)


CASES: dict[str, Callable[[torch.device, Launcher | None], Iterator[Check]]] = {
    "ht_adamw": _adamw,
    "ht_sgd": _sgd,
    "ht_scale": _scale,
    "ht_scaled_sigmoid": _scaled_sigmoid,
    "ht_scaled_sigmoid_grad": _scaled_sigmoid_grad,
    "ht_adamw_cohort": _adamw_cohort,
    "ht_sgd_cohort": _sgd_cohort,
    "ht_adamw_rows": _adamw_rows,
}
