"""The tuner: search spaces, batch proposals from scikit-optimize, warm starts, ASHA pruning,
and the study database.

Names load on first use: scikit-optimize is slow to import, and the command
line should not pay for it on every call.
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "AshaPruner": "hoptune.tuner._pruner",
    "CategoricalDim": "hoptune.tuner._space",
    "Dimension": "hoptune.tuner._space",
    "IntDim": "hoptune.tuner._space",
    "RealDim": "hoptune.tuner._space",
    "Space": "hoptune.tuner._space",
    "parse_space": "hoptune.tuner._space",
    "default_initial_points": "hoptune.tuner._optimizer",
    "propose": "hoptune.tuner._optimizer",
    "epoch_fidelity": "hoptune.tuner._optimizer",
    "select_prior": "hoptune.tuner._warmstart",
    "study_prior": "hoptune.tuner._warmstart",
    "CostKey": "hoptune.tuner._costs",
    "HopCost": "hoptune.tuner._costs",
    "HopObservation": "hoptune.tuner._costs",
    "fit_costs": "hoptune.tuner._costs",
    "fit_hop_cost": "hoptune.tuner._costs",
    "best_trial": "hoptune.tuner._selection",
    "selected_epoch": "hoptune.tuner._selection",
    "told": "hoptune.tuner._selection",
    "told_with_epochs": "hoptune.tuner._selection",
    "trial_metric": "hoptune.tuner._selection",
    "ShardLoads": "hoptune.tuner._placement",
    "cohort_size": "hoptune.tuner._placement",
    "first_shards": "hoptune.tuner._placement",
    "idle_owners": "hoptune.tuner._placement",
    "next_shard": "hoptune.tuner._placement",
    "placed_order": "hoptune.tuner._placement",
    "ACTIVE_STATES": "hoptune.tuner._schema",
    "TRIAL_STATES": "hoptune.tuner._schema",
    "metadata": "hoptune.tuner._schema",
    "utcnow": "hoptune.tuner._schema",
    "StudyDB": "hoptune.tuner._studydb",
    "HopClaim": "hoptune.tuner._hop_records",
    "HopRecords": "hoptune.tuner._hop_records",
    "EpochRow": "hoptune.tuner._rows",
    "HopPosition": "hoptune.tuner._rows",
    "HopRow": "hoptune.tuner._rows",
    "StudyRow": "hoptune.tuner._rows",
    "TrialRow": "hoptune.tuner._rows",
    "WaitingHop": "hoptune.tuner._rows",
    "NightlyRecords": "hoptune.tuner._nightly_records",
    "Locks": "hoptune.tuner._locks",
    "WorkerRecords": "hoptune.tuner._workers",
    "Revisions": "hoptune.tuner._revisions",
    "schema_revisions": "hoptune.tuner._revisions",
    "upgrade_schema": "hoptune.tuner._revisions",
    "upgrade_schema_sql": "hoptune.tuner._revisions",
    "write_report": "hoptune.tuner._report",
    "Predictor": "hoptune.tuner._predictor",
    "load_predictor": "hoptune.tuner._predictor",
    "read_predictor": "hoptune.tuner._predictor",
    "champion_card": "hoptune.tuner._registry",
    "clean_staging": "hoptune.tuner._registry",
    "champion_version": "hoptune.tuner._registry",
    "export_champion": "hoptune.tuner._registry",
    "load_weights": "hoptune.tuner._registry",
    "next_version": "hoptune.tuner._registry",
    "set_champion": "hoptune.tuner._registry",
    "versions": "hoptune.tuner._registry",
    "write_version": "hoptune.tuner._registry",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
