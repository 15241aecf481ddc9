"""What several commands share: argument types, the follow options, and reading ``--config``.

The types check a value as argparse reads it, so a bad one is a usage error
(``hoptune CMD: error: argument …``, exit 2) before the command runs.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from hoptune.core import Settings

if TYPE_CHECKING:
    from hoptune.regions import Config

__all__ = ["REGION_PATTERN", "WORKERS_HELP", "add_follow_options", "positive", "positive_float",
           "read_config", "region_name", "region_names"]

#: A region's name: it becomes part of store paths and queue names.
REGION_PATTERN = "[a-z0-9_-]+"
#: The help of ``--workers`` where a command starts its own local workers.
WORKERS_HELP = "local workers (default: one per visible GPU, or 2)"


def positive(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """A number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def region_name(text: str) -> str:
    """A region name from the command line; it becomes part of store paths, so it is checked."""
    if not re.fullmatch(REGION_PATTERN, text):
        raise argparse.ArgumentTypeError(f"bad region name {text!r} (expected {REGION_PATTERN})")
    return text


def region_names(text: str) -> list[str]:
    """Region names separated by commas (``R1,R2``), at least one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if not re.fullmatch(REGION_PATTERN, name):
            raise argparse.ArgumentTypeError(f"bad region name {name!r}")
    if not names:
        raise argparse.ArgumentTypeError("no region given")
    return names


def add_follow_options(parser: argparse.ArgumentParser, start: str) -> None:
    """The options of commands that start work in the workers and then follow it.

    ``start`` says what the command starts, in ``--detach``'s help.
    """
    parser.add_argument("--local-workers", type=positive, default=None, metavar="N", nargs="?",
                        const=0, help="start the embedded Redis and N local workers for this "
                                      "command (N omitted: one per visible GPU, or 2)")
    parser.add_argument("--detach", action="store_true",
                        help=f"{start} and return; the workers carry it on")
    parser.add_argument("--no-progress", action="store_true", help="no live view")


def read_config(args: argparse.Namespace) -> Config:
    """The region configuration: ``--config``, else ``$HOPTUNE_CONFIG`` or ./hoptune.toml."""
    from hoptune.regions import load_config

    return load_config(args.config or Settings.from_env().config_path)
