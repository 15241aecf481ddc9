"""What an operator reads about a running cluster.

``hoptune status``'s health sections (failures, workers, shards, dead letters),
the Prometheus collector behind ``hoptune metrics``, and ``hoptune doctor``'s
checks of a host.
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "diagnose": "hoptune.tasks.monitor._doctor",
    "render": "hoptune.tasks.monitor._doctor",
    "busy_shares": "hoptune.tasks.monitor._metrics",
    "start_metrics": "hoptune.tasks.monitor._metrics",
    "health_sections": "hoptune.tasks.monitor._status",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
