"""``hoptune predict``: predict the rows of a CSV or Parquet file with a region's champion.

Every row is checked first: a bad one is its one-line error, exit 2, and no
output file. The output is written beside its final name and renamed into
place, so a reader never sees half of it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from hoptune.core import Settings
from hoptune.tasks.cli._args import check_has_champion, region_name

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune predict``."""
    parser.add_argument("region", type=region_name, metavar="REGION")
    parser.add_argument("--input", type=Path, required=True, metavar="FILE",
                        help="rows with the region's column names (.csv or .parquet)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE",
                        help="the rows and a 'prediction' column (.csv or .parquet)")
    parser.add_argument("--version", default=None,
                        help="a registry version (default: the champion)")
    parser.add_argument("--mark-fallback", action="store_true",
                        help="add a 'fallback' column: true where a row has an id the model "
                             "never saw, so its fallback predicted it")


def run(args: argparse.Namespace) -> int:
    """Check every row first (a bad one: its one-line error, exit 2, no output file)."""
    from hoptune.core import DataError, Store
    from hoptune.regions import display_path, read_rows
    from hoptune.tuner import load_predictor

    suffix = args.out.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise DataError(f"{display_path(args.out)}: must end in .csv or .parquet")
    store = Store(Settings.from_env().store_url)
    if args.version is None:
        check_has_champion(args, store, args.region)
    predictor = load_predictor(store, args.region, args.version)
    table = read_rows(args.input, predictor.region)
    data = predictor.encode(table, display_path(args.input))
    table["prediction"] = predictor.predict_encoded(data)
    fallback = predictor.fallbacks(data)
    if args.mark_fallback:
        table["fallback"] = fallback
    partial = args.out.with_name(f".{args.out.name}.partial")
    if suffix == ".csv":
        table.to_csv(partial, index=False)
    else:
        table.to_parquet(partial, index=False)
    os.replace(partial, args.out)
    print(f"{args.region}: {len(table)} predictions by {predictor.version} written to "
          f"{display_path(args.out)}; {int(fallback.sum())} of them by the fallback (a user or "
          f"item the model never saw)" + ("" if args.mark_fallback or not fallback.any() else
                                          ": --mark-fallback marks which"))
    return 0
