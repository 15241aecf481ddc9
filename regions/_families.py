"""Model families: how a region's model is built from hyperparameters, trained and scored.

A ``Family`` is stateless and immutable, so one instance may serve many trials
and threads. ``build`` is deterministic given torch's global RNG state (the
caller seeds it); ``loss`` and ``evaluate`` draw no random numbers except those
of dropout in training mode. Every model takes the data dict of
``regions._tensors`` (or a batch of it) in ``forward``.

Built-ins: ``rating_mf`` (biased matrix factorisation, ``regions._models``) and
``mlp`` (a tabular MLP). ``package.module:function`` names a factory called as
``function(params, meta) -> torch.nn.Module``, imported when the family is
first asked for, never at configuration time.
"""

from __future__ import annotations

import importlib
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hoptune.core import ConfigError
from hoptune.regions._models import ACTIVATIONS, RatingMF, TabularMLP
from hoptune.regions._schema import RegionConfig

__all__ = ["Family", "OPTIMIZER_PARAMS", "get_family"]

OPTIMIZER_PARAMS = (
    "lr",
    "weight_decay",
    "momentum",
    "dampening",
    "nesterov",
    "beta1",
    "beta2",
    "eps",
    "amsgrad",
)
"""Hyperparameters the optimizer reads; ``build`` accepts and ignores them."""

_OPTIMIZER_DEFAULTS = {"lr": 0.01, "weight_decay": 0.0}
_EVAL_CHUNK = 65536


class Family(ABC):
    """Builds, trains and scores the models of one region's task.

    ``metric_name``/``minimize`` follow the task: RMSE (minimize) for rating and
    regression, accuracy (maximize) for classification. ``loss`` is the task's
    loss plus ``model.regularization(batch)`` when the model defines it.
    """

    name: str
    default_params: Mapping[str, Any]

    def __init__(self, task: str) -> None:
        self.task = task
        self._target = "rating" if task == "rating" else "y"

    @property
    def metric_name(self) -> str:
        return "accuracy" if self.task == "classification" else "rmse"

    @property
    def minimize(self) -> bool:
        return self.task != "classification"

    def params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` merged over ``default_params``: the complete hyperparameters."""
        return {**self.default_params, **params}

    def build(self, params: Mapping[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        """A new model for ``params`` (merged over the defaults) and the ingest's ``meta``."""
        return self._build(self.params(params), meta)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training loss of ``batch``, regularisation included."""
        output = model(batch)
        target = batch[self._target]
        if self.task == "classification":
            loss = F.cross_entropy(output, target)
        else:
            loss = F.mse_loss(output, target)
        regularization = getattr(model, "regularization", None)
        return loss + regularization(batch) if regularization is not None else loss

    def evaluate(self, model: nn.Module, data: dict[str, torch.Tensor]) -> float:
        """The metric over all of ``data``, in eval mode and without gradients.

        Computed where the model and data are, summed there in float64, and read
        once at the end (a GPU is not waited for chunk by chunk).
        """
        target = data[self._target]
        rows = len(target)
        if rows == 0:
            raise ValueError("cannot evaluate on empty data")
        was_training = model.training
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=target.device)
        try:
            with torch.no_grad():
                for start in range(0, rows, _EVAL_CHUNK):
                    chunk = {k: v[start : start + _EVAL_CHUNK] for k, v in data.items()}
                    output = model(chunk)
                    if self.task == "classification":
                        hits = output.argmax(dim=-1) == chunk[self._target]
                        total += hits.sum()
                    else:
                        total += (output - chunk[self._target]).double().pow(2).sum()
        finally:
            model.train(was_training)
        value = float(total)
        return value / rows if self.task == "classification" else (value / rows) ** 0.5

    @abstractmethod
    def _build(self, params: dict[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        """Build from complete ``params``."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} task={self.task!r}>"


class _BuiltIn(Family):
    """A family whose hyperparameters are known: other names (typos) are refused."""

    @property
    def known(self) -> frozenset[str]:
        return frozenset(self.default_params) | frozenset(OPTIMIZER_PARAMS)

    def unknown(self, names: Iterable[str], where: str) -> None:
        """Raise a ConfigError for the first of ``names`` this family does not know."""
        for key in names:
            if key not in self.known:
                raise ConfigError(
                    f"{where}family {self.name!r} has no parameter {key!r} "
                    f"(known: {', '.join(sorted(self.known))})"
                )

    def params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self.unknown(params, "")
        return super().params(params)

    def _number(self, params: dict[str, Any], key: str, kind: type, low: float) -> Any:
        value = params[key]
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok and kind is int:
            ok = isinstance(value, numbers.Integral) or float(value).is_integer()
        if not ok or value < low:
            what = "an integer" if kind is int else "a number"
            raise ConfigError(
                f"family {self.name!r}: parameter {key!r} must be {what} >= {low}, got {value!r}"
            )
        return kind(value)


class _RatingMFFamily(_BuiltIn):
    name = "rating_mf"
    default_params = MappingProxyType(
        {"embedding_dim": 32, "reg": 1e-3, "init_std": 0.1, **_OPTIMIZER_DEFAULTS}
    )

    def _build(self, params: dict[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        low, high = meta["rating_range"]
        return RatingMF(
            n_users=meta["n_users"],
            n_items=meta["n_items"],
            embedding_dim=self._number(params, "embedding_dim", int, 1),
            reg=self._number(params, "reg", float, 0),
            init_std=self._number(params, "init_std", float, 0),
            rating_range=(low, high),
            rating_mean=meta["rating_mean"],
        )


class _MLPFamily(_BuiltIn):
    name = "mlp"
    default_params = MappingProxyType(
        {"hidden": 64, "layers": 2, "dropout": 0.0, "activation": "relu", **_OPTIMIZER_DEFAULTS}
    )

    def _build(self, params: dict[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        activation = params["activation"]
        if activation not in ACTIVATIONS:
            raise ConfigError(
                f"family 'mlp': parameter 'activation' must be one of "
                f"{', '.join(ACTIVATIONS)}, got {activation!r}"
            )
        dropout = self._number(params, "dropout", float, 0)
        if dropout >= 1:
            raise ConfigError(f"family 'mlp': parameter 'dropout' must be < 1, got {dropout!r}")
        classes = meta.get("n_classes") if self.task == "classification" else None
        return TabularMLP(
            n_features=meta["n_features"],
            n_classes=classes,
            hidden=self._number(params, "hidden", int, 1),
            layers=self._number(params, "layers", int, 0),
            dropout=dropout,
            activation=activation,
            label_mean=meta.get("label_mean", 0.0),
        )


class _FactoryFamily(Family):
    """A user's ``package.module:function``; any parameter names are passed through."""

    default_params = MappingProxyType(dict(_OPTIMIZER_DEFAULTS))

    def __init__(self, task: str, name: str, factory: Callable[..., Any]) -> None:
        super().__init__(task)
        self.name = name
        self._factory = factory

    def _build(self, params: dict[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        model = self._factory(params, dict(meta))
        if not isinstance(model, nn.Module):
            raise ConfigError(
                f"family {self.name!r} returned {type(model).__name__}, not a torch.nn.Module"
            )
        return model


def get_family(region: RegionConfig) -> Family:
    """The family of ``region``, its ``params`` and ``space`` names checked for built-ins."""
    if region.family == "rating_mf":
        family: Family = _RatingMFFamily(region.task)
    elif region.family == "mlp":
        family = _MLPFamily(region.task)
    else:
        family = _FactoryFamily(region.task, region.family, _import(region))
    if isinstance(family, _BuiltIn):
        family.unknown(region.params, f"region {region.name!r}: params: ")
        family.unknown(region.space, f"region {region.name!r}: space: ")
    return family


def _import(region: RegionConfig) -> Callable[..., Any]:
    module_name, _, function_name = region.family.partition(":")
    where = f"region {region.name!r}: family {region.family!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{where}: cannot import {module_name!r}: {exc}") from None
    factory = getattr(module, function_name, None)
    if factory is None:
        raise ConfigError(f"{where}: module {module_name!r} has no {function_name!r}")
    if not callable(factory):
        raise ConfigError(f"{where}: {function_name!r} is not callable")
    return factory
