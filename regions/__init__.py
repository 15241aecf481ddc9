"""Regions: configuration, data validation and sharding, model families, demo data.

A region is an independent modelling unit with its own data, model family,
search space, budget and schedule. This package reads the configuration
(``load_config``), turns a region's table into K shards and a validation set in
the store (``ingest``), hands them to training as tensors (``load_shard``,
``load_validation``, ``iter_batches``) and builds and scores the region's models
(``get_family``).
"""

from __future__ import annotations

from regions._config import Config, load_config
from regions._errors import (
    ConfigError,
    DataError,
    HoptuneError,
    StoreError,
    StudyError,
    TrialFailed,
)
from regions._families import OPTIMIZER_PARAMS, Family, get_family
from regions._ingest import IngestResult, ingest, load_id_maps, manifest_key, read_manifest
from regions._schema import Pruner, RatingColumns, RegionConfig, Schedule, TabularColumns
from regions._settings import Settings
from regions._store import Store
from regions._synthetic import write_demo, write_ratings
from regions._tensors import iter_batches, load_shard, load_validation

__all__ = [
    "Config",
    "ConfigError",
    "DataError",
    "Family",
    "HoptuneError",
    "IngestResult",
    "OPTIMIZER_PARAMS",
    "Pruner",
    "RatingColumns",
    "RegionConfig",
    "Schedule",
    "Settings",
    "Store",
    "StoreError",
    "StudyError",
    "TabularColumns",
    "TrialFailed",
    "get_family",
    "ingest",
    "iter_batches",
    "load_config",
    "load_id_maps",
    "load_shard",
    "load_validation",
    "manifest_key",
    "read_manifest",
    "write_demo",
    "write_ratings",
]
