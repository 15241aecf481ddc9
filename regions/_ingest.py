"""Ingest: validate a region's table, split it, and write its shards to the store.

Layout in the store, for region R and ingest hash H::

    shards/R/H/shard-0.parquet … shard-{K-1}.parquet   training rows, one file per shard
    shards/R/H/validation.parquet                       the validation rows
    shards/R/H/ids.json                                 rating tasks: index -> user/item id
    shards/R/manifest.json                              written last: points at H

The whole table is validated before anything is written, so bad data leaves no
new file. The manifest is replaced atomically and last, so readers see either
the previous ingest or the complete new one. H hashes the file's bytes and every
setting that changes what is written; the same data and settings again are a
no-op. Earlier ingests stay in the store: a study in flight keeps its shards.

A region with ``shards = "auto"`` has its K chosen here, once its rows are
read, by the ``choose`` the caller passes (the tasks layer's policy from the
measured costs, ``hoptune.tasks.plan.choose_shards``): the manifest records K
and the reason. The same data and settings again keep the K chosen then.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hoptune.core import DataError, Store, StoreError
from hoptune.regions._config import display_path
from hoptune.regions._data import read_table
from hoptune.regions._schema import RatingColumns, RegionConfig
from hoptune.regions._shards import split_rows, validation_size

__all__ = ["IngestResult", "ShardChooser", "ingest", "manifest_key", "read_manifest",
           "load_id_maps", "row_bytes"]

#: ``choose(training rows, bytes a row takes in memory, the data's meta) -> (K, reason)``
ShardChooser = Callable[[int, int, dict[str, Any]], tuple[int, str]]

_LAYOUT = 1  # bump when the files written here change meaning


@dataclass(frozen=True)
class IngestResult:
    """The region's current manifest and whether this ingest wrote a new one."""

    manifest: dict[str, Any]
    changed: bool


def manifest_key(region_name: str) -> str:
    return f"shards/{region_name}/manifest.json"


def ingest(region: RegionConfig, store: Store, choose: ShardChooser | None = None
           ) -> IngestResult:
    """Validate, split and write ``region``'s data unless the same ingest is already there.

    With ``shards = "auto"``, ``choose`` picks K from the training rows (without it: one
    shard per ``AUTO_ROWS_PER_SHARD`` rows, the rule from rows alone).
    """
    digest = _fingerprint(region)
    current = _current_manifest(store, region.name)
    if current is not None and current.get("hash") == digest and _complete(store, current):
        return IngestResult(manifest=current, changed=False)

    table = read_table(region)
    rows = len(table)
    training_rows = rows - validation_size(rows, region.validation_fraction)
    _check_rows(region, rows, training_rows, 1 if region.shards == "auto" else region.shards)
    whole = split_rows(table, region.seed, region.validation_fraction, 1)
    training = whole.shards[0]  # the training rows are the same whatever K is
    stored, meta, id_maps = _prepare(region, table, training)
    if region.shards == "auto":
        shards, reason = (choose or _rows_rule)(training_rows, row_bytes(region), meta)
        _check_rows(region, rows, training_rows, shards)
    else:
        shards, reason = region.shards, "set in the configuration"
    split = whole if shards == 1 else split_rows(table, region.seed,
                                                 region.validation_fraction, shards)

    folder = f"shards/{region.name}/{digest}"
    files: dict[str, Any] = {
        "shards": [f"{folder}/shard-{k}.parquet" for k in range(shards)],
        "validation": f"{folder}/validation.parquet",
    }
    for key, positions in zip(files["shards"], split.shards, strict=True):
        store.write_bytes(key, _parquet(stored.iloc[positions]))
    store.write_bytes(files["validation"], _parquet(stored.iloc[split.validation]))
    if id_maps is not None:
        files["ids"] = f"{folder}/ids.json"
        store.write_json(files["ids"], id_maps)

    manifest = {
        "region": region.name,
        "hash": digest,
        "source": str(region.data),
        "format": region.format,
        "task": region.task,
        "columns": region.columns.model_dump(mode="json"),
        "shards": shards,
        "shards_reason": reason,
        "rows": [len(p) for p in split.shards],
        "validation_rows": len(split.validation),
        "seed": region.seed,
        "validation_fraction": region.validation_fraction,
        "files": files,
        "meta": meta,
        "ingested_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    store.write_json(manifest_key(region.name), manifest)
    return IngestResult(manifest=manifest, changed=True)


def read_manifest(store: Store, region_name: str) -> dict[str, Any]:
    """The manifest of the region's latest ingest; StoreError if it was never ingested."""
    key = manifest_key(region_name)
    if not store.exists(key):
        raise StoreError(
            f"store {store.url}: region {region_name!r} has no shards; "
            f"run `hoptune ingest {region_name}`"
        )
    return store.read_json(key)


def load_id_maps(store: Store, manifest: dict[str, Any]) -> dict[str, list[str]]:
    """For a rating region: ``{"user": [...], "item": [...]}``, the id at each index."""
    if "ids" not in manifest["files"]:
        raise StoreError(f"region {manifest['region']!r}: task {manifest['task']!r} has no ids")
    return store.read_json(manifest["files"]["ids"])


def _check_rows(region: RegionConfig, rows: int, training_rows: int, shards: int) -> None:
    if training_rows < shards:
        raise DataError(
            f"{display_path(region.data)}: {rows} data rows are too few for "
            f"{shards} shards and a validation set"
        )


AUTO_ROWS_PER_SHARD = 2_000_000  # the rule from rows alone (docs/operations/planning.md)


def _rows_rule(rows: int, _row_bytes: int, _meta: dict[str, Any]) -> tuple[int, str]:
    k = max(1, -(-rows // AUTO_ROWS_PER_SHARD))
    return k, (f"auto: {rows} rows, one shard per {AUTO_ROWS_PER_SHARD:,} rows "
               "(no recorded costs)")


def row_bytes(region: RegionConfig) -> int:
    """The bytes one stored row takes in memory: ids as int64, features and ratings float32,
    a class label int64."""
    if isinstance(region.columns, RatingColumns):
        return 8 + 8 + 4
    return 4 * len(region.columns.features) + (8 if region.task == "classification" else 4)


def _fingerprint(region: RegionConfig) -> str:
    """Hash of the data file's bytes and of every setting that changes what is written."""
    digest = hashlib.sha256()
    settings = {
        "layout": _LAYOUT,
        "format": region.format,
        "task": region.task,
        "columns": region.columns.model_dump(mode="json"),
        "rating_range": region.rating_range,
        "shards": region.shards,
        "seed": region.seed,
        "validation_fraction": region.validation_fraction,
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    try:
        with open(region.data, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise DataError(f"{display_path(region.data)}: no such file") from None
    except OSError as exc:
        raise DataError(f"{display_path(region.data)}: cannot read: {exc.strerror}") from None
    return digest.hexdigest()[:16]


def _current_manifest(store: Store, region_name: str) -> dict[str, Any] | None:
    try:
        return store.read_json(manifest_key(region_name))
    except (StoreError, ValueError):
        return None


def _complete(store: Store, manifest: dict[str, Any]) -> bool:
    files = manifest.get("files", {})
    keys = [*files.get("shards", []), files.get("validation"), files.get("ids")]
    return all(store.exists(key) for key in keys if key is not None)


def _prepare(
    region: RegionConfig, table: pd.DataFrame, training: np.ndarray
) -> tuple[pd.DataFrame, dict[str, Any], dict[str, list[str]] | None]:
    """The rows as stored (ids as indices, features standardised), the meta, the id maps."""
    columns = region.columns
    if isinstance(columns, RatingColumns):
        users, user_index = np.unique(
            table[columns.user].to_numpy(dtype=object), return_inverse=True
        )
        items, item_index = np.unique(
            table[columns.item].to_numpy(dtype=object), return_inverse=True
        )
        ratings = table[columns.rating].to_numpy()
        stored = pd.DataFrame(
            {
                columns.user: user_index.astype(np.int64),
                columns.item: item_index.astype(np.int64),
                columns.rating: ratings.astype(np.float32),
            }
        )
        meta = {
            "n_users": len(users),
            "n_items": len(items),
            "rating_range": list(region.rating_range),
            "rating_mean": float(ratings[training].mean()),
        }
        return stored, meta, {"user": users.tolist(), "item": items.tolist()}

    features = table[list(columns.features)].to_numpy()
    means = features[training].mean(axis=0)
    stds = features[training].std(axis=0)
    stds = np.where(stds > 1e-12, stds, 1.0)
    stored = pd.DataFrame(((features - means) / stds).astype(np.float32), columns=columns.features)
    label = table[columns.label].to_numpy()
    meta = {
        "n_features": len(columns.features),
        "feature_means": means.tolist(),
        "feature_stds": stds.tolist(),
    }
    if region.task == "classification":
        stored[columns.label] = label.astype(np.int64)
        meta["n_classes"] = int(label.max()) + 1
    else:
        stored[columns.label] = label.astype(np.float32)
        meta["label_mean"] = float(label[training].mean())
    return stored, meta, None


def _parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buffer)
    return buffer.getvalue()
