"""FusedSGD: torch.optim.SGD's update as one fused kernel per launch."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hoptune.kernels import _dispatch, _launches, reference
from hoptune.kernels._base import FusedOptimizer, real_view
from hoptune.kernels._blocks import in_blocks
from hoptune.kernels._plan import StepPlan, plan_step
from hoptune.kernels._specs import SGD
from hoptune.kernels.reference import SGDScalars

__all__ = ["FusedSGD"]


class FusedSGD(FusedOptimizer):
    """SGD (momentum, dampening, Nesterov, weight decay) with fused steps.

    Drop-in for ``torch.optim.SGD``: the same arguments and defaults, the same
    state (``momentum_buffer``, kept only when momentum is nonzero) and so the
    same ``state_dict``. On CUDA tensors each step is one CuPy kernel launch per
    (device, dtype) that reads and writes every number once, in the tensors'
    own memory (the first momentum step, which starts the buffer from the
    gradient, is a launch of its own). Elsewhere it runs the torch reference
    (``kernels.reference.sgd_step_``), on the CPU in cache-sized blocks. The
    path taken, and why, is logged once on the "kernels" logger. Sparse
    gradients are not supported.
    """

    _flags = ("nesterov", "maximize")

    def __init__(
        self,
        params: torch.optim.optimizer.ParamsT,
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _step_group(self, group: dict) -> None:
        momentum = float(group["momentum"])
        params = list(self._params_with_grads(group))
        plan = self._holding_plan(group, params)
        if plan is not None:
            plan.advance()
            self._planned_launch(group, plan)()
            return
        self._step_unplanned(group, params, momentum)
        buffers = [self.state[p].get("momentum_buffer") if momentum != 0 else None
                   for p in params]
        # the plan holds while these are the parameters' buffers
        plan = plan_step(SGD, group, params, [buffers], [], (momentum != 0,), _launches.SGD_ROLES,
                         watched=buffers)
        self._keep_plan(group, plan)

    def _holding_plan(self, group: dict, params: list[torch.Tensor]) -> StepPlan | None:
        momentum = float(group["momentum"]) != 0
        plan = self._plan(group)
        if plan is None or not plan.serves(group, params, (momentum,)):
            return None
        buffers = ([self.state[p].get("momentum_buffer") for p in params] if momentum
                   else [None] * len(params))  # without momentum no state is read
        return plan if plan.holds(buffers, [p.grad for p in params]) else None

    def _planned_launch(self, group: dict, plan: StepPlan) -> Callable[[], None]:
        """The launch of a planned step over the gradients the parameters have now: the
        same arguments at every step (SGD's scalars do not change with the step count)."""
        scalars = SGDScalars.for_group(
            lr=float(group["lr"]), weight_decay=float(group["weight_decay"]),
            momentum=float(group["momentum"]), dampening=float(group["dampening"]))
        table = plan.table([p.grad for p in plan.params])
        nesterov, maximize = bool(group["nesterov"]), bool(group["maximize"])

        def launch() -> None:
            _launches.sgd((), plan.device, plan.dtype, scalars, nesterov=nesterov,
                          first_step=False, maximize=maximize, table=table)

        return launch

    def _device_step(self, group: dict, plan: StepPlan, count: int
                     ) -> Callable[[], None] | None:
        """The planned launch itself: nothing in it changes from step to step."""
        return self._planned_launch(group, plan)

    def _step_unplanned(self, group: dict, params: list[torch.Tensor], momentum: float
                        ) -> None:
        """The step without a plan: momentum buffers made where missing (their first step),
        bucketed by device, dtype and first step, each bucket launched or run by the
        reference."""
        buckets: dict[tuple[torch.device, torch.dtype, bool], list[_dispatch.Slot]] = {}
        for p in params:
            buf = None
            first_step = False
            if momentum != 0:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    first_step = True
                    buf = torch.empty_like(p, memory_format=torch.preserve_format)
                    state["momentum_buffer"] = buf
            slot = real_view((p, p.grad, buf))
            buckets.setdefault((slot[0].device, slot[0].dtype, first_step), []).append(slot)

        scalars = SGDScalars.for_group(
            lr=float(group["lr"]),
            weight_decay=float(group["weight_decay"]),
            momentum=momentum,
            dampening=float(group["dampening"]),
        )
        nesterov = bool(group["nesterov"])
        maximize = bool(group["maximize"])
        for (device, dtype, first_step), slots in buckets.items():
            kernel, fallback = _dispatch.split_by_path("FusedSGD", device, dtype, slots, SGD)
            if kernel:
                _launches.sgd(kernel, device, dtype, scalars, nesterov=nesterov,
                              first_step=first_step, maximize=maximize)
            for slot in fallback:
                for p, grad, buf in in_blocks(slot):
                    reference.sgd_step_(
                        p, grad, buf, scalars, nesterov=nesterov, first_step=first_step,
                        maximize=maximize,
                    )
