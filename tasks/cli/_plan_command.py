"""``hoptune plan``: predict a study's or a night's wall time, or the workers a deadline needs.

``plan REGION --workers N`` (or ``--nightly`` for every region's study at
once) simulates the study on N workers with the hop costs learnt from the
recorded hops; ``--deadline`` prints the fewest workers that meet it instead. ``--calibrate``
first records the hop costs of a family this host class has none of
(``_calibrate.py``). The planner itself is ``hoptune.tasks.plan``; this module
is its command line only.
"""

from __future__ import annotations

import argparse
import sys

from hoptune.core import ConfigError, Settings
from hoptune.tasks.cli._args import positive, read_config, region_name

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune plan``."""
    parser.add_argument("region", nargs="?", type=region_name, metavar="REGION")
    parser.add_argument("--nightly", action="store_true", help="every region's study at once")
    parser.add_argument("--workers", type=positive, default=None, help="workers to plan for")
    parser.add_argument("--deadline", default=None, metavar="DURATION",
                        help="print the fewest workers that meet it (6h, 90m, 45s)")
    parser.add_argument("--calibrate", action="store_true",
                        help="first train a few one-epoch trials of REGION's model to record "
                             "hop costs, where this host class has none of its family")
    parser.add_argument("--local-workers", type=positive, default=None, metavar="N", nargs="?",
                        const=0, help="with --calibrate: start the embedded Redis and N local "
                                      "workers for it (default: one per visible GPU, or 2)")
    parser.add_argument("--host-class", default=None, metavar="CLASS",
                        help="plan with the hop costs recorded on this host class "
                             "(HOPTUNE_HOST_CLASS; default: the class with the most recorded "
                             "hops)")
    parser.add_argument("--json", action="store_true", help="one JSON object")


def _check(args: argparse.Namespace) -> None:
    """The combinations of options ``plan`` takes, before anything is read."""
    if args.nightly == (args.region is not None):
        raise ConfigError("plan: name one REGION or --nightly")
    if args.calibrate and args.nightly:
        raise ConfigError("plan: --calibrate calibrates one REGION")
    if args.workers is not None and args.deadline is not None or not args.calibrate and (
            args.workers is None and args.deadline is None):
        raise ConfigError("plan: give --workers N or --deadline DURATION")
    if args.local_workers is not None and not args.calibrate:
        raise ConfigError("plan: --local-workers is for --calibrate")


def run(args: argparse.Namespace) -> int:
    """Calibrate if asked, then print the plan (as text or one JSON object)."""
    _check(args)  # before the planner's imports: a usage error is instant
    import json

    from hoptune.core import parse_duration
    from hoptune.tasks.plan import (
        Planner,
        current_manifest,
        format_plan,
        shard_line,
        workers_for,
    )
    from hoptune.tasks.worker import Runtime

    deadline = parse_duration(args.deadline, "--deadline") if args.deadline else None
    config = read_config(args)
    names = list(config.regions) if args.nightly else [config.region(args.region).name]
    if args.calibrate:
        from hoptune.tasks.cli._calibrate import calibrate

        study_id = calibrate(Settings.from_env(), config, names[0],
                             local_workers=args.local_workers)
        family = config.region(names[0]).family
        print(f"{names[0]}: " + (f"calibration study {study_id} recorded the hop costs of "
                                  f"{family}" if study_id is not None else
                                  f"this host class already has hop costs of {family}: "
                                  "nothing to calibrate"),
              file=sys.stderr if args.json else sys.stdout)
        if args.workers is None and args.deadline is None:
            return 0
    rt = Runtime(Settings.from_env(), worker="cli")
    planner = Planner(rt, config, names, host=args.host_class)
    result = workers_for(planner, deadline) if deadline else planner.plan(args.workers)
    if args.json:
        print(json.dumps({**result.as_dict(), "regions": names, "deadline_seconds": deadline}))
    else:
        print(format_plan(result, deadline))
        for name in names:  # each region's K as its data was last ingested, and why
            print(f"  {name}: {shard_line(current_manifest(rt, name))}")
    return 0
