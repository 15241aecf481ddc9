"""scaled_sigmoid: scale * sigmoid(x) and its gradient, one fused kernel each way."""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from hoptune.kernels import _dispatch, _launches, reference
from hoptune.kernels._source import KernelSpec
from hoptune.kernels._specs import SCALED_SIGMOID, SCALED_SIGMOID_GRAD

__all__ = ["ScaledSigmoid", "scaled_sigmoid"]


class ScaledSigmoid(torch.autograd.Function):
    """Autograd function of ``scaled_sigmoid``; ``scale`` is a constant (no gradient).

    Elementwise, so under ``torch.func.vmap`` (a fused cohort's models call it
    unchanged) it runs once on the whole batched tensor (``vmap`` below), with
    the same arithmetic element by element as unbatched.
    """

    @staticmethod
    def forward(x: torch.Tensor, scale: float) -> torch.Tensor:
        if _use_kernel(x, SCALED_SIGMOID):
            return _launches.scaled_sigmoid(x.contiguous(), scale)
        return reference.scaled_sigmoid(x, scale)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, float], output: torch.Tensor) -> None:
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.scale = scale

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, None], x: torch.Tensor, scale: float
             ) -> tuple[torch.Tensor, int | None]:
        return ScaledSigmoid.apply(x, scale), in_dims[0]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        if _use_kernel(x, SCALED_SIGMOID_GRAD) and grad_out.dtype == x.dtype:
            grad_x = _launches.scaled_sigmoid_grad(x.contiguous(), grad_out.contiguous(),
                                                   ctx.scale)
            return grad_x, None
        return reference.scaled_sigmoid_grad(x, grad_out, ctx.scale), None


def scaled_sigmoid(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``scale * sigmoid(x) = scale / (1 + exp(-x))``, elementwise, differentiable in x.

    Evaluated as ``(x >= 0 ? scale : scale * e) / (1 + e)`` with ``e = exp(-|x|)``,
    so it never overflows: large |x| gives exactly scale or 0, and NaN stays
    NaN. The gradient is ``grad * scale * e / (1 + e)^2``, recomputed from x
    with the same single exponential. The output lies in [0, scale] (a rating
    model maps logits to (0, max_rating) with it). One kernel launch each way
    on CUDA float32/float64 tensors, the torch reference otherwise.
    """
    return ScaledSigmoid.apply(x, float(scale))


def _use_kernel(x: torch.Tensor, spec: KernelSpec) -> bool:
    choice = _dispatch.kernel_path(spec, x.device, x.dtype)
    _dispatch.log_once("scaled_sigmoid", x.device, x.dtype, choice)
    return choice.path == _dispatch.KERNEL and x.numel() > 0
