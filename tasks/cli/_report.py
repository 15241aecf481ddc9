"""``hoptune report``: an HTML report with plots of a region's latest study (or one named)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hoptune.core import Settings
from hoptune.tasks.cli._args import check_has_study, positive, region_name

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune report``."""
    parser.add_argument("region", type=region_name, metavar="REGION")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="default: $HOPTUNE_HOME/reports/REGION")
    parser.add_argument("--study", type=positive, default=None,
                        help="a study id (default: latest)")


def run(args: argparse.Namespace) -> int:
    """Write the report and print where its index page is."""
    from hoptune.core import Store
    from hoptune.tuner import StudyDB, write_report

    settings = Settings.from_env()
    if args.study is None:
        check_has_study(args, args.region)
    out = args.out or settings.home / "reports" / args.region
    index = write_report(StudyDB(settings.database_url), Store(settings.store_url), args.region,
                         out, study_id=args.study)
    print(f"report written to {index}")
    return 0
