"""A user's model family for hoptune: matrix factorisation trained and judged by MAE.

Name it in a region as ``family = "examples.mae_rating:build"`` (with the folder
holding ``examples/`` on the workers' ``PYTHONPATH``); ``examples/hoptune.toml``
is a complete configuration. The factory reads the parameters it declares in
``build.params`` (a name hoptune does not know there is refused), and returns
the model together with its own loss and metric, so hoptune trains on the
absolute error and ranks trials, prunes and promotes by validation MAE.

What the model receives (a rating region; see docs/own-model.md, "The data contract"):
``batch["user"]`` and ``batch["item"]`` are int64 row indices into the region's
id maps (``0 .. meta["n_users"] - 1``), ``batch["rating"]`` is float32.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class MAERating(nn.Module):
    """Global mean + user bias + item bias + <user vector, item vector>, clipped to the range."""

    def __init__(self, n_users: int, n_items: int, dim: int, mean: float,
                 rating_range: tuple[float, float]) -> None:
        super().__init__()
        self.user = nn.Embedding(n_users, dim)
        self.item = nn.Embedding(n_items, dim)
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        self.mean = nn.Parameter(torch.tensor(float(mean)))
        self.low, self.high = rating_range
        with torch.no_grad():
            nn.init.normal_(self.user.weight, std=0.05)
            nn.init.normal_(self.item.weight, std=0.05)
            self.user_bias.weight.zero_()
            self.item_bias.weight.zero_()

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        users, items = batch["user"], batch["item"]
        # -1 is an id the model never saw (serving, or a champion scoring new rows):
        # it contributes no bias and no vector, so the mean and the known side remain
        known_user, known_item = users >= 0, items >= 0
        users, items = users.clamp(min=0), items.clamp(min=0)
        score = (self.mean
                 + torch.where(known_user, self.user_bias(users).squeeze(-1), 0.0)
                 + torch.where(known_item, self.item_bias(items).squeeze(-1), 0.0)
                 + torch.where(known_user & known_item,
                               (self.user(users) * self.item(items)).sum(-1), 0.0))
        return score.clamp(self.low, self.high)


class MAEObjective:
    """The model, its training loss (L1 plus L2 on the batch's vectors) and its metric (MAE)."""

    minimize = True
    metric_name = "mae"

    def __init__(self, model: MAERating, reg: float) -> None:
        self.model = model
        self.reg = reg

    def loss(self, model: MAERating, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        error = (model(batch) - batch["rating"]).abs().mean()
        users, items = model.user(batch["user"]), model.item(batch["item"])
        vectors = users.pow(2).sum(-1) + items.pow(2).sum(-1)
        return error + self.reg * vectors.mean()

    def metric(self, model: MAERating, data: dict[str, torch.Tensor]) -> float:
        return float((model(data) - data["rating"]).abs().double().mean())


def build(params: dict[str, Any], meta: dict[str, Any]) -> MAEObjective:
    """hoptune calls this with the trial's params and the ingest's meta."""
    model = MAERating(meta["n_users"], meta["n_items"], int(params["dim"]), meta["rating_mean"],
                      tuple(meta["rating_range"]))
    return MAEObjective(model, float(params["reg"]))


build.params = {"dim": 16, "reg": 1e-3}
