"""The ``hoptune`` command line.

Every failure a user can cause is a ``HoptuneError``: printed as one line
(``hoptune: error: …``) with exit status 2. Anything else is a bug and keeps
its traceback.

Each command lives in its own module, named after it (``hoptune tune`` in
``_tune.py``; ``hoptune plan``, whose planner is ``hoptune.tasks.plan``, in
``_plan_command.py``): ``add_arguments(parser)`` adds its options and
``run(args)`` runs it and returns its exit status. ``COMMANDS`` below lists
them in the order ``hoptune --help`` shows. The command modules import only
the standard library and ``hoptune.core`` at module level, so ``--help`` and
argument errors are instant; what a command needs it imports in ``run``.
Arguments several commands share are in ``_args.py``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from hoptune.core import HoptuneError, lazy_names
from hoptune.tasks.cli import (
    _beat,
    _dashboard,
    _db,
    _demo,
    _doctor,
    _export,
    _flower,
    _gc,
    _ingest,
    _metrics,
    _models,
    _nightly,
    _plan_command,
    _predict,
    _report,
    _status,
    _sweep,
    _tune,
    _up,
    _worker,
)

_NAMES = {
    "calibrate": "hoptune.tasks.cli._calibrate",
    "LocalCluster": "hoptune.tasks.cli._cluster",
    "assign_shards": "hoptune.tasks.cli._cluster",
    "local_cluster": "hoptune.tasks.cli._cluster",
    "follow": "hoptune.tasks.cli._follow",
    "settled": "hoptune.tasks.cli._follow",
    "start_studies": "hoptune.tasks.cli._follow",
}

__all__ = ["main", "build_parser", "run", *_NAMES]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())


class Command(NamedTuple):
    """A subcommand: the module with its ``add_arguments`` and ``run``, and its one-line help."""

    module: ModuleType
    help: str


COMMANDS: dict[str, Command] = {
    "ingest": Command(_ingest, "validate, split and shard a region's data into the store"),
    "worker": Command(_worker, "run a Celery worker that owns some shards"),
    "up": Command(_up, "start the embedded Redis and N local workers, until Ctrl-C"),
    "demo": Command(_demo, "synthetic data for 3 regions, tuned by hopping, in a table"),
    "tune": Command(_tune, "tune a region: start its study, or resume the running one"),
    "nightly": Command(_nightly, "the nightly retraining, by hand: re-ingest, tune warm, "
                                 "promote if better, for every region"),
    "beat": Command(_beat, "run celery beat with the nightly schedule (exactly one)"),
    "models": Command(_models, "the model registry: every promoted version"),
    "export": Command(_export, "write a region's champion for serving"),
    "predict": Command(_predict, "predict rows of a CSV or Parquet file with a region's "
                                 "champion"),
    "report": Command(_report, "an HTML report with plots of a region's latest study"),
    "flower": Command(_flower, "Flower for the cluster, behind HTTP basic auth"),
    "dashboard": Command(_dashboard, "a live web dashboard of the night, its studies, the "
                                     "cluster and the registry"),
    "status": Command(_status, "studies of every region, and the workers that answer"),
    "doctor": Command(_doctor, "check this host: versions, GPUs, kernel self-tests, broker, "
                               "database, store (exit 1 if one is not usable)"),
    "plan": Command(_plan_command, "predict a study's or a night's wall time on N workers, "
                                   "or the fewest workers that meet a deadline"),
    "sweep": Command(_sweep, "send again, once, whatever work a fault may have lost"),
    "metrics": Command(_metrics, "serve Prometheus metrics for an autoscaler: queue depths, "
                                 "running hops, busy workers, trials by state, the predicted "
                                 "finish and the workers wanted"),
    "gc": Command(_gc, "remove the checkpoints finished studies no longer need"),
    "db": Command(_db, "the study database's schema: its revision, the upgrade"),
}


def _global_options(parser: argparse.ArgumentParser, default: object = None) -> None:
    """The options every command takes, before or after its name.

    On the main parser they have their defaults; on each command's parser they
    default to ``argparse.SUPPRESS``, so a value given after the command
    overrides one given before it and an absent one leaves it alone.
    """
    unset = argparse.SUPPRESS if default is argparse.SUPPRESS else None
    parser.add_argument("--config", type=Path, default=unset, metavar="FILE",
                        help="region configuration (default: $HOPTUNE_CONFIG, ./hoptune.toml, "
                             "else the one `hoptune demo` wrote in HOPTUNE_HOME)")
    parser.add_argument("--home", type=Path, default=unset, metavar="DIR",
                        help="HOPTUNE_HOME for this command and the workers it starts "
                             "(default: $HOPTUNE_HOME or ./.hoptune)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=argparse.SUPPRESS if unset else False,
                        help="log at INFO level")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command: the global options, then each command's own.

    The global options (``--config``, ``--home``, ``-v``) stand before or after
    the command's name: ``hoptune tune north --config x.toml`` and ``hoptune
    --config x.toml tune north`` are the same command.
    """
    parser = argparse.ArgumentParser(
        prog="hoptune",
        description="Tune and retrain one model per region by model hopping on Celery workers.")
    _global_options(parser)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        command.module.add_arguments(sub.add_parser(name, help=command.help, parents=[common]))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the command; its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.home is not None:
        # read by Settings.from_env in this process, and inherited by the workers it starts
        os.environ["HOPTUNE_HOME"] = str(args.home.expanduser().absolute())
    try:
        return int(COMMANDS[args.command].module.run(args) or 0)
    except HoptuneError as exc:
        print(f"hoptune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hoptune: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The ``hoptune`` command: ``main``, then the process ends at once with its status.

    Everything a command does is done when ``main`` returns: its workers and
    Redis stopped, its rows committed, its output written. Python's teardown
    of the modules a command imports (Celery, SQLAlchemy, pandas, torch) then
    only frees memory the process is about to give back, and took 0.24 s
    after a study's last line on a 2-core host (0.46 s with torch imported),
    the command's user waiting. So the output and the log are flushed and the
    process exits without it.
    """
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more reaches it
            pass
    logging.shutdown()
    os._exit(status)
