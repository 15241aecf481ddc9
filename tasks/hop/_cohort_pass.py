"""One shard pass for a cohort: K trials of one region trained as one fused model.

A plain function, like ``train_pass``, for a hop that carries several trials.
Each member keeps its identity: its own model and single-trial optimizer (as
``build_trial_model``/``make_trial_optimizer`` made them or a checkpoint
restored them), its own minibatch order from its own (seed, epoch, shard)
(``batch_generator``, the stream ``train_pass`` draws), its own
hyperparameters and loss. The pass fuses the members' models
(``regions.fuse``: stacked, zero-padded), moves their optimizer states into a
cohort optimizer (``kernels.CohortAdamW``/``CohortSGD``, per-trial scalars),
trains, and writes every trial's weights and optimizer state back into its
own model and optimizer, cut to its own shape: afterwards each member's
``state_dict``s are what a checkpoint of that trial holds, whatever cohort it
trained in. A pruned trial simply leaves: the next pass fuses the others.

Members that cannot fuse (a factory forward ``vmap`` cannot run, dropout,
gradient clipping, optimizers without a cohort form) train one after the
other with ``train_pass``, and the reason is logged once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hoptune import kernels
from hoptune.regions import (
    Family,
    FusedModel,
    RegionConfig,
    Unfusable,
    fuse,
    gather_stacked,
    get_family,
    log_unfused,
    stacked_batch_indices,
)
from hoptune.tasks.hop._steps import capture_choice, run_steps
from hoptune.tasks.hop._training import TrainedPass, batch_generator, start_pass, train_pass

__all__ = ["Member", "batch_generator", "train_cohort_pass"]

_PROBE_ROWS = 2


@dataclass
class Member:
    """One trial of a cohort: its seed and parameters, its model and its own optimizer."""

    seed: int
    params: dict[str, Any]
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer


def _cohort_optimizer(members: Sequence[Member], params: list[torch.Tensor]
                      ) -> torch.optim.Optimizer | Unfusable:
    """The cohort form of the members' optimizers, with each member's hyperparameters."""
    kinds = {type(m.optimizer) for m in members}
    if len(kinds) != 1 or not kinds <= {kernels.FusedAdamW, kernels.FusedSGD}:
        names = ", ".join(sorted(k.__name__ for k in kinds))
        return Unfusable(f"only FusedAdamW and FusedSGD have a cohort form (got {names})")
    if any(len(m.optimizer.param_groups) != 1 for m in members):
        return Unfusable("a member's optimizer has several parameter groups")
    groups = [m.optimizer.param_groups[0] for m in members]
    kind = kinds.pop()
    flags = kind._flags
    if len({tuple(bool(g[f]) for f in flags) for g in groups}) != 1:
        return Unfusable(f"the members differ in {', '.join(flags)}")
    shared = {f: bool(groups[0][f]) for f in flags}
    if kind is kernels.FusedAdamW:
        return kernels.CohortAdamW(
            params, lr=[g["lr"] for g in groups], betas=[g["betas"] for g in groups],
            eps=[g["eps"] for g in groups], weight_decay=[g["weight_decay"] for g in groups],
            **shared)
    return kernels.CohortSGD(
        params, **{k: [g[k] for g in groups] for k in ("lr", "momentum", "dampening",
                                                       "weight_decay")}, **shared)


def _fuse(region: RegionConfig, family: Family, members: Sequence[Member],
          data: dict[str, torch.Tensor], meta: dict[str, Any], clip_norm: float | None
          ) -> tuple[FusedModel, torch.optim.Optimizer] | Unfusable:
    if clip_norm is not None:
        return Unfusable("gradient clipping is per trial and has no fused form yet")
    probe = {k: v[:_PROBE_ROWS] for k, v in data.items()}
    fused = fuse(family, [m.params for m in members], [m.model for m in members], meta,
                 probe=probe)
    if isinstance(fused, Unfusable):
        return fused
    optimizer = _cohort_optimizer(members, fused.parameters())
    if isinstance(optimizer, Unfusable):
        return optimizer
    padded = any(bool(fused.padding(name, i).any()) for name in fused.params
                 for i in range(len(members)))
    eps = [float(m.optimizer.param_groups[0].get("eps", 1.0)) for m in members]
    if padded and min(eps) == 0:
        return Unfusable("AdamW with eps = 0 would turn zero padding into 0 / 0")
    return fused, optimizer


def _load_states(fused: FusedModel, optimizer: Any, members: Sequence[Member]) -> None:
    """Each member's optimizer state, padded, into the cohort optimizer."""
    for i, member in enumerate(members):
        own = dict(member.model.named_parameters())
        for name, stacked in fused.params.items():
            state = member.optimizer.state.get(own[name], {})
            padded = {k: fused.pad(name, v) if isinstance(v, torch.Tensor) and v.dim() > 0
                      else v for k, v in state.items()}
            optimizer.set_member_state(stacked, i, padded)


def _store_states(fused: FusedModel, optimizer: Any, members: Sequence[Member]) -> None:
    """Each member's part of the cohort optimizer's state back into its own optimizer."""
    for i, member in enumerate(members):
        own = dict(member.model.named_parameters())
        for name, stacked in fused.params.items():
            state = optimizer.member_state(stacked, i)
            if not state:
                continue
            param = own[name]
            member.optimizer.state[param] = {
                k: fused.cut(name, i, v) if v.dim() > 0 else v for k, v in state.items()}


def train_cohort_pass(region: RegionConfig, members: Sequence[Member],
                      data: dict[str, torch.Tensor], *, epoch: int | Sequence[int], shard: int,
                      position: int, meta: dict[str, Any], clip_norm: float | None = None
                      ) -> list[TrainedPass]:
    """Train every member once over ``data`` (one shard), fused where they can be.

    Members must share ``regions.cohort_key`` (the caller groups trials into
    cohorts). ``epoch`` is every member's epoch, or one per member: a trial that
    joined the cohort at an epoch boundary trains its own epoch's pass (its own
    minibatch order and learning rate) beside members epochs ahead of it.
    Returns one TrainedPass per member, in order; a fused pass reports
    the cohort's seconds for each member. Each member's model and optimizer end
    as if ``train_pass`` had trained it alone, bit for bit where the fused
    arithmetic is (see tests/tasks/test_cohort.py).
    """
    family = get_family(region)
    epochs = [epoch] * len(members) if isinstance(epoch, int) else list(epoch)
    if len(epochs) != len(members):
        raise ValueError(f"{len(epochs)} epochs for {len(members)} members")

    def alone(m: Member, e: int) -> TrainedPass:
        return train_pass(region, m.model, m.optimizer, data, seed=m.seed, epoch=e,
                          shard=shard, position=position, params=m.params, clip_norm=clip_norm)

    if len(members) == 1:
        return [alone(members[0], epochs[0])]
    # each member's learning rate is its schedule's for this hop before the cohort reads it
    settings = [start_pass(region, m.optimizer, params=m.params, epoch=e,
                           position=position) for m, e in zip(members, epochs, strict=True)]
    fusion = _fuse(region, family, members, data, meta, clip_norm)
    if not isinstance(fusion, Unfusable) and len({s.batch_size for s in settings}) != 1:
        fusion = Unfusable("the members' batch sizes differ: their passes take different "
                           "numbers of steps")
    if isinstance(fusion, Unfusable):
        log_unfused(family, fusion)
        return [alone(m, e) for m, e in zip(members, epochs, strict=True)]
    fused, optimizer = fusion
    _load_states(fused, optimizer, members)
    started = time.perf_counter()
    # row i of every batch is member i's own batch, gathered for all members at once
    k = len(members)
    indices = stacked_batch_indices(data, settings[0].batch_size,
                                    [batch_generator(m.seed, e, shard)
                                     for m, e in zip(members, epochs, strict=True)])
    first = next(iter(data.values()))
    totals = torch.zeros(k, dtype=torch.float64, device=first.device)

    def step(chosen: torch.Tensor) -> torch.Tensor:
        losses = fused.losses(gather_stacked(data, chosen, k))
        losses.sum().backward()  # d(sum)/d(loss_i) = 1: each trial gets its own gradient
        return losses.detach()

    samples = run_steps(indices, step, fused.parameters(), optimizer, totals,
                        lambda chosen: len(chosen) // k,
                        choice=capture_choice(first.device, len(first),
                                              settings[0].batch_size))
    fused.write_back([m.model for m in members])
    _store_states(fused, optimizer, members)
    seconds = time.perf_counter() - started
    return [TrainedPass(samples=samples, loss=float(total) / max(samples, 1), seconds=seconds)
            for total in totals.tolist()]
