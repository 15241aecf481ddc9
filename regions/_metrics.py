"""The built-in validation metrics, computed by torchmetrics on a model's whole output.

Each takes the model's output over all validation rows and the targets: a
prediction per row for ``rmse`` and ``mae`` (rating, regression), class
logits per row for ``accuracy``, ``log_loss`` and ``auc`` (classification;
``auc`` is one-vs-rest, macro-averaged, over more than two classes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["METRICS", "Metric", "default_metric"]


@dataclass(frozen=True)
class Metric:
    name: str
    minimize: bool
    tasks: tuple[str, ...]
    compute: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# torchmetrics (with scipy and matplotlib behind it) is imported when a metric is first
# computed, on a worker: a command that only checks a configuration or records a study
# never pays its seconds of import (the first hop starts that much sooner).


def _rmse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    import torchmetrics.functional as tmf

    return tmf.mean_squared_error(out.double(), y.double()).sqrt()


def _mae(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    import torchmetrics.functional as tmf

    return tmf.mean_absolute_error(out.double(), y.double())


def _accuracy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    import torchmetrics.functional as tmf

    return tmf.accuracy(out, y, task="multiclass", num_classes=out.shape[-1], average="micro")


def _log_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.cross_entropy(out.double(), y)


def _auc(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    import torchmetrics.functional as tmf

    probabilities = logits.float().softmax(-1)
    if probabilities.shape[-1] == 2:
        return tmf.auroc(probabilities[:, 1], target, task="binary")
    return tmf.auroc(probabilities, target, task="multiclass",
                     num_classes=probabilities.shape[-1])


_REGRESSION = ("rating", "regression")
METRICS = {m.name: m for m in (
    Metric("rmse", True, _REGRESSION, _rmse),
    Metric("mae", True, _REGRESSION, _mae),
    Metric("accuracy", False, ("classification",), _accuracy),
    Metric("log_loss", True, ("classification",), _log_loss),
    Metric("auc", False, ("classification",), _auc),
)}


def default_metric(task: str) -> str:
    """RMSE for rating and regression, accuracy for classification."""
    return "accuracy" if task == "classification" else "rmse"
