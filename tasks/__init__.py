"""hoptune's Celery side: the app, the hop and workflow tasks, launchers and the CLI.

``celery -A hoptune.tasks worker`` / ``celery -A hoptune.tasks flower`` find the app here. The
names below load on first use, so the command line starts without importing
torch or the optimizer until a command needs them.
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "app": "hoptune.tasks._app",
    "send": "hoptune.tasks._app",
    "Checkpoint": "hoptune.tasks._checkpoint",
    "checkpoint_key": "hoptune.tasks._checkpoint",
    "load_checkpoint": "hoptune.tasks._checkpoint",
    "save_checkpoint": "hoptune.tasks._checkpoint",
    "Dispatch": "hoptune.tasks._messages",
    "HopReport": "hoptune.tasks._hop",
    "hop_queue": "hoptune.tasks._messages",
    "run_hop": "hoptune.tasks._hop",
    "replay_trial": "hoptune.tasks._replay",
    "run_inline": "hoptune.tasks._inline",
    "Runtime": "hoptune.tasks._runtime",
    "parse_shard_spec": "hoptune.tasks._runtime",
    "runtime": "hoptune.tasks._runtime",
    "sweep": "hoptune.tasks._sweeper",
    "choose_visit_order": "hoptune.tasks._visit_order",
    "create_study": "hoptune.tasks._study",
    "end_of_epoch": "hoptune.tasks._workflow",
    "hand_on": "hoptune.tasks._workflow",
    "tune_step": "hoptune.tasks._workflow",
}

__all__ = list(_NAMES)


__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
