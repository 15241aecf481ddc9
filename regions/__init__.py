"""Regions: configuration, data validation and sharding, model families, demo data.

A region is an independent modelling unit with its own data, model family,
search space, budget and schedule. This package reads the configuration
(``load_config``), turns a region's table into K shards and a validation set in
the store (``ingest``), hands them to training as tensors (``load_shard``,
``load_validation``, ``iter_batches``) and builds and scores the region's models
(``get_family``).
"""

from __future__ import annotations

from regions._lazy import lazy_names

_NAMES = {
    "Config": "regions._config",
    "load_config": "regions._config",
    "ConfigError": "regions._errors",
    "DataError": "regions._errors",
    "HoptuneError": "regions._errors",
    "StoreError": "regions._errors",
    "StudyError": "regions._errors",
    "OPTIMIZER_PARAMS": "regions._families",
    "Family": "regions._families",
    "get_family": "regions._families",
    "IngestResult": "regions._ingest",
    "ingest": "regions._ingest",
    "load_id_maps": "regions._ingest",
    "manifest_key": "regions._ingest",
    "read_manifest": "regions._ingest",
    "Pruner": "regions._schema",
    "RatingColumns": "regions._schema",
    "RegionConfig": "regions._schema",
    "Schedule": "regions._schema",
    "TabularColumns": "regions._schema",
    "Settings": "regions._settings",
    "Store": "regions._store",
    "write_demo": "regions._synthetic",
    "write_ratings": "regions._synthetic",
    "iter_batches": "regions._tensors",
    "load_shard": "regions._tensors",
    "load_validation": "regions._tensors",
}

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

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
