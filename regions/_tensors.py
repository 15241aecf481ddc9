"""Shards and the validation set as tensors ready for training, and batches over them.

A rating region's data is ``{"user": int64, "item": int64, "rating": float32}``
(user and item as contiguous indices); a tabular region's is
``{"x": float32 [n, f] standardised, "y": float32}`` for regression or
``{"x": ..., "y": int64}`` for classification. Every model's ``forward`` takes
such a dict (or a batch of it).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

from hoptune.core import Store, StoreError

__all__ = ["batch_indices", "gather", "gather_stacked", "iter_batches", "iter_stacked_batches",
           "load_shard", "load_validation", "stacked_batch_indices"]


def load_shard(store: Store, manifest: dict[str, Any], k: int) -> dict[str, torch.Tensor]:
    """The training rows of shard ``k`` of the ingest that ``manifest`` describes."""
    keys = manifest["files"]["shards"]
    if not 0 <= k < len(keys):
        raise StoreError(
            f"region {manifest['region']!r}: no shard {k} (its ingest has {len(keys)} shards)"
        )
    return _load(store, manifest, keys[k])


def load_validation(store: Store, manifest: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The validation rows of the ingest that ``manifest`` describes."""
    return _load(store, manifest, manifest["files"]["validation"])


def _rows(data: dict[str, torch.Tensor], batch_size: int) -> tuple[int, torch.device]:
    """The rows of ``data`` (every tensor as long) and where they live; checks the arguments."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sizes = {len(tensor) for tensor in data.values()}
    if len(sizes) != 1:
        raise ValueError(f"tensors of different lengths: {sorted(sizes)}")
    (rows,) = sizes
    return rows, next(iter(data.values())).device


def iter_batches(
    data: dict[str, torch.Tensor], batch_size: int, generator: torch.Generator
) -> Iterator[dict[str, torch.Tensor]]:
    """One pass over ``data`` in an order drawn from ``generator`` (``torch.randperm``).

    The same data, batch size and generator state give the same batches; the last
    batch holds the remainder and may be smaller. The order is drawn on the CPU
    (the same on every device) and copied to the data's device once, so each
    batch is gathered where the data lives, with no copy from the host per batch.
    """
    for chosen in batch_indices(data, batch_size, generator):
        yield gather(data, chosen)


def batch_indices(
    data: dict[str, torch.Tensor], batch_size: int, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """The row indices of ``iter_batches``'s batches, on the data's device, in order."""
    rows, device = _rows(data, batch_size)
    order = torch.randperm(rows, generator=generator).to(device)
    for start in range(0, rows, batch_size):
        yield order[start : start + batch_size]


def gather(data: dict[str, torch.Tensor], chosen: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rows ``chosen`` (``batch_indices``) of every tensor of ``data``: one batch."""
    return {name: tensor[chosen] for name, tensor in data.items()}


def iter_stacked_batches(
    data: dict[str, torch.Tensor], batch_size: int, generators: list[torch.Generator]
) -> Iterator[dict[str, torch.Tensor]]:
    """``iter_batches`` for several trials at once: batch j holds, in row i, batch j of
    ``iter_batches(data, batch_size, generators[i])`` (the same rows, the same values).

    Each trial's order is drawn as there; every step gathers all the trials' rows
    of a tensor with one index operation instead of one per trial.
    """
    trials = len(generators)
    for chosen in stacked_batch_indices(data, batch_size, generators):
        yield gather_stacked(data, chosen, trials)


def stacked_batch_indices(
    data: dict[str, torch.Tensor], batch_size: int, generators: list[torch.Generator]
) -> Iterator[torch.Tensor]:
    """The row indices of ``iter_stacked_batches``'s batches: each one contiguous index,
    the trials' batches one after another."""
    rows, device = _rows(data, batch_size)
    orders = torch.stack([torch.randperm(rows, generator=g) for g in generators]).to(device)
    for start in range(0, rows, batch_size):
        yield orders[:, start : start + batch_size].reshape(-1)


def gather_stacked(data: dict[str, torch.Tensor], chosen: torch.Tensor, trials: int
                   ) -> dict[str, torch.Tensor]:
    """The rows ``chosen`` (``stacked_batch_indices``) of every tensor, one row per trial."""
    return {name: tensor.index_select(0, chosen).view(trials, -1, *tensor.shape[1:])
            for name, tensor in data.items()}


def _load(store: Store, manifest: dict[str, Any], key: str) -> dict[str, torch.Tensor]:
    table = pq.read_table(io.BytesIO(store.read_bytes(key)))
    columns = manifest["columns"]

    def column(name: str, dtype: np.dtype) -> np.ndarray:
        return np.array(table.column(name).to_numpy(), dtype=dtype)  # a writable copy

    if manifest["task"] == "rating":
        return {
            "user": torch.from_numpy(column(columns["user"], np.int64)),
            "item": torch.from_numpy(column(columns["item"], np.int64)),
            "rating": torch.from_numpy(column(columns["rating"], np.float32)),
        }
    x = np.stack([column(name, np.float32) for name in columns["features"]], axis=1)
    label = np.int64 if manifest["task"] == "classification" else np.float32
    return {
        "x": torch.from_numpy(np.ascontiguousarray(x)),
        "y": torch.from_numpy(column(columns["label"], label)),
    }
