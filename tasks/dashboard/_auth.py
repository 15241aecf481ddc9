"""HTTP basic auth of the dashboard, as Flower's: from settings, required beyond loopback.

The credentials are ``HOPTUNE_DASHBOARD_USER`` and ``HOPTUNE_DASHBOARD_PASSWORD``
(``Settings``). Where both are set every request must carry them; where neither
is, the dashboard answers without asking, but only while it listens on a
loopback address: listening anywhere else without them is refused before it
starts.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from typing import NamedTuple

from hoptune.core import ConfigError, Settings

__all__ = ["Credentials", "authorized", "credentials", "is_loopback"]

USER_VARIABLE = "HOPTUNE_DASHBOARD_USER"
PASSWORD_VARIABLE = "HOPTUNE_DASHBOARD_PASSWORD"


class Credentials(NamedTuple):
    user: str
    password: str


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (only this machine can reach it)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def credentials(settings: Settings, host: str) -> Credentials | None:
    """The credentials every request must carry, or None where none are asked for.

    Raises ``ConfigError`` (one line) where only one of the two is set, or where
    ``host`` is not a loopback address and neither is.
    """
    user, password = settings.dashboard_user or "", settings.dashboard_password or ""
    if bool(user) != bool(password):
        missing = USER_VARIABLE if not user else PASSWORD_VARIABLE
        raise ConfigError(f"{missing} is empty or unset: set both {USER_VARIABLE} and "
                          f"{PASSWORD_VARIABLE}, or neither")
    if ":" in user:
        raise ConfigError(f"{USER_VARIABLE} must not contain ':' (HTTP basic auth)")
    if not user:
        if not is_loopback(host):
            raise ConfigError(f"dashboard --host {host} without HTTP basic auth: set "
                              f"{USER_VARIABLE} and {PASSWORD_VARIABLE}, or listen on 127.0.0.1")
        return None
    return Credentials(user, password)


def authorized(header: str | None, expected: Credentials) -> bool:
    """Whether an ``Authorization`` header carries ``expected`` (compared in constant time)."""
    if not header or not header.startswith("Basic "):
        return False
    try:
        text = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    user, sep, password = text.partition(":")
    if not sep:
        return False
    same_user = hmac.compare_digest(user.encode(), expected.user.encode())
    same_password = hmac.compare_digest(password.encode(), expected.password.encode())
    return same_user and same_password
