"""What the fused optimizers share: ``step`` over parameter groups, and old-state defaults."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ClassVar

import torch

__all__ = ["FusedOptimizer", "real_view"]

if TYPE_CHECKING:
    from hoptune.kernels._device_steps import DeviceSteps
    from hoptune.kernels._plan import StepPlan


class FusedOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` whose update runs per parameter group in ``_step_group``.

    ``_flags`` are boolean options that a state saved by an older version may
    lack; they default to False when such a state is loaded.
    """

    _flags: ClassVar[tuple[str, ...]] = ("maximize",)
    #: Whether steps on the kernel path are planned once and reused (``kernels._plan``).
    planned: ClassVar[bool] = True

    def __setstate__(self, state: dict) -> None:
        """Also on loading a state dict, which drops every plan: its tensors are new."""
        super().__setstate__(state)
        for group in self.param_groups:
            for flag in self._flags:
                group.setdefault(flag, False)
        self.__dict__["_plans"] = {}

    def _plan(self, group: dict) -> StepPlan | None:
        """The group's step plan, if it has one and plans are on."""
        return self.__dict__.get("_plans", {}).get(id(group)) if self.planned else None

    def _keep_plan(self, group: dict, plan: StepPlan | None) -> None:
        if self.planned:
            self.__dict__.setdefault("_plans", {})[id(group)] = plan

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

    def _holding_plan(self, group: dict, params: list[torch.Tensor]) -> StepPlan | None:
        """The group's plan where it serves this step of ``params`` (those with a gradient)
        and holds for their gradients now, else None (an optimizer without plans)."""
        return None

    def _device_step(self, group: dict, plan: StepPlan, count: int
                     ) -> Callable[[], None] | None:
        """The launch of the group's next ``count`` steps that reads nothing from the host
        that changes between them (``DeviceSteps``), or None where its kernel cannot."""
        return None

    def device_steps(self, count: int) -> DeviceSteps | None:
        """The next ``count`` steps as ``DeviceSteps``, for the gradients the parameters have
        now: where every group's step is planned and holds for them (a step was just taken
        with them) and its kernel can take its step from the device; else None.

        Meant for a pass whose gradients a CUDA graph keeps where they are: the steps hold
        while the parameters, their gradients' addresses and the hyperparameters stay as
        they are now. Step hooks do not run for them.
        """
        from hoptune.kernels._device_steps import DeviceSteps

        launches, counts = [], []
        for group in self.param_groups:
            params = list(self._params_with_grads(group))
            if not params:
                continue
            made = self._group_steps(group, params, count)
            if made is None:
                return None
            launches.append(made[0])
            counts.append(made[1])
        return DeviceSteps(launches, counts, count) if launches else None

    def _group_steps(self, group: dict, params: list[torch.Tensor], count: int
                     ) -> tuple[Callable[[], None], Callable[[], object]] | None:
        """The group's next ``count`` steps from the device: the launch of one, and what
        counts it on the host; None where they cannot be (``device_steps``)."""
        plan = self._holding_plan(group, params)
        launch = None if plan is None else self._device_step(group, plan, count)
        return None if launch is None else (launch, plan.advance)

    def _params_with_grads(self, group: dict) -> Iterator[torch.Tensor]:
        """The group's parameters that have a gradient; sparse gradients are refused."""
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            yield p


def real_view(slot: tuple[torch.Tensor | None, ...]) -> tuple[torch.Tensor | None, ...]:
    """A slot of complex tensors as real ones (the kernels update real and imaginary parts)."""
    if not torch.is_complex(slot[0]):
        return slot
    return tuple(None if t is None else torch.view_as_real(t) for t in slot)
