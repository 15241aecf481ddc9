"""``hoptune sweep``: send again, once, whatever work a fault may have lost.

The sweeper that ``hoptune beat`` schedules, run once by hand: the messages
that put lost work back in motion are sent, once
(``hoptune.tasks.study.sweep``).
"""

from __future__ import annotations

import argparse

from hoptune.core import Settings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``hoptune sweep`` has no options."""


def run(args: argparse.Namespace) -> int:
    """Sweep once and say how many messages went out again."""
    from hoptune.tasks import app, send
    from hoptune.tasks.study import sweep
    from hoptune.tasks.worker import Runtime

    dispatches = sweep(Runtime(Settings.from_env(), worker="cli"), app)
    send(dispatches, app)
    print(f"re-sent {len(dispatches)} messages")
    return 0
