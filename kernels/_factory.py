"""make_optimizer: build an optimizer by the name a region's configuration gives."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch

from hoptune.kernels import _dispatch
from hoptune.kernels._adamw import FusedAdamW
from hoptune.kernels._sgd import FusedSGD
from hoptune.kernels._specs import ADAMW, SGD
from hoptune.kernels._torch_optim import TorchFusedAdamW, TorchFusedSGD

__all__ = ["OPTIMIZERS", "make_optimizer", "optimizer_class"]

#: Optimizer names and classes; "adamw" and "sgd" are the plain torch.optim ones.
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "fused_adamw": FusedAdamW,
    "fused_sgd": FusedSGD,
    "sgd": torch.optim.SGD,
}

# Our fused optimizers, their kernel, and torch's fused stand-in where that kernel cannot run.
_STAND_INS: dict[type[torch.optim.Optimizer], tuple[Any, type[torch.optim.Optimizer]]] = {
    FusedAdamW: (ADAMW, TorchFusedAdamW),
    FusedSGD: (SGD, TorchFusedSGD),
}


def optimizer_class(name: str, device: torch.device, dtype: torch.dtype
                    ) -> type[torch.optim.Optimizer]:
    """The class ``make_optimizer(name, …)`` builds for parameters on device of dtype.

    Our fused optimizers on a CUDA device where their CuPy kernel is not trusted
    (see ``kernel_path``) become torch's fused ones (``torch.optim.AdamW(fused=True)``,
    ``torch.optim.SGD(fused=True)``), said once on the "kernels" logger.
    Elsewhere (a CPU) ours run their torch reference, as before.
    """
    cls = _lookup(name)
    if cls not in _STAND_INS or device.type != "cuda":
        return cls
    spec, stand_in = _STAND_INS[cls]
    choice = _dispatch.kernel_path(spec, device, dtype)
    if choice.path == _dispatch.KERNEL:
        return cls
    _dispatch.log_once(cls.__name__, device, dtype,
                       _dispatch.PathChoice(_dispatch.TORCH, choice.reason))
    return stand_in


def _lookup(name: str) -> type[torch.optim.Optimizer]:
    try:
        return OPTIMIZERS[name]
    except KeyError:
        known = ", ".join(repr(n) for n in OPTIMIZERS)
        raise ValueError(f"unknown optimizer {name!r}: expected one of {known}") from None


def _first_tensor(params: list[Any]) -> torch.Tensor | None:
    for entry in params:
        if isinstance(entry, torch.Tensor):
            return entry
        if isinstance(entry, dict):
            group = entry.get("params")
            group = [group] if isinstance(group, torch.Tensor) else list(group or [])
            if group:
                return group[0]
    return None


def make_optimizer(
    name: str, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], **hyper: Any
) -> torch.optim.Optimizer:
    """The optimizer called name over params, with hyperparameters hyper.

    Raises ValueError naming the choices for an unknown name, and naming the
    accepted hyperparameters for one the optimizer does not take. On a CUDA
    device, see ``optimizer_class``.
    """
    cls = _lookup(name)
    signature = inspect.signature(cls.__init__)
    accepted = [p for p in signature.parameters if p not in ("self", "params")]
    unknown = sorted(set(hyper) - set(accepted))
    if unknown:
        raise ValueError(
            f"optimizer {name!r} takes no hyperparameter {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(accepted)}"
        )
    params = list(params)
    first = _first_tensor(params)
    if first is not None:
        cls = optimizer_class(name, first.device, first.dtype)
    return cls(params, **hyper)
