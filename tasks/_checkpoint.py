"""Checkpoints: a trial's model, optimizer and RNG state after one hop.

Keyed by (study, trial, epoch, position in the visit order), so a hop knows
before it trains whether its output already exists. Serialised with
``torch.save`` into bytes and written to the store atomically; loaded with
``weights_only=True`` (tensors and plain containers only, never pickled code).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import torch

from regions import Store

__all__ = ["Checkpoint", "checkpoint_key", "previous_position", "save_checkpoint",
           "load_checkpoint"]


def checkpoint_key(study_id: int, trial_id: int, epoch: int, position: int) -> str:
    return f"checkpoints/study-{study_id}/trial-{trial_id}/e{epoch:04d}-p{position:04d}.pt"


def previous_position(epoch: int, position: int, shards: int) -> tuple[int, int] | None:
    """The (epoch, position) whose checkpoint a hop starts from; None for the very first hop."""
    if position > 0:
        return epoch, position - 1
    if epoch > 0:
        return epoch - 1, shards - 1
    return None


@dataclass
class Checkpoint:
    """What a hop hands to the next: weights, optimizer state, RNG state, and its figures."""

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    rng: torch.Tensor
    samples: int
    loss: float


def save_checkpoint(store: Store, key: str, checkpoint: Checkpoint) -> None:
    """Write the checkpoint atomically, streamed straight into the store."""
    payload = {
        "model": checkpoint.model,
        "optimizer": checkpoint.optimizer,
        "rng": checkpoint.rng,
        "samples": checkpoint.samples,
        "loss": checkpoint.loss,
    }
    store.write_with(key, lambda fh: torch.save(payload, fh))


def load_checkpoint(store: Store, key: str) -> Checkpoint:
    raw = torch.load(io.BytesIO(store.read_bytes(key)), map_location="cpu", weights_only=True)
    return Checkpoint(model=raw["model"], optimizer=raw["optimizer"], rng=raw["rng"],
                      samples=int(raw["samples"]), loss=float(raw["loss"]))
