"""The deterministic split of a region's rows into a validation set and K shards.

Each row gets a 64-bit hash of its (converted) content keyed by the region's
seed. Rows are ranked by that hash (file position breaks ties between equal
rows): the first ``round(n * validation_fraction)`` rows (at least one) are the
validation set, and the training rows are dealt round-robin into the K shards,
so shard sizes differ by at most one. The result depends only on the table's
content, the seed, the fraction and K: re-ordering the file changes which rows a
shard holds only through the tie-break between identical rows, and a row keeps
its side of the split as long as the seed does not change.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["Split", "split_rows", "validation_size"]


@dataclass(frozen=True)
class Split:
    """Row positions (0-based, ascending) of the validation set and of each shard."""

    validation: np.ndarray
    shards: tuple[np.ndarray, ...]


def validation_size(rows: int, validation_fraction: float) -> int:
    """How many of ``rows`` rows go to validation: the rounded fraction, at least one."""
    return max(1, round(rows * validation_fraction))


def split_rows(table: pd.DataFrame, seed: int, validation_fraction: float, shards: int) -> Split:
    """Split ``table``'s rows; needs more rows than ``shards`` plus the validation set."""
    rows = len(table)
    held_out = validation_size(rows, validation_fraction)
    if rows - held_out < shards:
        raise ValueError(f"{rows} rows cannot fill {shards} shards and a validation set")
    keys = pd.util.hash_pandas_object(table, index=False, hash_key=_hash_key(seed)).to_numpy()
    ranked = np.lexsort((np.arange(rows), keys))
    training = ranked[held_out:]
    return Split(
        validation=np.sort(ranked[:held_out]),
        shards=tuple(np.sort(training[k::shards]) for k in range(shards)),
    )


def _hash_key(seed: int) -> str:
    """The 16-character key pandas' row hash takes, derived from the region's seed."""
    return hashlib.sha256(f"hoptune split {seed}".encode()).hexdigest()[:16]
