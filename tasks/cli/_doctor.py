"""``hoptune doctor``: check this host for running hoptune; exit 1 if a check fails.

Versions, visible GPUs, the CUDA kernels' self-tests, the broker, the study
database and the store, as ``hoptune.tasks.monitor.diagnose`` finds them.
"""

from __future__ import annotations

import argparse

from hoptune.core import Settings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune doctor``."""
    parser.add_argument("--json", action="store_true", help="one JSON object")


def run(args: argparse.Namespace) -> int:
    """Print the report, as text or one JSON object; 0 if every check passed, else 1."""
    import json

    from hoptune.tasks.monitor import diagnose, render

    report = diagnose(Settings.from_env())
    print(json.dumps(report) if args.json else render(report))
    return 0 if report["ok"] else 1
