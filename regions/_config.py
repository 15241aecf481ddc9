"""Region configuration: one TOML file, validated once into frozen objects.

``[defaults]`` holds what every region inherits, and any region field may
stand there (``family``, ``task``, ``columns``, ``rating_range``, even
``data``); each ``[regions.NAME]`` table may override any of it. ``params``
and ``pruner`` merge key by key over the defaults, ``space`` merges by
dimension name (a region's dimension replaces the default's).
The search space stays raw (a dict of dicts): the tuner parses it.

Every problem is a ``ConfigError`` of one line that names the file, the field
path and the bad value, e.g. ``hoptune.toml: regions.north.shards: must be an
integer >= 1, got 0``.
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from hoptune.core import ConfigError
from hoptune.regions._schema import (
    EXPECT,
    TAGS,
    Defaults,
    RegionConfig,
    Schedule,
    did_you_mean,
    quote,
)

__all__ = ["Config", "load_config", "display_path"]

_REGION_NAME = re.compile(r"[a-z0-9_-]+")
_TOP_LEVEL = ("defaults", "schedule", "regions")
_MERGED_TABLES = ("params", "space", "pruner")


class Config(BaseModel):
    """A whole configuration file: its regions (defaults merged in) and the schedule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    regions: dict[str, RegionConfig]
    schedule: Schedule

    def region(self, name: str) -> RegionConfig:
        """The region called ``name``; a ConfigError lists the known ones otherwise."""
        try:
            return self.regions[name]
        except KeyError:
            known = ", ".join(sorted(self.regions))
            raise ConfigError(
                f"{display_path(self.path)}: no region {name!r}"
                f"{did_you_mean(name, self.regions)} (known: {known})"
            ) from None


def load_config(path: str | Path) -> Config:
    """Read, merge and validate the configuration file at ``path``."""
    path = Path(path).absolute()
    where = display_path(path)
    raw = _read_toml(path, where)
    for key in raw:
        if key not in _TOP_LEVEL:
            raise ConfigError(f"{where}: unknown field {key!r}{did_you_mean(key, _TOP_LEVEL)}")
    defaults_raw = _table(raw, "defaults", where, required=False)
    schedule_raw = _table(raw, "schedule", where, required=False)
    regions_raw = _table(raw, "regions", where, required=True)
    if not regions_raw:
        raise ConfigError(f"{where}: regions: at least one [regions.NAME] table is required")

    _validate(Defaults, defaults_raw, where, "defaults", {"base": path.parent})
    schedule = _validate(Schedule, schedule_raw, where, "schedule", {})
    inherited = copy.deepcopy(defaults_raw)
    regions: dict[str, RegionConfig] = {}
    for name, table in regions_raw.items():
        prefix = f"regions.{name}"
        if not _REGION_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: {prefix}: region names must match [a-z0-9_-]+, got {name!r}"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: {prefix}: must be a table, got {quote(table)}")
        if "name" in table:
            raise ConfigError(f"{where}: {prefix}: unknown field 'name' (the table's name "
                              f"is the region's)")
        merged = {"name": name, **copy.deepcopy(inherited), **copy.deepcopy(table)}
        for key in _MERGED_TABLES:
            if isinstance(table.get(key), dict) and isinstance(inherited.get(key), dict):
                merged[key] = {**copy.deepcopy(inherited[key]), **copy.deepcopy(table[key])}
        context = {"base": path.parent}
        regions[name] = _validate(RegionConfig, merged, where, prefix, context)
    return Config(path=path, regions=regions, schedule=schedule)


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _read_toml(path: Path, where: str) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a folder, not a file") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: {_toml_message(str(exc))}") from None


def _toml_message(message: str) -> str:
    """``Invalid value (at line 3, column 9)`` -> ``line 3: Invalid value (column 9)``."""
    found = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", message, re.DOTALL)
    if found:
        text, line, column = found.groups()
        return f"line {line}: {text} (column {column})"
    found = re.fullmatch(r"(.*) \(at end of document\)", message, re.DOTALL)
    if found:
        return f"end of file: {found.group(1)}"
    return message.splitlines()[0]


def _table(raw: dict[str, Any], key: str, where: str, required: bool) -> dict[str, Any]:
    if key not in raw:
        if required:
            raise ConfigError(f"{where}: missing table [{key}]")
        return {}
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key}: must be a table, got {quote(value)}")
    return value


def _validate(
    model: type[BaseModel], data: dict[str, Any], where: str, prefix: str, context: dict
) -> Any:
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_one_line(_first(exc.errors()), data, prefix, model)}"
                          ) from None


def _first(errors: list[Any]) -> Any:
    """The error to report: an unknown field before all else, since a misspelt field
    (``famly``) also makes the one it meant missing, and the typo is what to fix."""
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def _one_line(error: Any, data: dict[str, Any], prefix: str,
              model: type[BaseModel] | None = None) -> str:
    """Turn a pydantic error into ``field.path: what is wrong, got VALUE``; an unknown
    field with the known one it is closest to (``did you mean 'family'?``)."""
    loc = [part for i, part in enumerate(error["loc"]) if not _is_tag(error["loc"], i)]
    kind = error["type"]
    if kind == "extra_forbidden":
        hint = did_you_mean(loc[-1], _fields_at(model, error["loc"][:-1]))
        return f"{_join(prefix, loc[:-1])}: unknown field {loc[-1]!r}{hint}"
    if kind == "missing":
        return f"{_join(prefix, loc[:-1])}: missing field {loc[-1]!r}"
    if kind == "hoptune":
        return f"{_join(prefix, loc + list(error['ctx'].get('field', ())))}: {error['msg']}"
    for end in range(len(loc), 0, -1):
        name = loc[end - 1]
        if isinstance(name, str) and name in EXPECT:
            value = _lookup(data, loc[:end], error["input"])
            return f"{_join(prefix, loc[:end])}: must be {EXPECT[name]}, got {quote(value)}"
    return f"{_join(prefix, loc)}: {error['msg']}"


def _fields_at(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The field names of the model that ``loc`` (pydantic's error path) leads to."""
    current: Any = model
    annotation: Any = None
    for i, part in enumerate(loc):
        if _is_tag(loc, i):  # the chosen member of the columns' tagged union
            current = _model_of(annotation, part)
            continue
        field = current.model_fields.get(part) if current and isinstance(part, str) else None
        if field is None:
            return []
        annotation = field.annotation
        current = _model_of(annotation)
    return list(current.model_fields) if current is not None else []


def _model_of(annotation: Any, tag: str | None = None) -> type[BaseModel] | None:
    """The model a field holds (through ``X | None`` and tagged unions), or None for a plain
    value; with ``tag``, the union's member of that tag."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = typing.get_args(annotation)
    tags = [a.tag for a in args if isinstance(getattr(a, "tag", None), str)]
    if tags and tag is not None:  # a member of a tagged union: this one, or none
        return _model_of(args[0]) if tag in tags else None
    for arg in args:
        found = _model_of(arg, tag)
        if found is not None:
            return found
    return None


def _is_tag(loc: tuple, i: int) -> bool:
    """Pydantic puts the chosen member of a tagged union into the path; we do not."""
    return i > 0 and loc[i - 1] == "columns" and loc[i] in TAGS


def _join(prefix: str, loc: list) -> str:
    parts = [prefix] if prefix else []
    for part in loc:
        parts.append(f"[{part}]" if isinstance(part, int) else str(part))
    return ".".join(parts).replace(".[", "[") or "(top level)"


def _lookup(data: Any, loc: list, fallback: Any) -> Any:
    for part in loc:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return fallback
    return data
