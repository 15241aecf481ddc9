"""Planning: how long studies take on N workers, learnt from the recorded ones.

Hop costs from recorded hops, the gaps a study spends outside hops, the
discrete-event simulator that runs the cluster's own policies, the planner,
the nightly run's plan and the forecast of running studies.
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "recorded_observations": "hoptune.tasks.plan._costs",
    "trained_passes": "hoptune.tasks.plan._costs",
    "Forecast": "hoptune.tasks.plan._forecast",
    "ForecastCache": "hoptune.tasks.plan._forecast",
    "forecast": "hoptune.tasks.plan._forecast",
    "log_nightly_plan": "hoptune.tasks.plan._nightly",
    "Planner": "hoptune.tasks.plan._plan",
    "choose_shards": "hoptune.tasks.plan._shards",
    "MAX_OVERHEAD_SHARE": "hoptune.tasks.plan._shards",
    "MEMORY_SHARE": "hoptune.tasks.plan._shards",
    "ingest_region": "hoptune.tasks.plan._shards",
    "local_shards": "hoptune.tasks.plan._shards",
    "shard_chooser": "hoptune.tasks.plan._shards",
    "shard_line": "hoptune.tasks.plan._shards",
    "current_manifest": "hoptune.tasks.plan._shards",
    "known_shards": "hoptune.tasks.plan._shards",
    "live_workers": "hoptune.tasks.plan._shards",
    "worker_shards": "hoptune.tasks.plan._simulate",
    "format_plan": "hoptune.tasks.plan._plan",
    "workers_for": "hoptune.tasks.plan._plan",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
