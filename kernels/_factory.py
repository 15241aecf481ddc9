"""make_optimizer: build an optimizer by the name a region's configuration gives."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch

from kernels._adamw import FusedAdamW
from kernels._sgd import FusedSGD

__all__ = ["OPTIMIZERS", "make_optimizer"]

#: Optimizer names and classes; "adamw" and "sgd" are the plain torch.optim ones.
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "fused_adamw": FusedAdamW,
    "fused_sgd": FusedSGD,
    "sgd": torch.optim.SGD,
}


def make_optimizer(
    name: str, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], **hyper: Any
) -> torch.optim.Optimizer:
    """The optimizer called name over params, with hyperparameters hyper.

    Raises ValueError naming the choices for an unknown name, and naming the
    accepted hyperparameters for one the optimizer does not take.
    """
    try:
        cls = OPTIMIZERS[name]
    except KeyError:
        known = ", ".join(repr(n) for n in OPTIMIZERS)
        raise ValueError(f"unknown optimizer {name!r}: expected one of {known}") from None
    signature = inspect.signature(cls.__init__)
    accepted = [p for p in signature.parameters if p not in ("self", "params")]
    unknown = sorted(set(hyper) - set(accepted))
    if unknown:
        raise ValueError(
            f"optimizer {name!r} takes no hyperparameter {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(accepted)}"
        )
    return cls(params, **hyper)
