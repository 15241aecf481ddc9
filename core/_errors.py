"""The one exception tree of hoptune.

Every failure a user can cause (bad configuration, bad data, a store that
cannot be reached, bad CLI arguments) is a ``HoptuneError``: the command line
prints its message as one line and exits with status 2. Any other exception
is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = [
    "HoptuneError",
    "ConfigError",
    "DataError",
    "StoreError",
    "CheckpointError",
    "StudyError",
    "SchemaError",
]


class HoptuneError(Exception):
    """Root of every error hoptune raises on purpose."""


class ConfigError(HoptuneError):
    """A configuration file, search space or CLI argument is invalid."""


class DataError(HoptuneError):
    """A region's table does not satisfy its schema."""


class StoreError(HoptuneError):
    """The store (shards, checkpoints, registry) is missing something or unreachable."""


class CheckpointError(StoreError):
    """A checkpoint is missing, truncated or fails its checksum; ``key`` names it."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"checkpoint {key} is unreadable: {reason}")
        self.key = key


class StudyError(HoptuneError):
    """A study or trial is not in a state that allows the requested action."""


class SchemaError(StudyError):
    """The study database's schema revision is not the one this hoptune reads and writes."""
