"""The study workflow: from recording a study to promoting its best trial.

Recording a study, filling its trial slots (``tune_step``), handing a hop or a
cohort on (a hop whose shard this worker owns runs here next: ``go_on_here``),
ending an epoch (validation, pruning), promotion, the nightly run with its
lock and schedule, the sweeper that re-sends lost work, checkpoint retention,
and running messages in this process (``run_inline``).
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "go_on_here": "hoptune.tasks.study._chain",
    "collect": "hoptune.tasks.study._gc",
    "run_inline": "hoptune.tasks.study._inline",
    "begin_nightly": "hoptune.tasks.study._nightly",
    "cancel_nightly": "hoptune.tasks.study._nightly",
    "start_nightly": "hoptune.tasks.study._nightly",
    "promote_study": "hoptune.tasks.study._promotion",
    "beat_schedule": "hoptune.tasks.study._schedule",
    "next_nightly": "hoptune.tasks.study._schedule",
    "create_study": "hoptune.tasks.study._study",
    "queue_lengths": "hoptune.tasks.study._sweeper",
    "sweep": "hoptune.tasks.study._sweeper",
    "check_region": "hoptune.tasks.study._validate",
    "end_of_epoch": "hoptune.tasks.study._workflow",
    "hand_on": "hoptune.tasks.study._workflow",
    "hand_on_cohort": "hoptune.tasks.study._workflow",
    "tune_step": "hoptune.tasks.study._workflow",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
