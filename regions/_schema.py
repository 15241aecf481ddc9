"""The frozen, validated shapes of a configuration file's tables.

``_config`` reads the file, merges ``[defaults]`` into each region and turns
pydantic's errors into one line; this module only says what is valid. Each
field's expectation, quoted in error messages, is in ``EXPECT``.
"""

from __future__ import annotations

import copy
import difflib
import re
import zlib
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "EXPECT",
    "Defaults",
    "OPTIMIZERS",
    "SCHEDULES",
    "TAGS",
    "Pruner",
    "RatingColumns",
    "RegionConfig",
    "Schedule",
    "TabularColumns",
    "did_you_mean",
    "quote",
    "region_seed",
]

EXPECT = {
    **dict.fromkeys(("shards", "batch_size"), "an integer >= 1 or 'auto'"),
    **dict.fromkeys(("epochs", "trials", "parallel"), "an integer >= 1"),
    "fuse": "an integer from 1 to 64 or 'auto'",
    **dict.fromkeys(("seed", "max_redeliveries"), "an integer >= 0"),
    **dict.fromkeys(("min_epochs", "brackets"), "an integer >= 1"),
    "reduction_factor": "an integer >= 2",
    "validation_fraction": "a number > 0 and < 1",
    "optimizer": "one of fused_adamw, fused_sgd, adamw, sgd",
    "select": "'best' or 'last'",
    "lr_schedule": "one of none, cosine, step",
    "warmup_epochs": "an integer >= 0",
    "metric": "one of rmse, mae, accuracy, log_loss, auc",
    "params": "a table of hyperparameters",
    "space": "a table with one table per dimension",
    "pruner": "a table",
    "data": "a path ending in .csv or .parquet",
    "family": "'rating_mf', 'mlp' or 'package.module:function'",
    "task": "one of rating, regression, classification",
    "columns": "a table of column names",
    **dict.fromkeys(("user", "item", "rating", "label"), "a column name"),
    "features": "a list of one or more column names",
    "rating_range": "two numbers [low, high] with low < high",
    "cron": "a cron expression of 5 fields",
    "timezone": "a time zone name such as 'UTC' or 'Europe/Berlin'",
}
TAGS = ("rating", "tabular")
OPTIMIZERS = ("fused_adamw", "fused_sgd", "adamw", "sgd")
SCHEDULES = ("none", "cosine", "step")

_FACTORY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_SUFFIXES = {".csv": "csv", ".parquet": "parquet"}

Count = Annotated[int, Strict(), Field(ge=1)]
Natural = Annotated[int, Strict(), Field(ge=0)]
Number = Annotated[float, Strict()]
Name = Annotated[str, Strict(), Field(min_length=1)]


def quote(value: Any) -> str:
    """A value as the user wrote it in TOML, near enough to recognise it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {quote(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(quote(v) for v in value) + "]"
    return repr(value)


def did_you_mean(name: Any, known: Any) -> str:
    """`` (did you mean 'x'?)`` where ``name`` is close to one of the ``known`` names, else ''.

    A typo (``famly``, ``nrth``) is then named with its fix in the same line. Only a
    name with the same first letter is offered: a typo seldom hits it, and ``south``
    is another region than ``north``, not a misspelling of it.
    """
    if not isinstance(name, str):
        return ""
    close = [k for k in difflib.get_close_matches(name, [str(k) for k in known], n=3,
                                                  cutoff=0.6) if k[:1] == name[:1]]
    return f" (did you mean {close[0]!r}?)" if close else ""


def region_seed(name: str) -> int:
    """The seed of a region that sets none: its name's CRC-32, stable across runs and hosts.

    Regions then draw their own first proposals and minibatch orders instead
    of all the same ones; below 2**31, as the study database stores it.
    """
    return zlib.crc32(name.encode()) % 2**31


def _problem(message: str, *field: str) -> PydanticCustomError:
    """An error whose wording is ours; ``field`` extends the path pydantic reports."""
    return PydanticCustomError("hoptune", "{message}", {"message": message, "field": field})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pruner(_Frozen):
    """Successive-halving settings used by the tuner's pruner."""

    # 2, not 3: on MovieLens 100k it halved the gap to random search's champion at 41% of
    # its epochs (README, "How good is it"; BENCHMARKS.md, bench/quality.py)
    reduction_factor: Annotated[int, Strict(), Field(ge=2)] = 2
    min_epochs: Count = 1
    # judge a trial again at every rung it passed, against the values recorded there since
    recheck: Annotated[bool, Strict()] = True
    # trials take turns over 3 first rungs (after 1, 2 and 4 epochs at the defaults): on
    # MovieLens 100k the trials that led after one epoch were not those that ended best
    # (README, "How good is it"; BENCHMARKS.md, bench/quality.py)
    brackets: Count = 3


class Schedule(_Frozen):
    """When nightly retraining starts: a 5-field cron expression in a time zone."""

    cron: Name = "0 2 * * *"
    timezone: Name = "UTC"

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError("not 5 fields")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("unknown time zone") from None
        return value


class RatingColumns(_Frozen):
    """Column names of a rating table: user id, item id, rating."""

    user: Name = "user_id"
    item: Name = "item_id"
    rating: Name = "rating"

    @model_validator(mode="after")
    def _distinct(self) -> RatingColumns:
        _check_distinct([self.user, self.item, self.rating])
        return self


class TabularColumns(_Frozen):
    """Column names of a tabular table: numeric features and the label."""

    features: Annotated[tuple[Name, ...], Field(min_length=1)]
    label: Name

    @model_validator(mode="after")
    def _distinct(self) -> TabularColumns:
        _check_distinct([*self.features, self.label])
        return self


def _check_distinct(names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise _problem(f"column {name!r} is named twice")
        seen.add(name)


def _columns_kind(value: Any) -> str:
    if isinstance(value, TabularColumns):
        return "tabular"
    if isinstance(value, dict) and ("features" in value or "label" in value):
        return "tabular"
    return "rating"


Columns = Annotated[
    Annotated[RatingColumns, Tag("rating")] | Annotated[TabularColumns, Tag("tabular")],
    Discriminator(_columns_kind),
]


class Defaults(_Frozen):
    """What ``[defaults]`` may set and every region inherits (and may override)."""

    # an integer forces K; "auto" chooses it at ingest from the data and the measured costs
    shards: Count | Literal["auto"] = "auto"
    epochs: Count = 3
    # "auto": 256, fewer for a small region (``regions.auto_batch_size``), when a study starts
    batch_size: Count | Literal["auto"] = "auto"
    seed: Natural = 0
    validation_fraction: Annotated[float, Strict(), Field(gt=0, lt=1)] = 0.2
    optimizer: Literal["fused_adamw", "fused_sgd", "adamw", "sgd"] = "fused_adamw"
    trials: Count = 16
    parallel: Count = 4
    # trials of a study that train together as one fused model in one hop (1: each alone);
    # "auto": as many as the training device suits (``regions.fuse_limit``)
    fuse: Annotated[int, Strict(), Field(ge=1, le=64)] | Literal["auto"] = 1
    max_redeliveries: Natural = 3
    params: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, Any] = Field(default_factory=dict)
    pruner: Pruner = Pruner()
    lr_schedule: Literal["none", "cosine", "step"] = "none"
    warmup_epochs: Natural = 0
    select: Literal["best", "last"] = "best"
    # tell the optimizer what running trials reached so far, not only what ended trials did
    tell_running: Annotated[bool, Strict()] = False
    # tell the optimizer each result with the epochs it was reached in, a pruned trial's
    # unpenalised: a model of configuration and fidelity, proposing for the whole budget
    tell_epochs: Annotated[bool, Strict()] = False
    metric: Literal["rmse", "mae", "accuracy", "log_loss", "auc"] | None = None
    # what only a region needs may stand here too, for every region to inherit
    data: Path | None = None
    family: Name | None = None
    task: Literal["rating", "regression", "classification"] | None = None
    columns: Columns | None = None
    rating_range: tuple[Number, Number] | None = None

    @field_validator("params", mode="before")
    @classmethod
    def _scalar_params(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(item, (bool, int, float, str)):
                    raise _problem(f"must be a number, string or boolean, got {quote(item)}", key)
            return copy.deepcopy(value)
        return value

    @field_validator("space", mode="before")
    @classmethod
    def _tables(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(item, dict):
                    raise _problem(
                        f"must be a table such as {{ type = ... }}, got {quote(item)}", key
                    )
            return copy.deepcopy(value)
        return value

    @field_validator("data", mode="before")
    @classmethod
    def _data_path(cls, value: Any, info: ValidationInfo) -> Path:
        if not isinstance(value, str) or Path(value).suffix.lower() not in _SUFFIXES:
            raise ValueError("bad data path")
        base = (info.context or {}).get("base", Path.cwd())
        return (Path(base) / Path(value).expanduser()).resolve()

    @field_validator("family")
    @classmethod
    def _family(cls, value: str | None) -> str | None:
        if value not in (None, "rating_mf", "mlp") and not _FACTORY.fullmatch(value):
            raise _problem(f"must be {EXPECT['family']}, got {quote(value)}"
                           + did_you_mean(value, ("rating_mf", "mlp")))
        return value

    @field_validator("rating_range")
    @classmethod
    def _ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError("low >= high")
        return value


class RegionConfig(Defaults):
    """One region: its data, model family, task and the settings it inherited.

    Frozen: no attribute can be reassigned. ``params`` and ``space`` are plain
    dicts (JSON-ready), owned by this object; treat them as read-only.
    """

    name: Name
    data: Path
    family: Name
    task: Literal["rating", "regression", "classification"]
    columns: Columns

    @property
    def format(self) -> str:
        """``"csv"`` or ``"parquet"``, from the suffix of ``data``."""
        return _SUFFIXES[self.data.suffix.lower()]

    @property
    def fuses(self) -> bool:
        """Whether the region's trials may train as cohorts (``fuse`` above 1, or "auto")."""
        return self.fuse == "auto" or self.fuse > 1

    @model_validator(mode="before")
    @classmethod
    def _implied(cls, data: Any) -> Any:
        """``rating_mf`` implies task ``rating``; a rating task has default column names."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("name"), str):  # no seed of its own: one of the region's name
            data.setdefault("seed", region_seed(data["name"]))
        if data.get("family") == "rating_mf":
            data.setdefault("task", "rating")
        if data.get("task") == "rating":
            data.setdefault("columns", {})
        return data

    @model_validator(mode="after")
    def _consistent(self) -> RegionConfig:
        rating = self.task == "rating"
        if self.family == "rating_mf" and not rating:
            raise _problem(f"family 'rating_mf' needs task 'rating', got {self.task!r}", "task")
        if self.family == "mlp" and rating:
            raise _problem(
                "family 'mlp' needs task 'regression' or 'classification', got 'rating'", "task"
            )
        if rating and not isinstance(self.columns, RatingColumns):
            raise _problem("task 'rating' needs columns { user, item, rating }", "columns")
        if not rating and not isinstance(self.columns, TabularColumns):
            raise _problem(f"task {self.task!r} needs columns {{ features, label }}", "columns")
        if rating and self.rating_range is None:
            raise _problem("required for task 'rating'", "rating_range")
        if not rating and self.rating_range is not None:
            raise _problem("only for task 'rating'", "rating_range")
        return self
