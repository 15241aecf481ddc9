"""``hoptune beat``: celery beat with the nightly schedule and the sweeper; run exactly one.

Prints the schedule and the next nightly run first; ``--dry-run`` stops there.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hoptune.core import Settings
from hoptune.tasks.cli._args import read_config
from hoptune.tasks.cli._db import require_schema

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune beat``."""
    parser.add_argument("--loglevel", default="INFO")
    parser.add_argument("--schedule-file", type=Path, default=None,
                        help="where beat keeps its last run times (default: $HOPTUNE_HOME)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the schedule and the next nightly run, then exit")


def run(args: argparse.Namespace) -> int:
    """Print the schedule, then run beat until it is stopped (unless ``--dry-run``)."""
    from datetime import UTC, datetime

    from hoptune.tasks.study import beat_schedule, next_nightly

    settings = Settings.from_env()
    config = read_config(args)
    schedule = beat_schedule(config)
    due = next_nightly(config, datetime.now(UTC))
    sweep_every = schedule["hoptune-sweep"]["schedule"]
    print(f"nightly: cron {config.schedule.cron!r} in {config.schedule.timezone}; "
          f"next run {due:%Y-%m-%d %H:%M %Z}; sweeper every {sweep_every:.0f} s")
    if args.dry_run:
        return 0
    require_schema(settings)
    from hoptune.tasks import app

    app.conf.beat_schedule = schedule
    app.conf.timezone = config.schedule.timezone
    settings.home.mkdir(parents=True, exist_ok=True)
    schedule_file = args.schedule_file or settings.home / "celerybeat-schedule"
    app.start(["beat", "-l", args.loglevel, "-s", str(schedule_file)])
    return 0
