"""Where hoptune keeps things, read once from the environment.

``HOPTUNE_HOME`` (default ``./.hoptune``) holds the embedded defaults: the
SQLite study database, the store folder and the embedded Redis socket. Each
can be pointed elsewhere for a cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """Locations of the home folder, store, study database and broker."""

    home: Path
    store_url: str
    database_url: str
    broker_url: str | None
    config_path: Path

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = Path(env.get("HOPTUNE_HOME") or ".hoptune").expanduser().absolute()
        return cls(
            home=home,
            store_url=env.get("HOPTUNE_STORE_URL") or str(home / "store"),
            database_url=env.get("HOPTUNE_DATABASE_URL") or f"sqlite:///{home / 'studies.db'}",
            broker_url=env.get("HOPTUNE_BROKER_URL") or None,
            config_path=Path(env.get("HOPTUNE_CONFIG") or "hoptune.toml").expanduser().absolute(),
        )

    @property
    def embedded_socket(self) -> Path:
        """The unix socket of the embedded Redis server."""
        return self.home / "redis.sock"

    @property
    def cache_dir(self) -> Path:
        """Where a worker caches the shards it owns."""
        return self.home / "cache"
