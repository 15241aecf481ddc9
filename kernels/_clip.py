"""clip_grad_norm_ with the scale step as one fused kernel per device and dtype."""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterable

import torch

from hoptune.kernels import _dispatch, _launches, reference
from hoptune.kernels._specs import SCALE

__all__ = ["clip_grad_norm_"]


@torch.no_grad()
def clip_grad_norm_(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> torch.Tensor:
    """Clip the gradients of parameters to a total norm of max_norm; return the total norm.

    Same semantics as ``torch.nn.utils.clip_grad_norm_``: the total norm is the
    norm_type-norm of the per-gradient norms (the norm of all gradients as one
    vector, computed as torch computes it); every gradient is multiplied, in place, by
    ``min(max_norm / (total_norm + 1e-6), 1)``, computed on the device without
    a host synchronization. The multiplication is one kernel launch per
    (device, dtype) on CUDA, the torch reference elsewhere.
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and not parameters:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=3,
            )
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm_type = float(norm_type)
    groups: dict[tuple[torch.device, torch.dtype], list[_dispatch.Slot]] = {}
    for g in grads:
        groups.setdefault((g.device, g.dtype), []).append((g,))
    norms: list[torch.Tensor] = []
    for slots in groups.values():
        norms.extend(torch._foreach_norm([g for (g,) in slots], norm_type))
    first_device = grads[0].device
    total_norm = torch.linalg.vector_norm(
        torch.stack([n.to(first_device) for n in norms]), norm_type
    )
    if error_if_nonfinite and torch.logical_or(total_norm.isnan(), total_norm.isinf()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    for (device, dtype), slots in groups.items():
        coef = clip_coef_clamped.to(device)
        kernel, fallback = _dispatch.split_by_path("clip_grad_norm_", device, dtype, slots, SCALE)
        if kernel:
            _launches.scale([g for (g,) in kernel], device, dtype, coef)
        for (g,) in fallback:
            reference.scale_(g, coef)
    return total_norm
