"""``hoptune metrics``: Prometheus metrics for an autoscaler, until Ctrl-C or SIGTERM.

Queue depths, running hops, busy workers, trials by state, the predicted
finish of the running studies and the workers wanted. Without a usable region
configuration (and none named with ``--config``) it reports the regions of
the running studies.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import TYPE_CHECKING

from hoptune.core import ConfigError, Settings
from hoptune.tasks.cli._args import positive, positive_float, read_config
from hoptune.tasks.cli._db import require_schema

if TYPE_CHECKING:
    from hoptune.regions import Config

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune metrics``."""
    parser.add_argument("--port", type=positive, default=9464)
    parser.add_argument("--addr", default="0.0.0.0", help="address to listen on (default: all)")
    parser.add_argument("--forecast-every", type=positive_float, default=30.0, metavar="SECONDS",
                        help="simulate the running studies' remaining work at most this often "
                             "(default 30)")


def run(args: argparse.Namespace) -> int:
    """Serve the metrics until the process is stopped (SIGTERM exits 0)."""
    from hoptune.tasks.monitor import start_metrics

    settings = Settings.from_env()
    require_schema(settings)
    try:
        shards = _known(settings, read_config(args))
    except ConfigError:
        if args.config:  # a config named on the command line must be right
            raise
        shards = {}  # without one, the regions of running studies are reported
    stop = start_metrics(settings, shards, args.port, args.addr,
                         forecast_every=args.forecast_every)
    print(f"metrics on http://{args.addr}:{args.port}/metrics; Ctrl-C stops", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(1.0)
    finally:
        stop()


def _known(settings: Settings, config: Config) -> dict[str, int]:
    """The K of each region whose K is known: forced, its running study's or its data's."""
    from hoptune.tasks.plan import known_shards
    from hoptune.tasks.worker import Runtime

    rt = Runtime(settings, worker="cli")
    known = {r.name: known_shards(rt, r) for r in config.regions.values()}
    return {name: k for name, k in known.items() if k is not None}
