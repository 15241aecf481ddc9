"""Raw rows to a model's input, through one ingest's id maps and feature scaling.

Ingest encodes the table it splits; serving and promotion encode rows a
model never saw, with the id maps and feature statistics of the ingest the
model was trained on (its registry card carries both). An id that model
never saw becomes index ``-1``: the built-in rating model predicts for it
from what it knows (global bias plus the other side's bias and nothing of
the unknown side); a factory's model must handle ``-1`` itself.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch

from hoptune.core import Store
from hoptune.regions._schema import RatingColumns, RegionConfig

__all__ = ["UNKNOWN", "decode_validation", "encode_rows"]

UNKNOWN = -1


def encode_rows(table: pd.DataFrame, region: RegionConfig, meta: Mapping[str, Any],
                ids: Mapping[str, Sequence[str]] | None) -> dict[str, torch.Tensor]:
    """The model input of ``table`` (checked rows with the region's column names).

    The target (``rating`` or ``y``) is included when its column is there.
    """
    columns = region.columns
    if isinstance(columns, RatingColumns):
        assert ids is not None, "a rating model has id maps"
        out = {"user": _indices(table[columns.user], ids["user"]),
               "item": _indices(table[columns.item], ids["item"])}
        if columns.rating in table.columns:
            out["rating"] = torch.from_numpy(table[columns.rating].to_numpy(np.float32, copy=True))
        return out
    features = table[list(columns.features)].to_numpy(np.float64)
    means = np.asarray(meta["feature_means"], dtype=np.float64)
    stds = np.asarray(meta["feature_stds"], dtype=np.float64)
    out = {"x": torch.from_numpy(np.ascontiguousarray(((features - means) / stds)
                                                      .astype(np.float32)))}
    if columns.label in table.columns:
        dtype = np.int64 if region.task == "classification" else np.float32
        # a copy: pandas may lend a read-only buffer, which torch must not share
        out["y"] = torch.from_numpy(table[columns.label].to_numpy(dtype, copy=True))
    return out


def decode_validation(store: Store, manifest: Mapping[str, Any], region: RegionConfig
                      ) -> pd.DataFrame:
    """The validation rows of an ingest as raw rows: its ids and unscaled features."""
    files = manifest["files"]
    frame = pq.read_table(io.BytesIO(store.read_bytes(files["validation"]))).to_pandas()
    columns = region.columns
    if isinstance(columns, RatingColumns):
        ids = store.read_json(files["ids"])
        return pd.DataFrame({
            columns.user: np.asarray(ids["user"], dtype=object)[frame[columns.user].to_numpy()],
            columns.item: np.asarray(ids["item"], dtype=object)[frame[columns.item].to_numpy()],
            columns.rating: frame[columns.rating].to_numpy(np.float64)})
    meta = manifest["meta"]
    scaled = frame[list(columns.features)].to_numpy(np.float64)
    raw = scaled * np.asarray(meta["feature_stds"]) + np.asarray(meta["feature_means"])
    out = pd.DataFrame(raw, columns=list(columns.features))
    out[columns.label] = frame[columns.label].to_numpy()
    return out


def _indices(values: pd.Series, known: Sequence[str]) -> torch.Tensor:
    index = pd.Index(known)
    return torch.from_numpy(index.get_indexer(values.astype(str)).astype(np.int64))
