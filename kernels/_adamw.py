"""FusedAdamW: torch.optim.AdamW's update as one fused kernel per launch."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hoptune.kernels import _dispatch, _launches, reference
from hoptune.kernels._base import FusedOptimizer, real_view
from hoptune.kernels._blocks import in_blocks
from hoptune.kernels._multi_tensor import step_rows
from hoptune.kernels._plan import StepPlan, plan_step
from hoptune.kernels._specs import ADAMW, ADAMW_ROWS
from hoptune.kernels.reference import AdamWScalars

__all__ = ["FusedAdamW"]


class FusedAdamW(FusedOptimizer):
    """AdamW (decoupled weight decay, bias correction, optional amsgrad) with fused steps.

    Drop-in for ``torch.optim.AdamW``: the same arguments and defaults, the same
    state (``step``, ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``) and so the
    same ``state_dict``. On CUDA tensors each step is one CuPy kernel launch per
    (device, dtype, step count) that reads and writes every number once, in
    the tensors' own memory. Elsewhere the step runs the torch reference of the
    same formulas (``kernels.reference.adamw_step_``), on the CPU in
    cache-sized blocks. The path taken, and why, is logged once on the
    "kernels" logger. Sparse gradients are not supported.
    """

    _flags = ("amsgrad", "maximize")

    def __init__(
        self,
        params: torch.optim.optimizer.ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {
            "lr": lr,
            "betas": (float(betas[0]), float(betas[1])),
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        """Also on loading a state_dict: step counts live on the CPU, whatever the map_location.

        The step's scalars are host arithmetic; a step count on a GPU would make
        every optimizer step wait for it.
        """
        super().__setstate__(state)
        for values in self.state.values():
            step = values.get("step")
            if isinstance(step, torch.Tensor) and step.device.type != "cpu":
                values["step"] = step.to("cpu", torch.float32)

    def _step_group(self, group: dict) -> None:
        amsgrad = bool(group["amsgrad"])
        params = list(self._params_with_grads(group))
        plan = self._holding_plan(group, params)
        if plan is not None:
            scalars = self._scalars(group, plan.advance())
            _launches.adamw((), plan.device, plan.dtype, scalars, amsgrad=amsgrad,
                            maximize=bool(group["maximize"]),
                            table=plan.table([p.grad for p in params]))
            return
        self._step_unplanned(group, params, amsgrad)
        states = [self.state[p] for p in params]
        plan = plan_step(
            ADAMW, group, params,
            [[s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
             [s["max_exp_avg_sq"] if amsgrad else None for s in states]],
            [s["step"] for s in states], (amsgrad,), _launches.ADAMW_ROLES)
        if plan is not None and self.planned:
            plan.count_as_one(states)
        self._keep_plan(group, plan)

    def _holding_plan(self, group: dict, params: list[torch.Tensor]) -> StepPlan | None:
        plan = self._plan(group)
        if plan is None or not plan.serves(group, params, (bool(group["amsgrad"]),)):
            return None
        steps = [self.state[p]["step"] for p in params]
        return plan if plan.holds(steps, [p.grad for p in params]) else None

    @staticmethod
    def _scalars(group: dict, step: float) -> AdamWScalars:
        """The scalars of the group's step number ``step``."""
        beta1, beta2 = group["betas"]
        return AdamWScalars.for_step(
            lr=float(group["lr"]), beta1=float(beta1), beta2=float(beta2),
            eps=float(group["eps"]), weight_decay=float(group["weight_decay"]), step=step)

    def _device_step(self, group: dict, plan: StepPlan, count: int
                     ) -> Callable[[], None] | None:
        """``ht_adamw_rows`` over the plan's table: the scalars of steps ``plan.step + 1`` to
        ``plan.step + count`` as rows on the device, each launch reading the next."""
        if _dispatch.kernel_path(ADAMW_ROWS, plan.device, plan.dtype).path != _dispatch.KERNEL:
            return None
        rows, row = step_rows([self._scalars(group, plan.step + 1 + i).as_tuple()
                               for i in range(count)], plan.device, plan.dtype)
        table = plan.table([p.grad for p in plan.params])
        amsgrad, maximize = bool(group["amsgrad"]), bool(group["maximize"])

        def launch() -> None:
            _launches.adamw_rows((), plan.device, plan.dtype, rows, row, amsgrad=amsgrad,
                                 maximize=maximize, table=table)
            row.add_(1)

        return launch

    def _step_unplanned(self, group: dict, params: list[torch.Tensor], amsgrad: bool) -> None:
        """The step without a plan: each parameter's state made and counted, bucketed by
        device, dtype and step count, each bucket launched or run by the reference."""
        buckets: dict[tuple[torch.device, torch.dtype, float], list[_dispatch.Slot]] = {}
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if amsgrad and "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
            slot = real_view((
                p,
                p.grad,
                state["exp_avg"],
                state["exp_avg_sq"],
                state["max_exp_avg_sq"] if amsgrad else None,
            ))
            key = (slot[0].device, slot[0].dtype, float(state["step"]))
            buckets.setdefault(key, []).append(slot)

        for (device, dtype, step), slots in buckets.items():
            scalars = self._scalars(group, step)
            kernel, fallback = _dispatch.split_by_path("FusedAdamW", device, dtype, slots, ADAMW)
            if kernel:
                _launches.adamw(kernel, device, dtype, scalars, amsgrad=amsgrad,
                                maximize=bool(group["maximize"]))
            for slot in fallback:
                for block in in_blocks(slot):
                    reference.adamw_step_(*block, scalars, maximize=bool(group["maximize"]))
