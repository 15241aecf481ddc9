"""One training pass over one shard, and the seeds that make it replayable.

Plain functions with no Celery and no database: the hop task calls them, and
so does ``replay_trial``, which retrains a trial from its recorded visit
orders in one process to check that the distributed run is bitwise the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from hoptune import kernels
from hoptune.regions import (
    OPTIMIZER_PARAMS,
    RegionConfig,
    TrialSettings,
    batch_indices,
    gather,
    get_family,
    trial_settings,
)
from hoptune.tasks.hop._seeds import stream_seed
from hoptune.tasks.hop._steps import capture_choice, run_steps

__all__ = ["TrainedPass", "bare_trial_model", "batch_generator", "build_trial_model",
           "make_trial_optimizer", "start_pass", "stream_seed", "train_pass"]


def build_trial_model(region: RegionConfig, params: dict[str, Any], seed: int,
                      meta: dict[str, Any], device: torch.device | None = None
                      ) -> torch.nn.Module:
    """The trial's freshly initialised model on ``device`` (default: the CPU).

    The weights are drawn on the CPU and then moved, so they are the same for
    the same (params, seed) on every kind of device.
    """
    family = get_family(region)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(seed, "init"))
        model = family.build(params, meta)
    return model if device is None else model.to(device)


def bare_trial_model(region: RegionConfig, params: dict[str, Any], meta: dict[str, Any]
                     ) -> torch.nn.Module:
    """The trial's model without memory (its tensors on the meta device), for a checkpoint's
    tensors to take their places (``load_state_dict(assign=True)``).

    Built with ``Family.build_on_meta`` (no values drawn), each time: 0.35 ms for the
    rating model on a 2-core host, less than a copy of a kept template took (0.41 ms).
    """
    return get_family(region).build_on_meta(params, meta)


def make_trial_optimizer(region: RegionConfig, params: dict[str, Any],
                         model: torch.nn.Module) -> torch.optim.Optimizer:
    """The trial's optimizer (the region's unless its params choose) with its parameters.

    Each parameter group remembers its ``initial_lr`` (saved with the optimizer's
    state): the learning-rate schedule scales that, hop by hop.
    """
    hyper: dict[str, Any] = {k: params[k] for k in OPTIMIZER_PARAMS if k in params}
    if "beta1" in hyper or "beta2" in hyper:
        hyper["betas"] = (hyper.pop("beta1", 0.9), hyper.pop("beta2", 0.999))
    name = trial_settings(region, params).optimizer
    optimizer = kernels.make_optimizer(name, model.parameters(), **hyper)
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return optimizer


@dataclass(frozen=True)
class TrainedPass:
    samples: int
    loss: float
    seconds: float


def batch_generator(seed: int, epoch: int, shard: int) -> torch.Generator:
    """The generator of a trial's minibatch order in one pass: (seed, epoch, shard) alone."""
    return torch.Generator().manual_seed(stream_seed(seed, epoch, shard, "batches"))


def start_pass(region: RegionConfig, optimizer: torch.optim.Optimizer, *,
               params: dict[str, Any], epoch: int, position: int) -> TrialSettings:
    """The trial's settings for hop (epoch, position), its optimizer's learning rate set.

    The rate is the schedule's factor for that hop on the optimizer's initial one
    (kept in each parameter group as ``initial_lr``).
    """
    settings = trial_settings(region, params)
    scale = settings.lr_scale(epoch, position, region.shards)
    for group in optimizer.param_groups:
        group["lr"] = group.setdefault("initial_lr", group["lr"]) * scale
    return settings


def train_pass(region: RegionConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               data: dict[str, torch.Tensor], *, seed: int, epoch: int, shard: int,
               position: int, params: dict[str, Any],
               clip_norm: float | None = None) -> TrainedPass:
    """Train ``model`` once over ``data`` (one shard) in shuffled minibatches.

    The batch size and the learning rate (the schedule's factor for hop
    (epoch, position) on the optimizer's initial one) are the trial's, from
    its ``params`` over the region's settings.

    The minibatch order and every other random draw (dropout) derive from
    (trial seed, epoch, shard) alone, so the pass is the same wherever it runs
    on the same kind of device. It trains where ``model`` and ``data`` are, and
    waits for that device once, at the end, to read the loss. On a GPU the full
    batches after the first replay one captured gather, forward and backward
    (``tasks.hop._steps``), bitwise as eager steps.
    """
    family = get_family(region)
    settings = start_pass(region, optimizer, params=params, epoch=epoch, position=position)
    generator = batch_generator(seed, epoch, shard)
    torch.manual_seed(stream_seed(seed, epoch, shard, "torch"))
    model.train()
    started = time.perf_counter()
    # the loss is summed on the device: reading it each step would stall a GPU every batch
    first = next(iter(data.values()))
    device = first.device
    total = torch.zeros((), dtype=torch.float64, device=device)
    weights = [p for group in optimizer.param_groups for p in group["params"]]

    def step(chosen: torch.Tensor) -> torch.Tensor:
        loss = family.loss(model, gather(data, chosen))
        loss.backward()
        return loss.detach()

    def clip() -> None:
        kernels.clip_grad_norm_(model.parameters(), clip_norm)

    samples = run_steps(batch_indices(data, settings.batch_size, generator), step, weights,
                        optimizer, total, len,
                        choice=capture_choice(device, len(first), settings.batch_size),
                        after_backward=None if clip_norm is None else clip)
    return TrainedPass(samples=samples, loss=float(total) / max(samples, 1),
                       seconds=time.perf_counter() - started)
