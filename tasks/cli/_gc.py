"""``hoptune gc``: remove the checkpoints that finished studies no longer need.

``--older-than DAYS`` also removes every checkpoint of studies that ended
more than DAYS ago; ``--dry-run`` only counts what would go.
"""

from __future__ import annotations

import argparse

from hoptune.core import ConfigError, Settings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune gc``."""
    parser.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                        help="also every checkpoint of studies that ended more than DAYS ago")
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would go, remove nothing")


def run(args: argparse.Namespace) -> int:
    """Collect, and say how many checkpoints and megabytes went (or would go)."""
    from hoptune.tasks.study import collect
    from hoptune.tasks.worker import Runtime

    if args.older_than is not None and args.older_than < 0:
        raise ConfigError(f"--older-than: must be >= 0 days, got {args.older_than}")
    done = collect(Runtime(Settings.from_env(), worker="cli"), older_than_days=args.older_than,
                   dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(done.keys)} checkpoints, {done.bytes / 1e6:.1f} MB")
    return 0
