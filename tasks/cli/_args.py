"""What several commands share: argument types, the follow options, and reading ``--config``.

The types check a value as argparse reads it, so a bad one is a usage error
(``hoptune CMD: error: argument …``, exit 2) before the command runs.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from hoptune.core import ConfigError, HoptuneError, Settings

if TYPE_CHECKING:
    from hoptune.core import Store
    from hoptune.regions import Config

__all__ = ["REGION_PATTERN", "WORKERS_HELP", "add_follow_options", "check_has_champion",
           "check_has_study", "config_path", "did_you_mean", "known_regions", "positive",
           "positive_float", "read_config", "region_name", "region_names"]

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


def config_path(args: argparse.Namespace) -> Path:
    """``--config``, else ``$HOPTUNE_CONFIG``, ./hoptune.toml, or the demo's (``Settings``)."""
    return getattr(args, "config", None) or Settings.from_env().config_path


def read_config(args: argparse.Namespace) -> Config:
    """The region configuration at ``config_path``; says so on stderr when it is the demo's."""
    from hoptune.regions import display_path, load_config

    path = config_path(args)
    settings = Settings.from_env()
    if path == settings.demo_config and getattr(args, "config", None) is None:
        print(f"hoptune: using the demo's configuration {display_path(path)} (no ./hoptune.toml "
              f"here; --config FILE names another)", file=sys.stderr)
    return load_config(path)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` where ``name`` is close to one of ``known`` and starts with
    the same letter (as ``regions``' configuration errors say it), else ''."""
    close = [k for k in difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
             if k[:1] == name[:1]]
    return f" (did you mean {close[0]!r}?)" if close else ""


def known_regions(args: argparse.Namespace, holding: Iterable[str]) -> list[str]:
    """The regions ``holding`` something (a study, a champion) and those of the configuration,
    where one loads (a host that only serves models may have none)."""
    from hoptune.regions import load_config

    names = set(holding)
    try:
        names |= set(load_config(config_path(args)).regions)
    except HoptuneError:
        pass
    return sorted(names)


def _check_known(args: argparse.Namespace, name: str, holding: Iterable[str]) -> None:
    """Nothing where ``name`` holds something or is a configured region (the command's own
    message then says what to run); else one line naming the known regions."""
    holding = set(holding)
    if name in holding:
        return
    known = known_regions(args, holding)
    if name not in known:
        raise ConfigError(f"no region {name!r}{did_you_mean(name, known)} (known: "
                          f"{', '.join(known) or 'none yet: run `hoptune demo` or tune one'})")


def check_has_study(args: argparse.Namespace, name: str) -> None:
    """For ``report``: region ``name`` has a study, or is one the configuration names."""
    from hoptune.tuner import StudyDB

    db = StudyDB(Settings.from_env().database_url)
    try:
        _check_known(args, name, {s.region for s in db.studies()})
    finally:
        db.dispose()


def check_has_champion(args: argparse.Namespace, store: Store, name: str) -> None:
    """For ``export``, ``predict``: region ``name`` has a champion, or is a configured one."""
    champions = {key.split("/")[1] for key in store.list("models")
                 if key.endswith("/champion.json")}
    _check_known(args, name, champions)
