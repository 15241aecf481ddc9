"""Fused optimizers for a cohort: several trials' stacked parameters, per-trial hyperparameters.

A fused cohort holds each parameter of its N trials as one tensor whose axis 0
is the trial. ``CohortAdamW`` and ``CohortSGD`` step all of them at once, each
trial with its own learning rate, weight decay, betas, eps, momentum and
dampening (sequences of N numbers) and its own step count: on CUDA tensors
one CuPy launch per (device, dtype) reads every trial's scalars from a small
table (``ht_adamw_cohort``, ``ht_sgd_cohort``: the math of adamw.cuh and
sgd.cuh, unchanged); elsewhere the torch reference broadcasts them
(``reference.adamw_cohort_step_``, ``sgd_cohort_step_``). Either way trial
i's slice is updated by exactly the operations of a single-trial
``FusedAdamW``/``FusedSGD`` step with trial i's scalars, so a cohort of N
steps as N single trials would, bit for bit on the same path.

``member_state``/``set_member_state`` move one trial's state in and out in
the single-trial optimizers' layout (``step`` a 0-dim tensor, moments of the
parameter's shape), so a trial's checkpoint does not depend on its cohort.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hoptune.kernels import _dispatch, _launches, reference
from hoptune.kernels._base import FusedOptimizer
from hoptune.kernels._specs import ADAMW_COHORT, SGD_COHORT
from hoptune.kernels.reference import AdamWScalars, SGDScalars

__all__ = ["CohortAdamW", "CohortSGD"]


def _per_trial(name: str, values: Sequence[Any], n: int | None) -> tuple[Any, ...]:
    values = tuple(values)
    if not values or (n is not None and len(values) != n):
        raise ValueError(f"{name}: expected one value per trial ({n}), got {len(values)}")
    return values


def _check(name: str, values: Sequence[float], ok: Any) -> None:
    for v in values:
        if not ok(v):
            raise ValueError(f"Invalid {name} value: {v}")


@functools.lru_cache(maxsize=8)
def _adamw_scalars(lr: tuple[float, ...], betas: tuple[tuple[float, float], ...],
                   eps: tuple[float, ...], weight_decay: tuple[float, ...],
                   steps: tuple[float, ...]) -> list[AdamWScalars]:
    """Each trial's scalars of one step (the same for every parameter of the step)."""
    return [AdamWScalars.for_step(lr=float(r), beta1=b1, beta2=b2, eps=float(e),
                                  weight_decay=float(wd), step=step)
            for r, (b1, b2), e, wd, step in zip(lr, betas, eps, weight_decay, steps, strict=True)]


def _on_kernel_path(name: str, slots: list[_dispatch.Slot], spec: Any
                    ) -> tuple[torch.device, torch.dtype] | None:
    """The one device and dtype of ``slots`` where every slot takes the kernel path (a step
    from the device launches them all at once), else None."""
    keys = {(s[0].device, s[0].dtype) for s in slots}
    if len(keys) != 1:
        return None
    device, dtype = keys.pop()
    _, fallback = _dispatch.split_by_path(name, device, dtype, slots, spec)
    return None if fallback else (device, dtype)


class _Cohort(FusedOptimizer):
    def _trials(self) -> int:
        return len(self.defaults["lr"])

    def _stacked(self, group: dict) -> list[torch.Tensor]:
        n = self._trials()
        params = list(self._params_with_grads(group))
        for p in params:
            if p.dim() == 0 or p.shape[0] != n:
                raise ValueError(f"a cohort parameter needs a leading trial axis of {n}, "
                                 f"got shape {tuple(p.shape)}")
            if torch.is_complex(p):
                raise ValueError("cohort optimizers do not support complex parameters")
        return params

    def member_state(self, p: torch.Tensor, trial: int) -> dict[str, torch.Tensor]:
        """Trial ``trial``'s state of stacked parameter p, in the single-trial layout."""
        raise NotImplementedError

    def set_member_state(self, p: torch.Tensor, trial: int, state: dict[str, Any]) -> None:
        """Set trial ``trial``'s state of p from a single-trial optimizer's state of it."""
        raise NotImplementedError


class CohortAdamW(_Cohort):
    """AdamW over stacked parameters, each trial with its own hyperparameters and step count.

    ``lr``, ``betas``, ``eps`` and ``weight_decay`` hold one value per trial;
    ``amsgrad`` and ``maximize`` are shared. State per parameter: ``step`` (one
    float32 count per trial, on the CPU: host arithmetic), ``exp_avg``,
    ``exp_avg_sq`` and, with amsgrad, ``max_exp_avg_sq``, all stacked.
    """

    _flags = ("amsgrad", "maximize")

    def __init__(
        self,
        params: torch.optim.optimizer.ParamsT,
        lr: Sequence[float],
        betas: Sequence[tuple[float, float]],
        eps: Sequence[float],
        weight_decay: Sequence[float],
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        lr = _per_trial("lr", lr, None)
        n = len(lr)
        betas = tuple((float(a), float(b)) for a, b in _per_trial("betas", betas, n))
        eps, weight_decay = _per_trial("eps", eps, n), _per_trial("weight_decay", weight_decay, n)
        _check("learning rate", lr, lambda v: v >= 0)
        _check("epsilon", eps, lambda v: v >= 0)
        _check("beta", [x for pair in betas for x in pair], lambda v: 0 <= v < 1)
        _check("weight_decay", weight_decay, lambda v: v >= 0)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize}
        super().__init__(params, defaults)

    def _state(self, p: torch.Tensor, amsgrad: bool) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros(self._trials(), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _step_group(self, group: dict) -> None:
        amsgrad = bool(group["amsgrad"])
        buckets: dict[tuple, list[_dispatch.Slot]] = {}
        for p in self._stacked(group):
            state = self._state(p, amsgrad)
            state["step"] += 1
            slot = (p, p.grad, state["exp_avg"], state["exp_avg_sq"],
                    state["max_exp_avg_sq"] if amsgrad else None)
            key = (p.device, p.dtype, tuple(state["step"].tolist()))
            buckets.setdefault(key, []).append(slot)
        for (device, dtype, steps), slots in buckets.items():
            scalars = _adamw_scalars(tuple(group["lr"]), tuple(group["betas"]),
                                     tuple(group["eps"]), tuple(group["weight_decay"]), steps)
            maximize = bool(group["maximize"])
            kernel, fallback = _dispatch.split_by_path("CohortAdamW", device, dtype, slots,
                                                       ADAMW_COHORT)
            if kernel:
                _launches.adamw_cohort(kernel, device, dtype, scalars, amsgrad=amsgrad,
                                       maximize=maximize)
            for slot in fallback:
                reference.adamw_cohort_step_(*slot, scalars, maximize=maximize)

    def _group_steps(self, group: dict, params: list[torch.Tensor], count: int
                     ) -> tuple[Callable[[], None], Callable[[], object]] | None:
        """One launch of ``ht_adamw_cohort`` reading step j's per-trial table at step j, all
        on the device; where every parameter has its state and the same step counts, on
        one device and dtype, on the kernel path."""
        amsgrad = bool(group["amsgrad"])
        params = self._stacked(group)
        states = [self.state.get(p) for p in params]
        if not all(states) or (amsgrad and any("max_exp_avg_sq" not in s for s in states)):
            return None
        steps = tuple(states[0]["step"].tolist())
        if any(tuple(s["step"].tolist()) != steps for s in states):
            return None
        slots = [(p, p.grad, s["exp_avg"], s["exp_avg_sq"],
                  s["max_exp_avg_sq"] if amsgrad else None) for p, s in zip(params, states,
                                                                           strict=True)]
        on_kernel = _on_kernel_path("CohortAdamW", slots, ADAMW_COHORT)
        if on_kernel is None:
            return None
        device, dtype = on_kernel
        prepared = _launches.adamw_cohort_steps(slots, device, dtype, [
            _adamw_scalars(tuple(group["lr"]), tuple(group["betas"]), tuple(group["eps"]),
                           tuple(group["weight_decay"]), tuple(s + 1 + j for s in steps))
            for j in range(count)])
        maximize = bool(group["maximize"])

        def launch() -> None:
            _launches.adamw_cohort((), device, dtype, (), amsgrad=amsgrad, maximize=maximize,
                                   steps=prepared)
            prepared.row.add_(1)

        def counted() -> None:
            for state in states:
                state["step"] += 1

        return launch, counted

    def member_state(self, p: torch.Tensor, trial: int) -> dict[str, torch.Tensor]:
        state = self.state.get(p)
        if not state:
            return {}
        out = {"step": state["step"][trial].clone()}
        for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            if name in state:
                out[name] = state[name][trial].clone()
        return out

    def set_member_state(self, p: torch.Tensor, trial: int, state: dict[str, Any]) -> None:
        if not state:
            return
        amsgrad = bool(self.param_groups[0]["amsgrad"]) or "max_exp_avg_sq" in state
        own = self._state(p, amsgrad)
        own["step"][trial] = float(state["step"])
        for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            if name in state:
                own[name][trial].copy_(state[name])


class CohortSGD(_Cohort):
    """SGD over stacked parameters, each trial with its own lr, weight decay, momentum and
    dampening; ``nesterov`` and ``maximize`` are shared.

    State per parameter, where some trial has momentum: ``momentum_buffer``
    (stacked) and ``started`` (per trial: whether its buffer holds a value; a
    trial's first momentum step starts it from the gradient, as torch's SGD does).
    """

    _flags = ("nesterov", "maximize")

    def __init__(
        self,
        params: torch.optim.optimizer.ParamsT,
        lr: Sequence[float],
        momentum: Sequence[float],
        dampening: Sequence[float],
        weight_decay: Sequence[float],
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        lr = _per_trial("lr", lr, None)
        n = len(lr)
        momentum, dampening = _per_trial("momentum", momentum, n), _per_trial(
            "dampening", dampening, n)
        weight_decay = _per_trial("weight_decay", weight_decay, n)
        _check("learning rate", lr, lambda v: v >= 0)
        _check("momentum", momentum, lambda v: v >= 0)
        _check("weight_decay", weight_decay, lambda v: v >= 0)
        if nesterov and any(m <= 0 or d != 0 for m, d in zip(momentum, dampening, strict=True)):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
        super().__init__(params, defaults)

    def _has_momentum(self) -> bool:
        return any(float(m) != 0 for m in self.param_groups[0]["momentum"])

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if self._has_momentum() and not state:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["started"] = torch.zeros(self._trials(), dtype=torch.bool)
        return state

    @staticmethod
    def _scalars(group: dict) -> list[SGDScalars]:
        return [
            SGDScalars.for_group(lr=float(lr), weight_decay=float(wd), momentum=float(m),
                                 dampening=float(d))
            for lr, wd, m, d in zip(group["lr"], group["weight_decay"], group["momentum"],
                                    group["dampening"], strict=True)
        ]

    def _group_steps(self, group: dict, params: list[torch.Tensor], count: int
                     ) -> tuple[Callable[[], None], Callable[[], object]] | None:
        """The launch of ``ht_sgd_cohort`` over a table that stays: once every trial's
        momentum buffer has started (or none has momentum) a step's scalars and first-step
        flags do not change; on one device and dtype, on the kernel path."""
        params = self._stacked(group)
        states = [self.state.get(p) for p in params]
        if self._has_momentum():
            if not all(states) or not all(bool(s["started"].all()) for s in states):
                return None
            first = (False,) * self._trials()
        else:
            first = (True,) * self._trials()  # as a step without momentum state passes
        slots = [(p, p.grad, s.get("momentum_buffer") if s else None)
                 for p, s in zip(params, states, strict=True)]
        on_kernel = _on_kernel_path("CohortSGD", slots, SGD_COHORT)
        if on_kernel is None:
            return None
        device, dtype = on_kernel
        prepared = _launches.sgd_cohort_steps(slots, device, dtype, self._scalars(group), first)
        nesterov, maximize = bool(group["nesterov"]), bool(group["maximize"])

        def launch() -> None:
            _launches.sgd_cohort((), device, dtype, (), (), nesterov=nesterov,
                                 maximize=maximize, steps=prepared)

        return launch, lambda: None

    def _step_group(self, group: dict) -> None:
        scalars = self._scalars(group)
        buckets: dict[tuple, list[_dispatch.Slot]] = {}
        starts: dict[tuple, list[torch.Tensor]] = {}
        for p in self._stacked(group):
            state = self._state(p)
            started = state.get("started")
            first = tuple(True for _ in scalars) if started is None else tuple(
                not bool(s) for s in started)
            key = (p.device, p.dtype, first)
            buckets.setdefault(key, []).append((p, p.grad, state.get("momentum_buffer")))
            if started is not None:
                starts.setdefault(key, []).append(started)
        nesterov, maximize = bool(group["nesterov"]), bool(group["maximize"])
        for key, slots in buckets.items():
            device, dtype, first = key
            kernel, fallback = _dispatch.split_by_path("CohortSGD", device, dtype, slots,
                                                       SGD_COHORT)
            if kernel:
                _launches.sgd_cohort(kernel, device, dtype, scalars, first, nesterov=nesterov,
                                     maximize=maximize)
            for p, grad, buf in fallback:
                reference.sgd_cohort_step_(p, grad, buf, scalars, first, nesterov=nesterov,
                                           maximize=maximize)
            for started in starts.get(key, []):
                started.fill_(True)

    def member_state(self, p: torch.Tensor, trial: int) -> dict[str, torch.Tensor]:
        state = self.state.get(p)
        if not state or not bool(state["started"][trial]):
            return {}
        if float(self.param_groups[0]["momentum"][trial]) == 0:
            return {}
        return {"momentum_buffer": state["momentum_buffer"][trial].clone()}

    def set_member_state(self, p: torch.Tensor, trial: int, state: dict[str, Any]) -> None:
        buf = state.get("momentum_buffer")
        if buf is None:
            return
        own = self._state(p)
        own["momentum_buffer"][trial].copy_(buf)
        own["started"][trial] = True
