"""Search spaces: parsed from a region's configuration, frozen, stored as JSON.

A space is a tuple of named dimensions (real, int, categorical). It is validated
once, when parsed, with one-line errors that name the field and quote the bad
value; after that every method may assume it is well formed. Each dimension
maps the unit interval onto its values, which is what random search, the
optimizer's initial design and its candidate sets are built on.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from hoptune.core import ConfigError

__all__ = ["CategoricalDim", "Dimension", "IntDim", "RealDim", "Space", "parse_space"]

_TYPES = ("categorical", "int", "real")
_PRIORS = ("linear", "log")
_KEYS = {
    "real": ("high", "low", "prior", "type"),
    "int": ("high", "low", "prior", "type"),
    "categorical": ("choices", "type"),
}


@dataclass(frozen=True)
class RealDim:
    """A float in [low, high], uniform on a linear or a log scale."""

    name: str
    low: float
    high: float
    prior: str = "linear"

    def from_unit(self, u: np.ndarray) -> list[float]:
        if self.prior == "log":
            lo, hi = math.log(self.low), math.log(self.high)
            values = np.exp(lo + u * (hi - lo))
        else:
            values = self.low + u * (self.high - self.low)
        return [float(v) for v in np.clip(values, self.low, self.high)]

    def to_unit(self, value: Any) -> float:
        if self.prior == "log":
            lo, hi = math.log(self.low), math.log(self.high)
            return (math.log(value) - lo) / (hi - lo)
        return (value - self.low) / (self.high - self.low)

    def contains(self, value: Any) -> bool:
        return _is_number(value) and self.low <= value <= self.high

    def canonical(self, value: Any) -> float:
        return float(value)

    def to_raw(self) -> dict[str, Any]:
        return {"type": "real", "low": self.low, "high": self.high, "prior": self.prior}


@dataclass(frozen=True)
class IntDim:
    """An integer in [low, high] (both inclusive), uniform on a linear or a log scale."""

    name: str
    low: int
    high: int
    prior: str = "linear"

    def _edges(self) -> tuple[float, float]:
        # Each integer v owns the cell [v, v + 1) (in log space for the log prior).
        if self.prior == "log":
            return math.log(self.low), math.log(self.high + 1)
        return float(self.low), float(self.high + 1)

    def from_unit(self, u: np.ndarray) -> list[int]:
        lo, hi = self._edges()
        values = lo + u * (hi - lo)
        if self.prior == "log":
            values = np.exp(values)
        return [int(v) for v in np.clip(np.floor(values), self.low, self.high)]

    def to_unit(self, value: Any) -> float:
        lo, hi = self._edges()
        if self.prior == "log":
            centre = (math.log(value) + math.log(value + 1)) / 2
        else:
            centre = value + 0.5
        return (centre - lo) / (hi - lo)

    def contains(self, value: Any) -> bool:
        if _kind(value) == "float" and not float(value).is_integer():
            return False
        return _is_number(value) and self.low <= value <= self.high

    def canonical(self, value: Any) -> int:
        return int(value)

    def to_raw(self) -> dict[str, Any]:
        return {"type": "int", "low": self.low, "high": self.high, "prior": self.prior}


@dataclass(frozen=True)
class CategoricalDim:
    """One of a fixed tuple of choices (all of one type: str, int, float or bool)."""

    name: str
    choices: tuple[Any, ...]

    def from_unit(self, u: np.ndarray) -> list[Any]:
        k = len(self.choices)
        index = np.minimum(np.floor(u * k).astype(int), k - 1)
        return [self.choices[i] for i in index]

    def to_unit(self, value: Any) -> float:
        return (self._index(value) + 0.5) / len(self.choices)

    def contains(self, value: Any) -> bool:
        return self._index(value) >= 0

    def canonical(self, value: Any) -> Any:
        return self.choices[self._index(value)]

    def to_raw(self) -> dict[str, Any]:
        return {"type": "categorical", "choices": list(self.choices)}

    def _index(self, value: Any) -> int:
        # Compare the kind too: True == 1 and 1 == 1.0 in Python.
        kind = _kind(value)
        for i, choice in enumerate(self.choices):
            if kind == _kind(choice) and value == choice:
                return i
        return -1


Dimension = RealDim | IntDim | CategoricalDim


@dataclass(frozen=True)
class Space:
    """An immutable tuple of dimensions sorted by name; build it with ``parse_space``.

    Params are plain dicts ``{name: value}`` with Python values: ints for int
    dimensions, floats for real ones, the original choice for categorical ones.
    """

    dimensions: tuple[Dimension, ...]

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @property
    def initial_points(self) -> int:
        """Results known before the optimizer proposes from its model (told plus usable
        prior); fewer, and it proposes points of its initial design (``design``)."""
        return max(6, 2 * len(self.dimensions))

    def design(self, seed: int, n: int) -> list[dict[str, Any]]:
        """The first ``n`` points of the scrambled Sobol' sequence of ``seed`` (the
        optimizer's initial design; the first points do not depend on ``n``)."""
        from scipy.stats import qmc

        sobol = qmc.Sobol(len(self.dimensions), scramble=True, rng=seed % 2**63)
        return self.from_unit(sobol.random_base2(max(0, (n - 1).bit_length()))[:n])

    def sample(self, rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
        """``n`` independent uniform draws (random search)."""
        return self.from_unit(rng.random((n, len(self.dimensions))))

    def from_unit(self, u: np.ndarray) -> list[dict[str, Any]]:
        """Map rows of the unit cube (one column per dimension) to params."""
        columns = [d.from_unit(u[:, j]) for j, d in enumerate(self.dimensions)]
        return [dict(zip(self.names, row, strict=True)) for row in zip(*columns, strict=True)]

    def to_unit(self, params: Mapping[str, Any]) -> np.ndarray:
        """Map params (inside the space) to a point of the unit cube."""
        return np.array([d.to_unit(params[d.name]) for d in self.dimensions])

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether params name exactly this space's dimensions, each value inside it."""
        if not isinstance(params, Mapping) or set(params) != set(self.names):
            return False
        return all(d.contains(params[d.name]) for d in self.dimensions)

    def canonical(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Params (inside the space) with Python types, in dimension order."""
        if not self.contains(params):
            raise ValueError(f"params {params!r} are not inside the space {self.names}")
        return {d.name: d.canonical(params[d.name]) for d in self.dimensions}

    def to_json(self) -> dict[str, Any]:
        """The space as a JSON-able dict, in the same shape as its configuration table."""
        return {d.name: d.to_raw() for d in self.dimensions}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str, where: str = "stored space") -> Space:
        """Rebuild a space from ``to_json`` output (or its JSON text), validating it again."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError as e:
                raise ConfigError(f"{where}: not valid JSON ({e})") from None
        return parse_space(data, where)


def parse_space(raw: Any, where: str) -> Space:
    """Validate a space table (``{name: {type = ..., ...}}``) and build its ``Space``.

    ``where`` names the table (``"regions.toml: regions.eu.space"``) and starts
    every error message. Dimensions are kept sorted by name, so a space never
    depends on the key order of the table it came from (JSONB does not keep it).
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a table of dimensions, got {raw!r}")
    if not raw:
        raise ConfigError(f"{where}: must declare at least one dimension")
    dims = []
    for name, spec in raw.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"{where}: dimension name {name!r} must be an identifier")
        dims.append(_parse_dimension(name, spec, f"{where}.{name}"))
    return Space(tuple(sorted(dims, key=lambda d: d.name)))


def _parse_dimension(name: str, spec: Any, where: str) -> Dimension:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: must be a table with a 'type', got {spec!r}")
    if "type" not in spec:
        raise ConfigError(f"{where}: missing key 'type' (one of: {', '.join(_TYPES)})")
    kind = spec["type"]
    if kind not in _TYPES:
        raise ConfigError(f"{where}: unknown type {kind!r} (expected one of: {', '.join(_TYPES)})")
    for key in spec:
        if key not in _KEYS[kind]:
            allowed = ", ".join(_KEYS[kind])
            raise ConfigError(
                f"{where}: unknown key {key!r} (allowed for type {kind!r}: {allowed})"
            )
    if kind == "categorical":
        return CategoricalDim(name, _parse_choices(spec, where))
    low, high = (_parse_bound(spec, key, kind, where) for key in ("low", "high"))
    if low >= high:
        raise ConfigError(f"{where}: low ({low!r}) must be < high ({high!r})")
    prior = spec.get("prior", "linear")
    if prior not in _PRIORS:
        raise ConfigError(
            f"{where}: unknown prior {prior!r} (expected one of: {', '.join(_PRIORS)})"
        )
    if prior == "log" and low <= 0:
        raise ConfigError(f"{where}: low ({low!r}) must be > 0 for prior 'log'")
    if kind == "int":
        return IntDim(name, int(low), int(high), prior)
    return RealDim(name, float(low), float(high), prior)


def _parse_bound(spec: Mapping[str, Any], key: str, kind: str, where: str) -> Any:
    if key not in spec:
        raise ConfigError(f"{where}: missing key {key!r}")
    value = spec[key]
    if kind == "int":
        if _kind(value) != "int":
            raise ConfigError(f"{where}: {key} ({value!r}) must be an integer")
        return value
    if not _is_number(value):
        raise ConfigError(f"{where}: {key} ({value!r}) must be a number")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: {key} ({value!r}) must be finite")
    return value


def _parse_choices(spec: Mapping[str, Any], where: str) -> tuple[Any, ...]:
    if "choices" not in spec:
        raise ConfigError(f"{where}: missing key 'choices'")
    choices = spec["choices"]
    if isinstance(choices, str) or not isinstance(choices, Sequence):
        raise ConfigError(f"{where}: choices must be a list, got {choices!r}")
    if not choices:
        raise ConfigError(f"{where}: choices must not be empty")
    seen: list[Any] = []
    for choice in choices:
        kind = _kind(choice)
        if kind is None or (kind == "float" and not math.isfinite(choice)):
            raise ConfigError(
                f"{where}: choice {choice!r} must be a string, an integer, "
                "a finite float or a boolean"
            )
        if kind != _kind(choices[0]):
            raise ConfigError(
                f"{where}: choices must all be of one type, got {choices[0]!r} "
                f"({_kind(choices[0])}) and {choice!r} ({kind})"
            )
        if choice in seen:
            raise ConfigError(f"{where}: duplicate choice {choice!r}")
        seen.append(_plain(choice))
    return tuple(seen)


def _kind(value: Any) -> str | None:
    """'bool', 'int', 'float' or 'str' (NumPy scalars included), None for anything else."""
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, numbers.Integral):
        return "int"
    if isinstance(value, numbers.Real):
        return "float"
    if isinstance(value, str):
        return "str"
    return None


def _plain(value: Any) -> Any:
    """The plain Python value of a choice (a NumPy scalar becomes int, float, str or bool)."""
    return value.item() if isinstance(value, np.generic) else value


def _is_number(value: Any) -> bool:
    return _kind(value) in ("int", "float")
