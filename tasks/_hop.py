"""A hop: one trial trained once over one shard, then handed on.

``run_hop`` is the whole logic of the hop task, callable without Celery. It
returns the messages to send next as ``Dispatch`` values; the task sends them.
Exactly-once effect under at-least-once delivery: the output checkpoint is
keyed by (trial, epoch, position), a delivery that finds it does no training,
and the next hop is queued in the same transaction that records this one, so
a redelivered hop never hands on twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from regions import RegionConfig, get_family
from tasks._checkpoint import (
    Checkpoint,
    checkpoint_key,
    load_checkpoint,
    previous_position,
    save_checkpoint,
)
from tasks._runtime import Runtime, region_of, study_manifest
from tasks._training import build_trial_model, make_trial_optimizer, train_pass
from tuner._db import ACTIVE_STATES

__all__ = ["Dispatch", "HopReport", "hop_queue", "hop_dispatch", "run_hop", "restore_trial",
           "model_at"]

log = logging.getLogger(__name__)

CONTROL_QUEUE = "hoptune.control"


@dataclass(frozen=True)
class Dispatch:
    """A message to send: task name, queue and JSON keyword arguments."""

    task: str
    queue: str
    kwargs: dict[str, Any]


@dataclass
class HopReport:
    """What one delivery of a hop did, for logs, events and the benchmark."""

    trial_id: int
    epoch: int
    position: int
    shard: int
    trained: bool = False
    samples: int = 0
    loss: float | None = None
    load_seconds: float = 0.0
    train_seconds: float = 0.0
    save_seconds: float = 0.0
    dispatch: list[Dispatch] = field(default_factory=list)
    skipped: str | None = None


def hop_queue(region: str, shard: int) -> str:
    return f"hop.{region}.{shard}"


def hop_dispatch(region: str, study_id: int, trial_id: int, epoch: int, position: int,
                 shard: int) -> Dispatch:
    """The message for one hop; region and shard are there for routing and for Flower."""
    return Dispatch(
        task="hoptune.hop",
        queue=hop_queue(region, shard),
        kwargs={"region": region, "study": study_id, "trial": trial_id, "epoch": epoch,
                "position": position, "shard": shard},
    )


def tune_step_dispatch(study_id: int) -> Dispatch:
    return Dispatch(task="hoptune.tune_step", queue=CONTROL_QUEUE, kwargs={"study": study_id})


def promote_dispatch(study_id: int) -> Dispatch:
    return Dispatch(task="hoptune.promote", queue=CONTROL_QUEUE, kwargs={"study": study_id})


def restore_trial(rt: Runtime, region: RegionConfig, study: dict[str, Any],
                  trial: dict[str, Any], epoch: int, position: int, meta: dict[str, Any]
                  ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and optimizer a hop at (epoch, position) starts from."""
    params = trial["params"]
    before = previous_position(epoch, position, region.shards)
    if before is None:
        model = build_trial_model(region, params, trial["seed"], meta)
        return model, make_trial_optimizer(region, params, model)
    model, checkpoint = model_at(rt, region, study, trial, *before, meta)
    optimizer = make_trial_optimizer(region, params, model)
    optimizer.load_state_dict(checkpoint.optimizer)
    return model, optimizer


def model_at(rt: Runtime, region: RegionConfig, study: dict[str, Any], trial: dict[str, Any],
             epoch: int, position: int, meta: dict[str, Any]
             ) -> tuple[torch.nn.Module, Checkpoint]:
    """The trial's model as hop (epoch, position) left it, and that hop's checkpoint.

    The model is built without memory (on the meta device) and takes the
    checkpoint's tensors as its own: no initialisation that the load would
    overwrite, no copy.
    """
    checkpoint = load_checkpoint(rt.store, checkpoint_key(study["id"], trial["id"], epoch,
                                                          position))
    with torch.device("meta"):
        model = get_family(region).build(trial["params"], meta)
    model.load_state_dict(checkpoint.model, assign=True)
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        # a tensor the state_dict does not carry (a non-persistent buffer): build for real
        model = build_trial_model(region, trial["params"], trial["seed"], meta)
        model.load_state_dict(checkpoint.model)
    return model, checkpoint


def run_hop(rt: Runtime, trial_id: int, epoch: int, position: int,
            on_progress: Callable[[HopReport], None] | None = None) -> HopReport:
    """Run one delivery of hop (trial, epoch, position) on this worker."""
    from tasks._workflow import end_of_epoch

    db, store = rt.db, rt.store
    trial = db.trial(trial_id)
    study = db.study(trial["study_id"])
    record = db.epoch(trial_id, epoch)
    if record is None:
        raise LookupError(f"trial {trial_id} has no epoch {epoch} recorded")
    order = record["visit_order"]
    shard = order[position]
    report = HopReport(trial_id, epoch, position, shard)
    if trial["state"] not in ACTIVE_STATES:
        report.skipped = f"trial is {trial['state']}"
        return report
    region = region_of(study)
    hop = db.begin_hop(trial_id, epoch, position, shard, rt.worker)
    if hop["interrupted"] > region.max_redeliveries:
        reason = (f"hop epoch {epoch} position {position} (shard {shard}) was interrupted "
                  f"{hop['interrupted']} times (max_redeliveries={region.max_redeliveries}); "
                  f"last on worker {hop['worker']}")
        db.end_trial(trial_id, "failed", failure=reason)
        report.skipped = reason
        report.dispatch.append(tune_step_dispatch(study["id"]))
        return report

    key = checkpoint_key(study["id"], trial_id, epoch, position)
    manifest = study_manifest(rt, study)
    model: torch.nn.Module | None = None
    if hop["state"] == "done":
        report.skipped = "output checkpoint exists"
        report.samples, report.loss = hop["samples"], hop["loss"]
    elif store.exists(key):  # trained and saved, but its worker died before recording it
        report.skipped = "output checkpoint exists"
        done = load_checkpoint(store, key)
        report.samples, report.loss = done.samples, done.loss
    else:
        started = time.perf_counter()
        model, optimizer = restore_trial(rt, region, study, trial, epoch, position,
                                         manifest["meta"])
        data = rt.shard(manifest, shard)
        report.load_seconds = time.perf_counter() - started
        trained = train_pass(region, model, optimizer, data, seed=trial["seed"], epoch=epoch,
                             shard=shard)
        report.trained = True
        report.samples, report.loss, report.train_seconds = (
            trained.samples, trained.loss, trained.seconds)
        started = time.perf_counter()
        save_checkpoint(store, key, Checkpoint(model=model.state_dict(),
                                               optimizer=optimizer.state_dict(),
                                               rng=torch.get_rng_state(),
                                               samples=trained.samples, loss=trained.loss))
        report.save_seconds = time.perf_counter() - started
    if on_progress is not None:
        on_progress(report)

    last = position + 1 == len(order)
    next_hop = None if last else (position + 1, order[position + 1])
    figures = {"samples": report.samples, "loss": report.loss}
    if report.trained:
        figures.update(train_seconds=report.train_seconds, load_seconds=report.load_seconds,
                       save_seconds=report.save_seconds)
    queued = db.finish_hop(trial_id, epoch, position, next_hop=next_hop, **figures)
    if next_hop is not None:
        if queued:
            report.dispatch.append(
                hop_dispatch(region.name, study["id"], trial_id, epoch, *next_hop))
        return report
    report.dispatch.extend(end_of_epoch(rt, region, study, trial, epoch, model, manifest))
    return report
