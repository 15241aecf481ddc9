"""What the fused optimizers share: ``step`` over parameter groups, and old-state defaults."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

__all__ = ["FusedOptimizer"]


class FusedOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` whose update runs per parameter group in ``_step_group``.

    ``_flags`` are boolean options that a state saved by an older version may
    lack; they default to False when such a state is loaded.
    """

    _flags: ClassVar[tuple[str, ...]] = ("maximize",)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            for flag in self._flags:
                group.setdefault(flag, False)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Perform one optimization step; closure re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._step_group(group)
        return loss

    def _step_group(self, group: dict) -> None:
        raise NotImplementedError
