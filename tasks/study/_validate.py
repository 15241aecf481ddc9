"""The whole configuration of a region, checked before any of its data is touched.

Ingesting a large table takes minutes and writes shards: a search space that
names a parameter its family does not have, or a factory that cannot be
imported, must stop a command before that, not after.
"""

from __future__ import annotations

from hoptune.core import ConfigError
from hoptune.regions import Config, RegionConfig, display_path, get_family
from hoptune.tuner import parse_space

__all__ = ["check_region"]


def check_region(config: Config, region: RegionConfig, *, tuned: bool) -> None:
    """Raise ``ConfigError`` (one line, naming the file) for anything wrong with ``region``.

    Checks its search space (required when the command will ``tuned`` it), its
    family (a user's factory is imported), and that every name in its params and
    space is one the family reads.
    """
    where = f"{display_path(config.path)}: regions.{region.name}.space"
    if tuned or region.space:
        parse_space(region.space, where)
    try:
        get_family(region)
    except ConfigError as exc:
        raise ConfigError(f"{display_path(config.path)}: {exc}") from None
