"""The training settings of one trial: region settings a trial's params may override.

``batch_size``, ``epochs``, ``optimizer``, ``lr_schedule`` and ``warmup_epochs``
are region settings, and also hyperparameters: a region's ``params`` or
``space`` may name them like any other, for built-in and factory families
alike. A trial's ``epochs`` is its own budget, within the study's (the
region's ``epochs``). ``lr_scale`` is the learning-rate schedule: a factor on
the optimizer's initial learning rate, per hop.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hoptune.core import ConfigError
from hoptune.regions._schema import OPTIMIZERS, SCHEDULES, RegionConfig

__all__ = ["AUTO_BATCH_SIZE", "TRAINING_PARAMS", "TrialSettings", "auto_batch_size",
           "check_training_space", "region_batch_size", "resolved_region", "trial_settings"]

AUTO_BATCH_SIZE = 256
"""``batch_size = "auto"`` for a region of at least four times as many training rows."""
MIN_AUTO_BATCH_SIZE = 32

TRAINING_PARAMS = ("batch_size", "epochs", "optimizer", "lr_schedule", "warmup_epochs")
"""Hyperparameters the training loop reads; every family accepts them."""


@dataclass(frozen=True)
class TrialSettings:
    batch_size: int
    epochs: int
    optimizer: str
    lr_schedule: str
    warmup_epochs: int

    def lr_scale(self, epoch: int, position: int, shards: int) -> float:
        """The learning-rate factor of hop (epoch, position) of this trial.

        Warm-up rises linearly over the first ``warmup_epochs`` (hop by hop);
        then ``cosine`` falls along half a cosine to zero at the trial's last
        hop, ``step`` divides by 10 at half and again at three quarters of the
        trial's epochs, ``none`` keeps 1.
        """
        hop, hops = epoch * shards + position, self.epochs * shards
        warm = min(self.warmup_epochs, self.epochs) * shards
        if hop < warm:
            return (hop + 1) / (warm + 1)
        if self.lr_schedule == "cosine":
            done = (hop - warm) / max(hops - warm, 1)
            return 0.5 * (1.0 + math.cos(math.pi * done))
        if self.lr_schedule == "step":
            return 0.1 ** sum(epoch >= m * self.epochs for m in (0.5, 0.75))
        return 1.0


def auto_batch_size(training_rows: int) -> int:
    """``batch_size = "auto"``: 256, or for a region of fewer than 1,024 training rows the
    largest power of two at most a quarter of them, at least 32.

    A small table's passes would otherwise be one or two steps each: 8 epochs of a
    ~400-row table in two shards were 16 optimizer steps at 256 a batch. Chosen on the
    real tables of ``bench/quality.py`` (README, "How good is it"): 64 for breast cancer's and
    diabetes' ~410 and ~320 training rows held out better than 256 and than 32.
    """
    batch = AUTO_BATCH_SIZE
    while batch > MIN_AUTO_BATCH_SIZE and 4 * batch > training_rows:
        batch //= 2
    return batch


def region_batch_size(region: RegionConfig, training_rows: int) -> int:
    """The batch size a study of ``region`` over ``training_rows`` rows trains with."""
    if region.batch_size == "auto":
        return auto_batch_size(training_rows)
    return region.batch_size


def resolved_region(region: RegionConfig, manifest: Mapping[str, Any]) -> RegionConfig:
    """``region`` with its ``"auto"`` settings made what its ingested data decides: the K the
    manifest recorded, the batch size of its training rows (``auto_batch_size``).

    A study records its region resolved, so its hops, its replay and the planner read
    numbers, and a study never changes them while it runs.
    """
    update: dict[str, Any] = {}
    if region.shards == "auto":
        update["shards"] = int(manifest["shards"])
    if region.batch_size == "auto":
        update["batch_size"] = region_batch_size(region, sum(int(r) for r in manifest["rows"]))
    return region.model_copy(update=update) if update else region


def trial_settings(region: RegionConfig, params: Mapping[str, Any]) -> TrialSettings:
    """The region's settings with the trial's ``params`` over them, checked.

    ``region`` is resolved (``resolved_region``) unless the trial's ``params`` set the
    batch size.
    """
    where = f"region {region.name!r}: parameter"
    if "batch_size" not in params and region.batch_size == "auto":
        raise ValueError(f"region {region.name!r}: batch_size 'auto' is decided when a "
                         "study starts (resolved_region); this region was not resolved")
    epochs = _integer(params.get("epochs", region.epochs), f"{where} 'epochs'", 1)
    if epochs > region.epochs:
        raise ConfigError(f"{where} 'epochs': {epochs} is more than the study's epochs "
                          f"({region.epochs})")
    return TrialSettings(
        batch_size=_integer(params.get("batch_size", region.batch_size),
                            f"{where} 'batch_size'", 1),
        epochs=epochs,
        optimizer=_choice(params.get("optimizer", region.optimizer), f"{where} 'optimizer'",
                          OPTIMIZERS),
        lr_schedule=_choice(params.get("lr_schedule", region.lr_schedule),
                            f"{where} 'lr_schedule'", SCHEDULES),
        warmup_epochs=_integer(params.get("warmup_epochs", region.warmup_epochs),
                               f"{where} 'warmup_epochs'", 0),
    )


def check_training_space(region: RegionConfig) -> None:
    """Refuse, in one line, a space or params whose training settings no trial could use.

    Each end of an int dimension and each choice of a categorical one is
    checked as a trial would be.
    """
    if region.batch_size == "auto":  # a number from the data once ingested: any will do here
        region = region.model_copy(update={"batch_size": AUTO_BATCH_SIZE})
    trial_settings(region, region.params)
    for name, dimension in region.space.items():
        if name not in TRAINING_PARAMS or not isinstance(dimension, dict):
            continue
        values = dimension.get("choices")
        if values is None:
            values = [dimension.get("low"), dimension.get("high")]
        for value in values if isinstance(values, list) else [values]:
            try:
                trial_settings(region, {**region.params, name: value})
            except ConfigError as exc:
                raise ConfigError(f"regions.{region.name}.space.{name}: "
                                  f"{str(exc).split(': ', 2)[-1]}") from None


def _integer(value: Any, where: str, low: int) -> int:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not float(value).is_integer() or value < low:
        raise ConfigError(f"{where}: must be an integer >= {low}, got {value!r}")
    return int(value)


def _choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
    return value
