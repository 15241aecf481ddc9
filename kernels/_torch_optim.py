"""torch.optim's fused AdamW and SGD, standing in for ours where a CuPy kernel is not trusted.

On a CUDA device whose CuPy AdamW (or SGD) kernel failed its self-test, could
not run, or is switched off (kernels = "torch"), ``make_optimizer`` builds
these instead of ``FusedAdamW``/``FusedSGD``: torch's own one-launch
implementations of the same update. A trial's checkpoint may move between a
worker on either path, so each loads the other's ``state_dict``. A state saved
by ``FusedAdamW`` names none of torch's implementation flags, and torch would
fill them in with its defaults (not fused, and for AdamW not even decoupled
weight decay); these classes set them back after every load.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

__all__ = ["TorchFusedAdamW", "TorchFusedSGD"]


class _KeepFlags(torch.optim.Optimizer):
    """Sets ``_flags`` on every parameter group after a state is loaded."""

    _flags: ClassVar[dict[str, Any]] = {}

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.update(self._flags)
            for p in group["params"]:
                step = self.state.get(p, {}).get("step")
                if isinstance(step, torch.Tensor) and step.device != p.device:
                    # torch's fused step keeps its count on the parameters' device
                    self.state[p]["step"] = step.to(p.device, torch.float32)


class TorchFusedAdamW(_KeepFlags, torch.optim.AdamW):
    """``torch.optim.AdamW(fused=True)`` with ``FusedAdamW``'s arguments."""

    _flags: ClassVar[dict[str, Any]] = {"fused": True, "foreach": None, "capturable": False,
                                        "differentiable": False, "decoupled_weight_decay": True}

    def __init__(self, params: torch.optim.optimizer.ParamsT, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, fused=True)


class TorchFusedSGD(_KeepFlags, torch.optim.SGD):
    """``torch.optim.SGD(fused=True)`` with ``FusedSGD``'s arguments."""

    _flags: ClassVar[dict[str, Any]] = {"fused": True, "foreach": None, "differentiable": False}

    def __init__(self, params: torch.optim.optimizer.ParamsT, lr: float = 1e-3,
                 momentum: float = 0, dampening: float = 0, weight_decay: float = 0,
                 nesterov: bool = False, *, maximize: bool = False) -> None:
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                         fused=True)
