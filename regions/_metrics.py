"""The built-in validation metrics, computed by torchmetrics on a model's whole output.

Each takes the model's output over all validation rows and the targets: a
prediction per row for ``rmse`` and ``mae`` (rating, regression), class
logits per row for ``accuracy``, ``log_loss`` and ``auc`` (classification;
``auc`` is one-vs-rest, macro-averaged, over more than two classes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import torchmetrics.functional as tmf

__all__ = ["METRICS", "Metric", "default_metric"]


@dataclass(frozen=True)
class Metric:
    name: str
    minimize: bool
    tasks: tuple[str, ...]
    compute: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _auc(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    probabilities = logits.float().softmax(-1)
    if probabilities.shape[-1] == 2:
        return tmf.auroc(probabilities[:, 1], target, task="binary")
    return tmf.auroc(probabilities, target, task="multiclass",
                     num_classes=probabilities.shape[-1])


_REGRESSION = ("rating", "regression")
METRICS = {m.name: m for m in (
    Metric("rmse", True, _REGRESSION,
           lambda out, y: tmf.mean_squared_error(out.double(), y.double()).sqrt()),
    Metric("mae", True, _REGRESSION,
           lambda out, y: tmf.mean_absolute_error(out.double(), y.double())),
    Metric("accuracy", False, ("classification",),
           lambda out, y: tmf.accuracy(out, y, task="multiclass", num_classes=out.shape[-1],
                                       average="micro")),
    Metric("log_loss", True, ("classification",),
           lambda out, y: F.cross_entropy(out.double(), y)),
    Metric("auc", False, ("classification",), _auc),
)}


def default_metric(task: str) -> str:
    """RMSE for rating and regression, accuracy for classification."""
    return "accuracy" if task == "classification" else "rmse"
