"""``hoptune ingest``: validate, split and shard regions' data into the store.

Every region named is checked before any data is read; a region whose data
and settings are unchanged since its last ingest is left as it is.
"""

from __future__ import annotations

import argparse

from hoptune.core import Settings
from hoptune.tasks.cli._args import read_config, region_name

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune ingest``."""
    parser.add_argument("regions", nargs="*", type=region_name, metavar="REGION",
                        help="regions (default: all)")


def run(args: argparse.Namespace) -> int:
    """Ingest the regions named (default: all), one line each."""
    from hoptune.core import Store
    from hoptune.regions import ingest
    from hoptune.tasks.plan import shard_chooser
    from hoptune.tasks.study import check_region
    from hoptune.tasks.worker import Runtime

    config = read_config(args)
    settings = Settings.from_env()
    store = Store(settings.store_url)
    names = args.regions
    regions = [config.region(n) for n in names] if names else list(config.regions.values())
    for region in regions:  # every region named is checked before any data is read
        check_region(config, region, tuned=False)
    for region in regions:
        # "auto": the study database (the recorded costs) is opened once the data is valid
        chooser = shard_chooser(lambda: Runtime(settings, worker="cli"), region)
        result = ingest(region, store, chooser if region.shards == "auto" else None)
        rows = sum(result.manifest["rows"])
        state = "ingested" if result.changed else "unchanged"
        print(f"{region.name}: {state}, {rows} training rows in {len(result.manifest['rows'])} "
              f"shards, {result.manifest['validation_rows']} validation rows "
              f"(hash {result.manifest['hash'][:12]})")
        if region.shards == "auto":
            print(f"{region.name}: shards: {result.manifest['shards']} "
                  f"({result.manifest.get('shards_reason', 'chosen before this version')})")
    return 0
