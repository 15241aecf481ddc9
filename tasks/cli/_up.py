"""``hoptune up``: the embedded Redis and N local workers on this machine, until Ctrl-C.

Prints which shards each worker owns, the broker and where the logs go; with
``--metrics-port`` it also serves Prometheus metrics as ``hoptune metrics``
does. SIGTERM stops it like Ctrl-C; a worker that exits stops it with status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import TYPE_CHECKING

from hoptune.core import Settings
from hoptune.tasks.cli._args import WORKERS_HELP, positive, read_config
from hoptune.tasks.cli._db import require_schema

if TYPE_CHECKING:
    from hoptune.regions import Config

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune up``."""
    parser.add_argument("--workers", type=positive, default=0, help=WORKERS_HELP)
    parser.add_argument("--metrics-port", type=positive, default=None, metavar="PORT",
                        help="also serve Prometheus metrics on PORT (as `hoptune metrics`)")


def run(args: argparse.Namespace) -> int:
    """Run the local cluster until Ctrl-C or SIGTERM (then the exit is 0) or a worker exits (1)."""
    from kombu.utils.url import maybe_sanitize_url

    from hoptune.tasks import app
    from hoptune.tasks.cli._cluster import local_cluster

    settings = Settings.from_env()
    config = read_config(args)
    require_schema(settings)
    shards = _shards(settings, config, args.workers)
    # SIGTERM (a service manager, `kill`) stops the workers and Redis like Ctrl-C does; and
    # Ctrl-C stops it however it was started (a shell's background job inherits SIGINT
    # ignored, and Python then leaves it ignored)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with local_cluster(settings, shards, args.workers, loglevel="INFO") as cluster:
        for name, owned in zip(cluster.names, cluster.assignment, strict=True):
            print(f"{name}: " + ", ".join(f"{r}:{k}" for r, k in owned))
        broker = maybe_sanitize_url(app.conf.broker_url)
        print(f"broker {broker}; logs in {settings.home / 'logs'}; Ctrl-C stops")
        stop_metrics = None
        if args.metrics_port:
            from hoptune.tasks.monitor import start_metrics

            stop_metrics = start_metrics(settings, shards, args.metrics_port, app=app)
            print(f"metrics on http://0.0.0.0:{args.metrics_port}/metrics")
        try:
            while cluster.alive():
                time.sleep(1.0)
        finally:
            if stop_metrics is not None:
                stop_metrics()
    print("hoptune: a worker exited; stopping", file=sys.stderr)
    return 1


def _shards(settings: Settings, config: Config, workers: int) -> dict[str, int]:
    """Each region's K: forced, its running study's, its data's as ingested; a region with
    ``shards = "auto"`` never ingested is ingested now for these workers."""
    from hoptune.tasks.cli._cluster import default_workers
    from hoptune.tasks.plan import known_shards, local_shards
    from hoptune.tasks.worker import Runtime

    rt = Runtime(settings, worker="cli")
    out = {}
    for region in config.regions.values():
        known = known_shards(rt, region)
        out[region.name] = (known if known is not None
                            else local_shards(rt, region, workers or default_workers()))
    return out
