"""The error model over many steps: how far two optimizers' states may drift apart.

A test helper (``from tests.kernels.tracking import BoundTracker``), not part of the
package: the kernels tests compare a fused optimizer with its reference through it.

Two optimizers ("ours" and "theirs") update the same parameters, each its own
copy, step by step. Each step the tracker runs the one-step analysis of the
update (``adamw_bound`` or ``sgd_bound``) on theirs' inputs, with ours' inputs
allowed to differ by the bounds carried from the step before (parameters and
optimizer state) and by the measured difference of the two gradients. The
gradient comes from the model, not the optimizer: measuring it, rather than
modelling the network, keeps the bound about the optimizer and still sound when
the two trainings feed their differences back through the loss.

Derivation of the growth: the one-step analysis propagates input spreads through
the update exactly (first-order terms and their products) and adds each
operation's rounding, so after n steps the bound is each step's rounding carried
forward by the later steps: times ``decay <= 1`` for the parameter (so it grows
linearly, by a few ulps of |param| and of |update| a step), times ``beta1`` and
``beta2`` for the moments (so theirs level off), through ``1 / denom`` into the
update. Nothing is guessed per step count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch

from hoptune.kernels import FusedAdamW, FusedSGD, adamw_bound, sgd_bound
from hoptune.kernels.reference import AdamWScalars, SGDScalars

__all__ = ["BoundTracker"]

_ADAMW = (FusedAdamW, torch.optim.AdamW)
_SGD = (FusedSGD, torch.optim.SGD)
_EQUAL = torch.zeros((), dtype=torch.float64)


def _real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def _difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| of real views in float64, rounded up (exact for float32)."""
    diff = (_real(a).double() - _real(b).double()).abs()
    return torch.where(diff > 0, torch.nextafter(diff, torch.full_like(diff, math.inf)), diff)


class BoundTracker:
    """Steps ours and theirs together and carries the bound on |ours - theirs| per tensor.

    Both optimizers must hold their copies of the same parameters in the same
    order, with the same hyperparameters. ``fma`` as in ``adamw_bound``; by
    default True when theirs is ``torch.optim``'s. Only AdamW and SGD are modelled.
    """

    def __init__(
        self,
        ours: torch.optim.Optimizer,
        theirs: torch.optim.Optimizer,
        *,
        fma: bool | None = None,
    ) -> None:
        if not isinstance(theirs, _ADAMW + _SGD):
            raise TypeError(f"no error model for {type(theirs).__name__}")
        if fma is None:
            fma = not isinstance(theirs, (FusedAdamW, FusedSGD))
        self.ours, self.theirs, self.fma = ours, theirs, fma
        self._spreads: dict[tuple[int, int], dict[str, torch.Tensor]] = {}

    def _pairs(self) -> Iterator[tuple[tuple[int, int], dict, torch.Tensor, torch.Tensor]]:
        groups = zip(self.ours.param_groups, self.theirs.param_groups, strict=True)
        for g, (ours, theirs) in enumerate(groups):
            for i, (a, b) in enumerate(zip(ours["params"], theirs["params"], strict=True)):
                yield (g, i), theirs, a, b

    def step(
        self,
        step_ours: Callable[[], object] | None = None,
        step_theirs: Callable[[], object] | None = None,
    ) -> None:
        """Step both optimizers (gradients already set) and widen the bounds by one step."""
        batches: dict[tuple, list[tuple[tuple[int, int], torch.Tensor, dict]]] = {}
        for key, _, a, b in self._pairs():
            if (a.grad is None) != (b.grad is None):
                raise ValueError(f"parameter {key} has a gradient on one side only")
            if b.grad is not None:
                spreads = {**self._spreads.get(key, {}), "grad": _difference(a.grad, b.grad)}
                state = self.theirs.state[b]
                batch = (key[0], b.dtype, float(state.get("step", 0)),
                         state.get("momentum_buffer") is None)
                batches.setdefault(batch, []).append((key, b, spreads))
        bounds = {}
        for (group, *_), members in batches.items():
            bounds.update(self._one_step(self.theirs.param_groups[group], members))
        (step_ours or self.ours.step)()
        (step_theirs or self.theirs.step)()
        self._spreads.update(bounds)

    def _inputs(self, group: dict, p: torch.Tensor) -> dict[str, torch.Tensor | None]:
        """Theirs' inputs to the step of p, as real views; absent state as zeros."""
        state = self.theirs.state[p]
        param = _real(p.detach())
        inputs: dict[str, torch.Tensor | None] = {"param": param, "grad": _real(p.grad)}
        names = (
            ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
            if isinstance(self.theirs, _ADAMW)
            else ("momentum_buffer",)
        )
        for name in names:
            value = state.get(name)
            inputs[name] = _real(value) if value is not None else torch.zeros_like(param)
        return inputs

    def _one_step(
        self, group: dict, members: list[tuple[tuple[int, int], torch.Tensor, dict]]
    ) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
        """The one-step bounds of parameters sharing a group, dtype and step count, as one
        flat batch (the analysis is elementwise; batching saves per-operation overhead)."""
        inputs = [self._inputs(group, p) for _, p, _ in members]
        flat = {
            name: torch.cat([i[name].reshape(-1) for i in inputs]) for name in inputs[0]
        }
        spreads = {
            name: torch.cat([
                sp[name].reshape(-1) if name in sp else torch.zeros(i["param"].numel(),
                                                                  device=i["param"].device)
                for i, (_, _, sp) in zip(inputs, members, strict=True)
            ]).double()
            for name in inputs[0]
        }
        state = self.theirs.state[members[0][1]]
        if isinstance(self.theirs, _ADAMW):
            beta1, beta2 = group["betas"]
            scalars = AdamWScalars.for_step(
                lr=float(group["lr"]), beta1=float(beta1), beta2=float(beta2),
                eps=float(group["eps"]), weight_decay=float(group["weight_decay"]),
                step=float(state["step"]) + 1 if state else 1.0,
            )
            out = adamw_bound(
                flat["param"], flat["grad"], flat["exp_avg"], flat["exp_avg_sq"],
                flat.get("max_exp_avg_sq"), scalars, maximize=bool(group["maximize"]),
                spreads=spreads, fma=self.fma,
            )
        else:
            scalars = SGDScalars.for_group(
                lr=float(group["lr"]), weight_decay=float(group["weight_decay"]),
                momentum=float(group["momentum"]), dampening=float(group["dampening"]),
            )
            first_step = state.get("momentum_buffer") is None
            out = sgd_bound(
                flat["param"], flat["grad"], None if first_step else flat["momentum_buffer"],
                scalars, nesterov=bool(group["nesterov"]), first_step=first_step,
                maximize=bool(group["maximize"]), spreads=spreads, fma=self.fma,
            )
        sizes = [i["param"].numel() for i in inputs]
        split = {name: bound.split(sizes) for name, bound in out.items()}
        return {
            key: {name: parts[k].reshape(inputs[k]["param"].shape) for name, parts in split.items()}
            for k, (key, _, _) in enumerate(members)
        }

    def tensors(
        self,
    ) -> Iterator[tuple[tuple[int, int], str, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(key, name, ours, theirs, bound) for every parameter and state tensor, as real
        views; key is (group, index). A tensor never stepped must be equal (bound 0); so
        must the step counts."""
        for key, _, a, b in self._pairs():
            spreads = self._spreads.get(key, {})
            bound = spreads.get("param", _EQUAL)
            yield key, "param", _real(a.detach()), _real(b.detach()), bound
            ours, theirs = self.ours.state[a], self.theirs.state[b]
            if ours.keys() != theirs.keys():
                raise ValueError(f"parameter {key}: state {sorted(ours)} != {sorted(theirs)}")
            for name in sorted(theirs):
                x, y = ours[name], theirs[name]
                if x is None or y is None:
                    if (x is None) != (y is None):
                        raise ValueError(f"parameter {key}: {name} is None on one side only")
                    continue
                bound = _EQUAL if name == "step" else spreads.get(name, _EQUAL)
                yield key, name, _real(torch.as_tensor(x)), _real(torch.as_tensor(y)), bound
