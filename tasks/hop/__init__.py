"""Hops: a trial trained once over one shard, alone or in a cohort, then reported.

The checks a hop message passes against the study database and the worker's
shards before its claim, the claim, load, training pass, checkpoint and report
of a hop (``run_hop``), the cohort pass that trains several trials as one fused
model (``run_cohort_hop``), which hops travel together, the visit order, the
seeds that make a trial replayable, and the replay itself. What a hop hands on is the
study workflow's decision (``hoptune.tasks.study``).
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "cohort_of": "hoptune.tasks.hop._cohort_forming",
    "form_cohorts": "hoptune.tasks.hop._cohort_forming",
    "fuse_size": "hoptune.tasks.hop._cohort_forming",
    "run_cohort_hop": "hoptune.tasks.hop._cohort_hop",
    "Member": "hoptune.tasks.hop._cohort_pass",
    "train_cohort_pass": "hoptune.tasks.hop._cohort_pass",
    "GRAPHS_VARIABLE": "hoptune.tasks.hop._steps",
    "graphs_mode": "hoptune.tasks.hop._steps",
    "EpochEnd": "hoptune.tasks.hop._delivery",
    "HopReport": "hoptune.tasks.hop._delivery",
    "model_at": "hoptune.tasks.hop._hop",
    "rewind": "hoptune.tasks.hop._hop",
    "run_hop": "hoptune.tasks.hop._hop",
    "started_owning": "hoptune.tasks.hop._admission",
    "wait_written": "hoptune.tasks.hop._hop",
    "replay_trial": "hoptune.tasks.hop._replay",
    "trial_seed": "hoptune.tasks.hop._seeds",
    "build_trial_model": "hoptune.tasks.hop._training",
    "make_trial_optimizer": "hoptune.tasks.hop._training",
    "train_pass": "hoptune.tasks.hop._training",
    "choose_visit_order": "hoptune.tasks.hop._visit_order",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
