"""The torch reference of every kernel.

Each function here is the formula of one ``.cuh`` file written as torch tensor
code, one elementary operation at a time in the same order, so it rounds as
the kernels do: every step is one IEEE operation, except that torch's CPU
``sqrt`` and ``exp`` are not always correctly rounded (within an ulp; the
sqrt differs from gcc's in about one element in seven on AVX-512), so the
kernels are compared with it under the error model (``kernels._error_model``)
rather than bit for bit. It is what the fused optimizers run wherever the CuPy
kernels cannot, and what the kernels are tested against. Operations that fuse
a multiply-add on some CPUs and not on others (``lerp``, ``addcmul``, ``add``
with ``alpha``) are avoided on purpose, so results do not depend on the CPU.

The per-step scalars (bias corrections and the like) are host arithmetic in
Python floats, shared by both paths through ``AdamWScalars`` and ``SGDScalars``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "AdamWScalars",
    "SGDScalars",
    "adamw_cohort_step_",
    "adamw_step_",
    "per_trial",
    "scale_",
    "scaled_sigmoid",
    "scaled_sigmoid_grad",
    "sgd_cohort_step_",
    "sgd_step_",
]


@dataclass(frozen=True)
class AdamWScalars:
    """The scalars of one AdamW step, in the order the kernel takes them."""

    decay: float
    one_minus_beta1: float
    beta2: float
    one_minus_beta2: float
    neg_step_size: float
    bias_correction2_sqrt: float
    eps: float

    @classmethod
    def for_step(
        cls,
        *,
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: float,
    ) -> AdamWScalars:
        """The scalars of step number ``step`` (1 for the first step)."""
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        return cls(
            decay=1 - lr * weight_decay,
            one_minus_beta1=1 - beta1,
            beta2=beta2,
            one_minus_beta2=1 - beta2,
            neg_step_size=-(lr / bias_correction1),
            bias_correction2_sqrt=bias_correction2**0.5,
            eps=eps,
        )

    def as_tuple(self) -> tuple[float, ...]:
        return dataclasses.astuple(self)


@dataclass(frozen=True)
class SGDScalars:
    """The scalars of one SGD step, in the order the kernel takes them."""

    neg_lr: float
    weight_decay: float
    momentum: float
    one_minus_dampening: float

    @classmethod
    def for_group(
        cls, *, lr: float, weight_decay: float, momentum: float, dampening: float
    ) -> SGDScalars:
        return cls(
            neg_lr=-lr,
            weight_decay=weight_decay,
            momentum=momentum,
            one_minus_dampening=1 - dampening,
        )

    def as_tuple(self) -> tuple[float, ...]:
        return dataclasses.astuple(self)


def adamw_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    max_exp_avg_sq: torch.Tensor | None,
    scalars: AdamWScalars,
    *,
    maximize: bool = False,
) -> None:
    """One AdamW step in place (adamw.cuh); amsgrad when max_exp_avg_sq is given."""
    s = scalars
    g = torch.neg(grad) if maximize else grad
    exp_avg.add_(torch.sub(g, exp_avg).mul_(s.one_minus_beta1))
    exp_avg_sq.mul_(s.beta2).add_(torch.mul(g, s.one_minus_beta2).mul_(g))
    v = exp_avg_sq
    if max_exp_avg_sq is not None:
        torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        v = max_exp_avg_sq
    denom = torch.sqrt(v).div_(s.bias_correction2_sqrt).add_(s.eps)
    if s.decay != 1:
        param.mul_(s.decay)
    param.add_(torch.mul(exp_avg, s.neg_step_size).div_(denom))


def sgd_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    momentum_buffer: torch.Tensor | None,
    scalars: SGDScalars,
    *,
    nesterov: bool,
    first_step: bool,
    maximize: bool = False,
) -> None:
    """One SGD step in place (sgd.cuh); momentum_buffer is needed iff momentum != 0."""
    s = scalars
    g = torch.neg(grad) if maximize else grad
    if s.weight_decay != 0:
        g = torch.add(g, torch.mul(param, s.weight_decay))
    if s.momentum != 0:
        if momentum_buffer is None:
            raise ValueError("sgd_step_: momentum is nonzero but momentum_buffer is None")
        if first_step:
            momentum_buffer.copy_(g)
        else:
            momentum_buffer.mul_(s.momentum).add_(torch.mul(g, s.one_minus_dampening))
        g = torch.add(g, torch.mul(momentum_buffer, s.momentum)) if nesterov else momentum_buffer
    param.add_(torch.mul(g, s.neg_lr))


def scaled_sigmoid(x: torch.Tensor, scale: float) -> torch.Tensor:
    """scale * sigmoid(x), evaluated through exp(-|x|) (scaled_sigmoid.cuh)."""
    e = torch.exp(torch.abs(x).neg_())
    numerator = torch.where(x >= 0, torch.full_like(e, scale), torch.mul(e, scale))
    return numerator.div_(e.add_(1))


def scaled_sigmoid_grad(x: torch.Tensor, grad_out: torch.Tensor, scale: float) -> torch.Tensor:
    """grad_out * d(scale * sigmoid(x))/dx = grad_out * scale * e / (1 + e)^2, e = exp(-|x|)."""
    e = torch.exp(torch.abs(x).neg_())
    numerator = torch.mul(grad_out, scale).mul_(e)
    one_plus_e = e.add_(1)
    return numerator.div_(torch.mul(one_plus_e, one_plus_e))


def scale_(tensor: torch.Tensor, coef: torch.Tensor) -> None:
    """tensor *= coef in place (scale.cuh); coef is a one-element tensor."""
    tensor.mul_(coef)


def per_trial(values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """values (one per trial) as a tensor of like's dtype and device that broadcasts over
    like's leading trial axis: shape (N, 1, ..., 1).

    Each value rounds to the dtype once, as a Python float scalar does in a torch
    operation and as the kernels' scalar table does, so an operation with it
    rounds as the single-trial step's operation with that trial's scalar.
    """
    return _column(tuple(values), like.device, like.dtype).view(_trial_shape(like))


def _trial_shape(like: torch.Tensor) -> tuple[int, ...]:
    return (like.shape[0],) + (1,) * (like.dim() - 1)


@functools.lru_cache(maxsize=256)
def _column(values: tuple[float, ...], device: torch.device, dtype: torch.dtype
            ) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).to(device, dtype)


@functools.lru_cache(maxsize=64)
def _columns(scalars: tuple[AdamWScalars | SGDScalars, ...], device: torch.device,
             dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every field of the trials' scalars as one (N,) tensor each (``per_trial``'s rounding);
    a step asks for the same ones for every parameter, so they are made once."""
    names = [f.name for f in dataclasses.fields(scalars[0])]
    rows = [[getattr(x, name) for x in scalars] for name in names]
    table = torch.tensor(rows, dtype=torch.float64).to(device, dtype)
    return dict(zip(names, table, strict=True))


def _per_trial_fields(scalars: Sequence[AdamWScalars | SGDScalars], like: torch.Tensor
                      ) -> dict[str, torch.Tensor]:
    shape = _trial_shape(like)
    return {k: v.view(shape) for k, v in _columns(tuple(scalars), like.device,
                                                  like.dtype).items()}


def adamw_cohort_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    max_exp_avg_sq: torch.Tensor | None,
    scalars: Sequence[AdamWScalars],
    *,
    maximize: bool = False,
) -> None:
    """``adamw_step_`` for a cohort: axis 0 of every tensor is the trial, and trial i steps
    with ``scalars[i]`` (its own lr, betas, eps, weight decay and step count).

    The same operations in the same order, each trial's scalar broadcast over its
    slice, so trial i's slice equals ``adamw_step_`` on it alone, bit for bit (the
    decay is applied even where it is 1: a product with 1 is exact).
    """
    s = _per_trial_fields(scalars, param).__getitem__
    g = torch.neg(grad) if maximize else grad
    exp_avg.add_(torch.sub(g, exp_avg).mul_(s("one_minus_beta1")))
    exp_avg_sq.mul_(s("beta2")).add_(torch.mul(g, s("one_minus_beta2")).mul_(g))
    v = exp_avg_sq
    if max_exp_avg_sq is not None:
        torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        v = max_exp_avg_sq
    denom = torch.sqrt(v).div_(s("bias_correction2_sqrt")).add_(s("eps"))
    param.mul_(s("decay"))
    param.add_(torch.mul(exp_avg, s("neg_step_size")).div_(denom))


def sgd_cohort_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    momentum_buffer: torch.Tensor | None,
    scalars: Sequence[SGDScalars],
    first_step: Sequence[bool],
    *,
    nesterov: bool,
    maximize: bool = False,
) -> None:
    """``sgd_step_`` for a cohort: axis 0 is the trial; trial i steps with ``scalars[i]``,
    starting its momentum buffer from the gradient where ``first_step[i]``.

    Where a trial's weight decay is 0 its gradient is left as it is, and where its
    momentum is 0 its buffer is neither read nor written, as in ``sgd_step_`` (and
    sgd.cuh, which branches per element): so trial i's slice equals ``sgd_step_``
    on it alone, bit for bit. momentum_buffer is needed iff some momentum is nonzero.
    """
    s = _per_trial_fields(scalars, param).__getitem__
    g = torch.neg(grad) if maximize else grad
    weight_decay = s("weight_decay")
    g = torch.where(weight_decay != 0, torch.add(g, torch.mul(param, weight_decay)), g)
    momentum = s("momentum")
    if any(x.momentum != 0 for x in scalars):
        if momentum_buffer is None:
            raise ValueError("sgd_cohort_step_: a momentum is nonzero but momentum_buffer is None")
        first = per_trial([float(f) for f in first_step], param) != 0
        running = torch.mul(momentum_buffer, momentum).add_(torch.mul(g, s("one_minus_dampening")))
        on = momentum != 0
        momentum_buffer.copy_(torch.where(on, torch.where(first, g, running), momentum_buffer))
        moved = torch.add(g, torch.mul(momentum_buffer, momentum)) if nesterov else momentum_buffer
        g = torch.where(on, moved, g)
    param.add_(torch.mul(g, s("neg_lr")))
