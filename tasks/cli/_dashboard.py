"""``hoptune dashboard``: the live dashboard of the night, its studies, the cluster, the registry.

Serves web pages over the study database (read only) and the broker's queue
depths until Ctrl-C or SIGTERM. ``--host`` and ``--port`` default to
``HOPTUNE_DASHBOARD_HOST`` and ``HOPTUNE_DASHBOARD_PORT`` (127.0.0.1:8080).
With ``HOPTUNE_DASHBOARD_USER`` and ``HOPTUNE_DASHBOARD_PASSWORD`` set, every
request needs them (HTTP basic auth); listening beyond 127.0.0.1 without them
is refused.
"""

from __future__ import annotations

import argparse

from hoptune.core import ConfigError, SchemaError, Settings

__all__ = ["add_arguments", "run"]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune dashboard``."""
    parser.add_argument("--port", type=_port, default=None,
                        help="HTTP port (default: $HOPTUNE_DASHBOARD_PORT or 8080; 0: any free "
                             "one)")
    parser.add_argument("--host", default=None,
                        help="address to listen on (default: $HOPTUNE_DASHBOARD_HOST or "
                             "127.0.0.1); any other needs HOPTUNE_DASHBOARD_USER and "
                             "HOPTUNE_DASHBOARD_PASSWORD")


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard until it is stopped (SIGTERM and Ctrl-C exit 0)."""
    from hoptune.tasks.dashboard import credentials, serve
    from hoptune.tuner import schema_revisions

    settings = Settings.from_env()
    host = args.host or settings.dashboard_host
    port = settings.dashboard_port if args.port is None else args.port
    allowed = credentials(settings, host)
    revisions = schema_revisions(settings.database_url)
    if revisions.state == "empty":
        raise ConfigError(f"no study database at {revisions.where} yet: run `hoptune demo`, "
                          f"or tune a region, first")
    if revisions.state != "current":
        raise SchemaError(revisions.refusal())
    serve(settings, host, port, allowed, announce=lambda line: print(line, flush=True))
    return 0
