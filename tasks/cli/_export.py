"""``hoptune export``: write a region's champion to a folder, for serving."""

from __future__ import annotations

import argparse
from pathlib import Path

from hoptune.core import Settings
from hoptune.tasks.cli._args import check_has_champion, region_name

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune export``."""
    parser.add_argument("region", type=region_name, metavar="REGION")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")


def run(args: argparse.Namespace) -> int:
    """Export the champion of ``args.region`` to ``args.out``."""
    from hoptune.core import Store
    from hoptune.tuner import export_champion

    store = Store(Settings.from_env().store_url)
    check_has_champion(args, store, args.region)
    card = export_champion(store, args.region, args.out)
    print(f"{args.region}: champion {card['version']} ({card['metric_name']} "
          f"{card['metric']:.4g}) written to {args.out}")
    return 0
