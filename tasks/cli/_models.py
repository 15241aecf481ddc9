"""``hoptune models``: the model registry, every promoted version of each region.

One row per version, the champion starred, with its metric, the study and
trial it came from and its parameters.
"""

from __future__ import annotations

import argparse

from hoptune.core import Settings
from hoptune.tasks.cli._args import region_name

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune models``."""
    parser.add_argument("regions", nargs="*", type=region_name, metavar="REGION")


def run(args: argparse.Namespace) -> int:
    """Print the versions of the regions named (default: every region in the store)."""
    from hoptune.core import Store
    from hoptune.tasks.cli._follow import format_table
    from hoptune.tuner import champion_card, versions

    store = Store(Settings.from_env().store_url)
    names = args.regions or sorted({k.split("/")[1] for k in store.list("models")})
    rows = []
    for name in names:
        champion = champion_card(store, name)
        for card in versions(store, name):
            rows.append({"region": name, "version": card["version"],
                         "champion": "*" if champion and champion["version"] == card["version"]
                         else "", "created": card["created_at"][:19].replace("T", " "),
                         card["metric_name"]: card["metric"], "study": card["study_id"],
                         "trial": card["trial_number"], "params": card["params"]})
    if not rows:
        print("no models yet")
        return 0
    columns = ["region", "version", "champion", "created"]
    columns += sorted({k for r in rows for k in r} - set(columns) - {"study", "trial", "params"})
    print(format_table(rows, columns + ["study", "trial", "params"]))
    return 0
