"""``hoptune flower``: Flower for hoptune's Celery app, behind HTTP basic auth.

Runs Flower in this process, as ``celery -A hoptune.tasks flower`` would. The
credentials come from ``HOPTUNE_FLOWER_USER`` and ``HOPTUNE_FLOWER_PASSWORD``
and reach Flower through its ``FLOWER_BASIC_AUTH`` environment variable, never
through the command line, so the password does not show in ``ps``. On a
cluster (``HOPTUNE_BROKER_URL`` set) Flower never runs without them; on the
embedded default it may, but only listening on a loopback address.

Flower keeps the task events it receives in memory (its ``max_tasks`` most
recent tasks); a restarted Flower shows the tasks sent after it started.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping

from hoptune.core import ConfigError, Settings, StoreError

__all__ = ["add_arguments", "run", "USER_VARIABLE", "PASSWORD_VARIABLE"]

USER_VARIABLE = "HOPTUNE_FLOWER_USER"
PASSWORD_VARIABLE = "HOPTUNE_FLOWER_PASSWORD"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune flower``."""
    parser.add_argument("--port", type=_port, default=5555, help="HTTP port (default: 5555)")
    parser.add_argument("--address", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1); any other needs "
                             f"{USER_VARIABLE} and {PASSWORD_VARIABLE}")
    parser.add_argument("--url-prefix", default="", metavar="PREFIX",
                        help="serve under this path, behind a reverse proxy")


def basic_auth(environ: Mapping[str, str]) -> str | None:
    """``user:password`` from the environment, or None when neither variable is set."""
    user = environ.get(USER_VARIABLE) or ""
    password = environ.get(PASSWORD_VARIABLE) or ""
    if not user and not password:
        return None
    if not user or not password:
        missing = USER_VARIABLE if not user else PASSWORD_VARIABLE
        raise ConfigError(f"{missing} is empty or unset: set both {USER_VARIABLE} and "
                          f"{PASSWORD_VARIABLE}, or neither")
    if ":" in user:
        raise ConfigError(f"{USER_VARIABLE} must not contain ':' (HTTP basic auth)")
    if "," in user or "," in password:
        # Flower splits FLOWER_BASIC_AUTH at commas into several user:password pairs.
        raise ConfigError(f"{USER_VARIABLE} and {PASSWORD_VARIABLE} must not contain ','")
    return f"{user}:{password}"


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _check_can_listen(address: str, port: int) -> None:
    """Fail with one line, before starting Flower, when the address or port cannot be bound."""
    from tornado.netutil import bind_sockets

    try:
        sockets = bind_sockets(port, address=address)
    except OSError as exc:
        raise ConfigError(f"flower: cannot listen on {address}:{port}: "
                          f"{exc.strerror or exc}") from None
    for sock in sockets:
        sock.close()


def run(args: argparse.Namespace) -> int:
    """Start Flower on hoptune's Celery app until it is stopped (SIGTERM or Ctrl-C)."""
    settings = Settings.from_env()
    credentials = basic_auth(os.environ)
    if credentials is None:
        if settings.broker_url:
            raise ConfigError(f"flower on a cluster (HOPTUNE_BROKER_URL is set) needs HTTP basic "
                              f"auth: set {USER_VARIABLE} and {PASSWORD_VARIABLE}")
        if not _loopback(args.address):
            raise ConfigError(f"flower --address {args.address} without HTTP basic auth: set "
                              f"{USER_VARIABLE} and {PASSWORD_VARIABLE}, or listen on 127.0.0.1")
    if not settings.broker_url:
        from hoptune.tasks.worker import ping, socket_url

        if not ping(socket_url(settings.embedded_socket)):
            raise StoreError(f"no embedded Redis answers on {settings.embedded_socket}: start "
                             f"`hoptune up` first, or set HOPTUNE_BROKER_URL")
    _check_can_listen(args.address, args.port)

    # Flower reads FLOWER_* variables; hoptune's own credentials are the only basic auth.
    if credentials is None:
        os.environ.pop("FLOWER_BASIC_AUTH", None)
    else:
        os.environ["FLOWER_BASIC_AUTH"] = credentials
    # The options below override any FLOWER_* variable; an empty configuration file keeps a
    # stray flowerconfig.py in the working folder from changing them (or turning auth off).
    argv = ["flower", f"--port={args.port}", f"--address={args.address}", f"--conf={os.devnull}"]
    if args.url_prefix:
        argv.append(f"--url_prefix={args.url_prefix}")
    from hoptune.tasks import app

    return int(app.start(argv) or 0)
