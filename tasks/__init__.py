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
    "Checkpoint": "hoptune.tasks.worker",
    "checkpoint_key": "hoptune.tasks.worker",
    "load_checkpoint": "hoptune.tasks.worker",
    "save_checkpoint": "hoptune.tasks.worker",
    "Dispatch": "hoptune.tasks.worker",
    "HopReport": "hoptune.tasks.hop",
    "hop_queue": "hoptune.tasks.worker",
    "run_hop": "hoptune.tasks.hop",
    "replay_trial": "hoptune.tasks.hop",
    "run_inline": "hoptune.tasks.study",
    "Runtime": "hoptune.tasks.worker",
    "parse_shard_spec": "hoptune.tasks.worker",
    "runtime": "hoptune.tasks.worker",
    "sweep": "hoptune.tasks.study",
    "choose_visit_order": "hoptune.tasks.hop",
    "create_study": "hoptune.tasks.study",
    "end_of_epoch": "hoptune.tasks.study",
    "hand_on": "hoptune.tasks.study",
    "tune_step": "hoptune.tasks.study",
}

__all__ = list(_NAMES)


__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
