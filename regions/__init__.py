"""Regions: configuration, data validation and sharding, model families, demo data.

A region is an independent modelling unit with its own data, model family,
search space, budget and schedule. This package reads the configuration
(``load_config``), turns a region's table into K shards and a validation set in
the store (``ingest``), hands them to training as tensors (``load_shard``,
``load_validation``, ``iter_batches``) and builds and scores the region's models
(``get_family``).
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "Config": "hoptune.regions._config",
    "load_config": "hoptune.regions._config",
    "display_path": "hoptune.regions._config",
    "OPTIMIZER_PARAMS": "hoptune.regions._families",
    "Family": "hoptune.regions._families",
    "get_family": "hoptune.regions._families",
    "FusedModel": "hoptune.regions._fusion",
    "Unfusable": "hoptune.regions._fusion",
    "cohort_key": "hoptune.regions._fusion",
    "fuse": "hoptune.regions._fusion",
    "log_unfused": "hoptune.regions._fusion",
    "Objective": "hoptune.regions._families",
    "objective_of": "hoptune.regions._families",
    "check_table": "hoptune.regions._data",
    "read_rows": "hoptune.regions._data",
    "UNKNOWN": "hoptune.regions._encode",
    "decode_validation": "hoptune.regions._encode",
    "encode_rows": "hoptune.regions._encode",
    "IngestResult": "hoptune.regions._ingest",
    "ingest": "hoptune.regions._ingest",
    "load_id_maps": "hoptune.regions._ingest",
    "manifest_key": "hoptune.regions._ingest",
    "read_manifest": "hoptune.regions._ingest",
    "Pruner": "hoptune.regions._schema",
    "RatingColumns": "hoptune.regions._schema",
    "RegionConfig": "hoptune.regions._schema",
    "Schedule": "hoptune.regions._schema",
    "TabularColumns": "hoptune.regions._schema",
    "TRAINING_PARAMS": "hoptune.regions._trial_settings",
    "TrialSettings": "hoptune.regions._trial_settings",
    "check_training_space": "hoptune.regions._trial_settings",
    "trial_settings": "hoptune.regions._trial_settings",
    "write_demo": "hoptune.regions._synthetic",
    "write_ratings": "hoptune.regions._synthetic",
    "iter_batches": "hoptune.regions._tensors",
    "iter_stacked_batches": "hoptune.regions._tensors",
    "load_shard": "hoptune.regions._tensors",
    "load_validation": "hoptune.regions._tensors",
}

__all__ = [
    "UNKNOWN",
    "check_table",
    "decode_validation",
    "encode_rows",
    "read_rows",
    "Config",
    "Family",
    "FusedModel",
    "IngestResult",
    "OPTIMIZER_PARAMS",
    "Objective",
    "Pruner",
    "RatingColumns",
    "RegionConfig",
    "Schedule",
    "TabularColumns",
    "Unfusable",
    "cohort_key",
    "TRAINING_PARAMS",
    "TrialSettings",
    "check_training_space",
    "display_path",
    "fuse",
    "get_family",
    "ingest",
    "iter_stacked_batches",
    "iter_batches",
    "load_config",
    "load_id_maps",
    "load_shard",
    "load_validation",
    "log_unfused",
    "manifest_key",
    "objective_of",
    "read_manifest",
    "trial_settings",
    "write_demo",
    "write_ratings",
]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
