"""The ground floor every hoptune package stands on: errors, settings, the store.

Nothing here imports another hoptune package, and every package may import
from here: the one exception tree (``HoptuneError`` and its subclasses), where
hoptune keeps things (``Settings``), the store of shards, checkpoints and the
registry (``Store``), and the lazy attribute helper the packages' ``__init__``
files share. The store loads on first use, since fsspec is not needed to print
an error or read a setting.
"""

from __future__ import annotations

from hoptune.core._errors import (
    CheckpointError,
    ConfigError,
    DataError,
    HoptuneError,
    SchemaError,
    StoreError,
    StudyError,
)
from hoptune.core._lazy import lazy_names
from hoptune.core._settings import Settings, parse_duration

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataError",
    "HoptuneError",
    "SchemaError",
    "Settings",
    "Store",
    "StoreError",
    "StudyError",
    "lazy_names",
    "parse_duration",
]

__getattr__, __dir__ = lazy_names(__name__, {"Store": "hoptune.core._store"}, globals())
