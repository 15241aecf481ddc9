"""hoptune's Celery side: the app, the hop and workflow tasks, launchers and the CLI.

``celery -A tasks worker`` / ``celery -A tasks flower`` find the app here. The
names below load on first use, so the command line starts without importing
torch or the optimizer until a command needs them.
"""

from __future__ import annotations

from regions._lazy import lazy_names

_NAMES = {
    "app": "tasks._app",
    "send": "tasks._app",
    "Checkpoint": "tasks._checkpoint",
    "checkpoint_key": "tasks._checkpoint",
    "load_checkpoint": "tasks._checkpoint",
    "save_checkpoint": "tasks._checkpoint",
    "Dispatch": "tasks._hop",
    "HopReport": "tasks._hop",
    "hop_queue": "tasks._hop",
    "run_hop": "tasks._hop",
    "replay_trial": "tasks._replay",
    "run_inline": "tasks._inline",
    "Runtime": "tasks._runtime",
    "parse_shard_spec": "tasks._runtime",
    "runtime": "tasks._runtime",
    "sweep": "tasks._sweeper",
    "choose_visit_order": "tasks._visit_order",
    "create_study": "tasks._workflow",
    "end_of_epoch": "tasks._workflow",
    "tune_step": "tasks._workflow",
}

__all__ = list(_NAMES)


__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
