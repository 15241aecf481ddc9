"""The live dashboard: the night, a study, the cluster and the registry in a browser.

``hoptune dashboard`` serves it. It reads the study database (never writes to
it), the broker's queue depths and the registry, and its pages poll their JSON
every few seconds, so they follow a running night without a reload. Basic auth
from settings, required wherever it listens beyond loopback.
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "Credentials": "hoptune.tasks.dashboard._auth",
    "credentials": "hoptune.tasks.dashboard._auth",
    "Dashboard": "hoptune.tasks.dashboard._app",
    "make_app": "hoptune.tasks.dashboard._app",
    "serve": "hoptune.tasks.dashboard._app",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
