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

__all__ = ["TRAINING_PARAMS", "TrialSettings", "check_training_space", "trial_settings"]

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


def trial_settings(region: RegionConfig, params: Mapping[str, Any]) -> TrialSettings:
    """The region's settings with the trial's ``params`` over them, checked."""
    where = f"region {region.name!r}: parameter"
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
