"""Model families: how a region's model is built from hyperparameters, trained and scored.

A ``Family`` is stateless and immutable, so one instance may serve many trials
and threads. ``build`` is deterministic given torch's global RNG state (the
caller seeds it); ``loss`` and ``evaluate`` draw no random numbers except those
of dropout in training mode. Every model takes the data dict of
``regions._tensors`` (or a batch of it) in ``forward``.

Built-ins: ``rating_mf`` (biased matrix factorisation, ``regions._models``) and
``mlp`` (a tabular MLP). ``package.module:function`` names a factory called as
``function(params, meta) -> torch.nn.Module``, imported when the family is
first asked for, never at configuration time; it declares the parameter
names it reads in its ``params`` attribute. Every family also accepts the
optimizer's parameters and the training settings (``TRAINING_PARAMS``).
"""

from __future__ import annotations

import importlib
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hoptune.core import ConfigError
from hoptune.regions._metrics import METRICS, default_metric
from hoptune.regions._schema import RegionConfig, did_you_mean
from hoptune.regions._trial_settings import TRAINING_PARAMS, check_training_space

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["Family", "OPTIMIZER_PARAMS", "Objective", "get_family", "objective_of"]

# torch is imported where a model is built, trained or scored, never to check a
# configuration or record a study: the command that starts a study does not pay
# its import, and its first hop starts that much sooner.

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

    The metric is the region's ``metric`` (default: RMSE for rating and
    regression, accuracy for classification; see ``regions._metrics``).
    ``loss`` is the task's loss (MSE, cross-entropy) plus
    ``model.regularization(batch)`` when the model defines it. A factory's
    model may bring its own objective instead (``Objective``): then its
    ``loss`` and ``metric`` are used, and its ``minimize``.
    """

    name: str
    default_params: Mapping[str, Any]

    def __init__(self, task: str, metric: str | None = None) -> None:
        self.task = task
        self._target = "rating" if task == "rating" else "y"
        self._metric = METRICS[metric or default_metric(task)]
        if task not in self._metric.tasks:
            raise ConfigError(f"metric {self._metric.name!r} is not for task {task!r} "
                              f"(it is for: {', '.join(self._metric.tasks)})")

    @property
    def metric_name(self) -> str:
        return self._metric.name

    @property
    def minimize(self) -> bool:
        return self._metric.minimize

    def scoring(self, meta: Mapping[str, Any], params: Mapping[str, Any] | None = None
                ) -> tuple[str, bool]:
        """(metric name, minimize) of the models built on ``meta`` (and ``params``)."""
        return self.metric_name, self.minimize

    def params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` merged over ``default_params``: the complete hyperparameters.

        A name the family does not read is refused (``ConfigError``).
        """
        self.unknown(params, "")
        return {**self.default_params, **params}

    def build(self, params: Mapping[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        """A new model for ``params`` (merged over the defaults) and the ingest's ``meta``."""
        return self._build(self.params(params), meta)

    def build_on_meta(self, params: Mapping[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        """``build``'s model with its tensors on the meta device (shapes, no memory) and the
        random draws of its initialisation left out (``_meta_build``)."""
        import torch

        from hoptune.regions._meta_build import NoValuesDrawn

        with torch.device("meta"), NoValuesDrawn():
            return self.build(params, meta)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training loss of ``batch``, regularisation included."""
        import torch.nn.functional as F

        objective = objective_of(model)
        if objective is not None:
            return objective.loss(model, batch)
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

        The model's output is gathered where the model and data are, chunk by
        chunk, and the metric computed once over all of it.
        """
        import torch

        rows = len(next(iter(data.values())))
        if rows == 0:
            raise ValueError("cannot evaluate on empty data")
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                objective = objective_of(model)
                if objective is not None:
                    return float(objective.metric(model, data))
                output = torch.cat([model({k: v[start: start + _EVAL_CHUNK]
                                           for k, v in data.items()})
                                    for start in range(0, rows, _EVAL_CHUNK)])
                return float(self._metric.compute(output, data[self._target]))
        finally:
            model.train(was_training)

    @property
    def known(self) -> frozenset[str]:
        """Every hyperparameter name the family, its optimizer or its training loop reads."""
        return (frozenset(self.default_params) | frozenset(OPTIMIZER_PARAMS)
                | frozenset(TRAINING_PARAMS))

    def unknown(self, names: Iterable[str], where: str) -> None:
        """Raise a ConfigError for the first of ``names`` this family does not read."""
        for key in names:
            if key not in self.known:
                raise ConfigError(
                    f"{where}family {self.name!r} has no parameter {key!r}"
                    f"{did_you_mean(key, sorted(self.known))} "
                    f"(known: {', '.join(sorted(self.known))}){self._declare_hint}"
                )

    _declare_hint = ""

    @abstractmethod
    def _build(self, params: dict[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        """Build from complete ``params``."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} task={self.task!r}>"


class _BuiltIn(Family):
    """A built-in family: its hyperparameters are its ``default_params``' names."""

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
        # init_std 0.01, not 0.1: on MovieLens 100k the larger start cost 0.01 to 0.04 of
        # held-out RMSE for every tuner (README, "How good is it"; BENCHMARKS.md, bench/quality.py)
        {"embedding_dim": 32, "reg": 1e-3, "init_std": 0.01, **_OPTIMIZER_DEFAULTS}
    )

    def _build(self, params: dict[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        from hoptune.regions._models import RatingMF

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
        from hoptune.regions._models import ACTIVATIONS, TabularMLP

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
    """A user's ``package.module:function``, which declares the parameter names it reads.

    The declaration is the function's ``params`` attribute: a dict of names and
    their defaults (or a list of names). Any other name in a region's params
    or space is refused, so a typo is an error rather than a setting that is
    silently never read.
    """

    def __init__(self, task: str, name: str, factory: Callable[..., Any],
                 metric: str | None = None) -> None:
        super().__init__(task, metric)
        self.name = name
        self._factory = factory
        declared = getattr(factory, "params", None) or {}
        if not isinstance(declared, Mapping):
            declared = dict.fromkeys(declared)
        self._declared = dict(declared)
        self.default_params = MappingProxyType(
            {**_OPTIMIZER_DEFAULTS, **{k: v for k, v in declared.items() if v is not None}})
        self._declare_hint = (
            "; a factory lists the names it reads in its `params` attribute"
            if not self._declared else "")

    @property
    def known(self) -> frozenset[str]:
        return super().known | frozenset(self._declared)

    def _build(self, params: dict[str, Any], meta: Mapping[str, Any]) -> nn.Module:
        from torch import nn

        made = self._factory(params, dict(meta))
        if isinstance(made, nn.Module):
            return made
        if isinstance(made, Objective):
            model = made.model
            if isinstance(model, nn.Module):
                object.__setattr__(model, _OBJECTIVE, made)  # a plain attribute, not a module
                return model
            raise ConfigError(f"family {self.name!r} returned an objective whose model is "
                              f"{type(model).__name__}, not a torch.nn.Module")
        raise ConfigError(
            f"family {self.name!r} returned {type(made).__name__}, not a torch.nn.Module "
            f"nor an object with model, loss, metric and minimize"
        )

    def scoring(self, meta: Mapping[str, Any], params: Mapping[str, Any] | None = None
                ) -> tuple[str, bool]:
        """A factory's objective says; a model of ``params`` is built to ask it."""
        import torch

        with torch.random.fork_rng(devices=[]):
            objective = objective_of(self.build(params or {}, meta))
        if objective is None:
            return super().scoring(meta)
        return getattr(objective, "metric_name", "metric"), bool(objective.minimize)


@runtime_checkable
class Objective(Protocol):
    """What a factory may return instead of a bare model: the model and how to judge it.

    ``loss(model, batch)`` is the training loss of a batch (a tensor with a
    gradient); ``metric(model, data)`` the validation metric over the whole
    validation set (a float; called in eval mode without gradients);
    ``minimize`` whether lower is better; ``metric_name`` (optional) its name
    in reports and on the card.
    """

    model: nn.Module
    minimize: bool

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def metric(self, model: nn.Module, data: dict[str, torch.Tensor]) -> float: ...


_OBJECTIVE = "_hoptune_objective"


def objective_of(model: nn.Module) -> Objective | None:
    """The objective a factory returned with ``model``, or None for a bare model."""
    return model.__dict__.get(_OBJECTIVE)


def get_family(region: RegionConfig) -> Family:
    """The family of ``region``, its ``params`` and ``space`` names checked for built-ins."""
    try:
        if region.family == "rating_mf":
            family: Family = _RatingMFFamily(region.task, region.metric)
        elif region.family == "mlp":
            family = _MLPFamily(region.task, region.metric)
        else:
            family = _FactoryFamily(region.task, region.family, _import(region), region.metric)
    except ConfigError as exc:
        if str(exc).startswith("region "):
            raise
        raise ConfigError(f"region {region.name!r}: {exc}") from None
    family.unknown(region.params, f"region {region.name!r}: params: ")
    family.unknown(region.space, f"region {region.name!r}: space: ")
    check_training_space(region)
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
