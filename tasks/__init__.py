"""hoptune's Celery side: the app, the hop and workflow tasks, launchers and the CLI.

``celery -A tasks worker`` / ``celery -A tasks flower`` find the app here.
"""

from __future__ import annotations

from tasks._app import app, send
from tasks._checkpoint import Checkpoint, checkpoint_key, load_checkpoint, save_checkpoint
from tasks._hop import Dispatch, HopReport, hop_queue, run_hop
from tasks._replay import replay_trial
from tasks._runtime import Runtime, parse_shard_spec, runtime
from tasks._sweeper import sweep
from tasks._visit_order import choose_visit_order
from tasks._workflow import create_study, end_of_epoch, tune_step

__all__ = [
    "app",
    "send",
    "Checkpoint",
    "checkpoint_key",
    "load_checkpoint",
    "save_checkpoint",
    "Dispatch",
    "HopReport",
    "hop_queue",
    "run_hop",
    "replay_trial",
    "Runtime",
    "parse_shard_spec",
    "runtime",
    "sweep",
    "choose_visit_order",
    "create_study",
    "end_of_epoch",
    "tune_step",
]
