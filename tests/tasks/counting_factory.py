"""A rating model that counts what training fed it, named in configurations as
``tests.tasks.counting_factory:build``: its buffers say, from any checkpoint,
how many batches a trial trained on and the largest batch it saw."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Counting(nn.Module):
    def __init__(self, n_users: int, n_items: int, dim: int, mean: float) -> None:
        super().__init__()
        self.user = nn.Embedding(n_users, dim)
        self.item = nn.Embedding(n_items, dim)
        self.mean = mean
        self.register_buffer("batches", torch.zeros((), dtype=torch.int64))
        self.register_buffer("largest_batch", torch.zeros((), dtype=torch.int64))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.training:
            self.batches += 1
            self.largest_batch.clamp_(min=len(batch["user"]))
        return self.mean + (self.user(batch["user"]) * self.item(batch["item"])).sum(-1)


def build(params: dict[str, Any], meta: dict[str, Any]) -> nn.Module:
    return Counting(meta["n_users"], meta["n_items"], params["dim"], meta["rating_mean"])


build.params = {"dim": 4}


class Peaked:
    """The counting model judged by how far its batch count is from ``peak``: the best
    epoch is the one that ends nearest ``peak`` batches, whatever the training did."""

    minimize = True
    metric_name = "distance"

    def __init__(self, model: Counting, peak: int) -> None:
        self.model, self.peak = model, peak

    def loss(self, model: Counting, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (model(batch) - batch["rating"]).pow(2).mean()

    def metric(self, model: Counting, data: dict[str, torch.Tensor]) -> float:
        return float(abs(int(model.batches) - self.peak))


def build_peaked(params: dict[str, Any], meta: dict[str, Any]) -> Peaked:
    return Peaked(build(params, meta), int(params["peak"]))


build_peaked.params = {"dim": 4, "peak": 0}
