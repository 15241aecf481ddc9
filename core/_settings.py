"""Where hoptune keeps things, read once from the environment.

``HOPTUNE_HOME`` (default ``./.hoptune``) holds the embedded defaults: the
SQLite study database, the store folder and the embedded Redis socket. Each
can be pointed elsewhere for a cluster. The region configuration is
``HOPTUNE_CONFIG``, else ``./hoptune.toml``; where neither is there, the one
``hoptune demo`` wrote into the home (``demo/hoptune.toml``), so the commands a
new user runs after the demo find the demo's regions. ``HOPTUNE_NIGHTLY_DEADLINE`` (``6h``,
``90m``, ``1h30m`` or seconds) is how long a nightly run may take: its start
logs the plan and warns at once when the plan predicts a miss.
``HOPTUNE_DASHBOARD_HOST``, ``HOPTUNE_DASHBOARD_PORT``, ``HOPTUNE_DASHBOARD_USER`` and
``HOPTUNE_DASHBOARD_PASSWORD`` are where ``hoptune dashboard`` listens and the HTTP
basic auth it asks for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hoptune.core._errors import ConfigError

__all__ = ["Settings", "parse_duration"]

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str, where: str = "duration") -> float:
    """Seconds from ``"6h"``, ``"1h30m"``, ``"90m"``, ``"45s"`` or a plain number of seconds."""
    text = text.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ConfigError(f"{where}: {text!r} is not a duration such as 6h, 90m or 45s"
                              ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"{where}: {text!r} must be a duration longer than zero")
    return seconds


def demo_config(home: Path) -> Path:
    """The configuration ``hoptune demo`` writes into ``home``."""
    return home / "demo" / "hoptune.toml"


def _config_path(env: Mapping[str, str], home: Path) -> Path:
    """``$HOPTUNE_CONFIG``; else ./hoptune.toml, or the demo's where only that one exists."""
    if env.get("HOPTUNE_CONFIG"):
        return Path(env["HOPTUNE_CONFIG"]).expanduser().absolute()
    local = Path("hoptune.toml").absolute()
    if not local.exists() and demo_config(home).is_file():
        return demo_config(home)
    return local


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    """A TCP port from ``env[name]``, else ``default``."""
    text = (env.get(name) or "").strip()
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigError(f"{name}: {text!r} is not a port number between 1 and 65535")
    return int(text)


@dataclass(frozen=True)
class Settings:
    """Locations of the home folder, store, study database and broker."""

    home: Path
    store_url: str
    database_url: str
    broker_url: str | None
    config_path: Path
    nightly_deadline: float | None = None  # seconds a nightly run may take; None: no deadline
    dashboard_host: str = "127.0.0.1"  # where ``hoptune dashboard`` listens
    dashboard_port: int = 8080
    dashboard_user: str | None = None  # its HTTP basic auth; None: none set
    dashboard_password: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = Path(env.get("HOPTUNE_HOME") or ".hoptune").expanduser().absolute()
        return cls(
            home=home,
            store_url=env.get("HOPTUNE_STORE_URL") or str(home / "store"),
            database_url=env.get("HOPTUNE_DATABASE_URL") or f"sqlite:///{home / 'studies.db'}",
            broker_url=env.get("HOPTUNE_BROKER_URL") or None,
            config_path=_config_path(env, home),
            nightly_deadline=(parse_duration(env["HOPTUNE_NIGHTLY_DEADLINE"],
                                             "HOPTUNE_NIGHTLY_DEADLINE")
                              if env.get("HOPTUNE_NIGHTLY_DEADLINE") else None),
            dashboard_host=env.get("HOPTUNE_DASHBOARD_HOST") or "127.0.0.1",
            dashboard_port=_port(env, "HOPTUNE_DASHBOARD_PORT", 8080),
            dashboard_user=env.get("HOPTUNE_DASHBOARD_USER") or None,
            dashboard_password=env.get("HOPTUNE_DASHBOARD_PASSWORD") or None,
        )

    @property
    def demo_config(self) -> Path:
        """Where ``hoptune demo`` writes its configuration (its data lies beside it)."""
        return demo_config(self.home)

    @property
    def embedded_socket(self) -> Path:
        """The unix socket of the embedded Redis server."""
        return self.home / "redis.sock"

    @property
    def cache_dir(self) -> Path:
        """Where a worker caches the shards it owns."""
        return self.home / "cache"
