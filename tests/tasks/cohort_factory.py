"""Factory models for the cohort tests, named in a region as
``tests.tasks.cohort_factory:FUNCTION``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Weighted(nn.Module):
    """scale * <w, x> + b, with the dot product summed left to right (a fixed order)."""

    def __init__(self, n_features: int, scale: float) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(n_features) * 0.1)
        self.b = nn.Parameter(torch.zeros(()))
        self.scale = scale

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.scale * torch.cumsum(batch["x"] * self.w, dim=-1)[..., -1] + self.b


class Itemizing(Weighted):
    """Reads a number out of a tensor in its forward: vmap cannot batch that."""

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        shift = float(batch["x"].mean().item())
        return super().forward(batch) + 0 * shift


class Branching(Weighted):
    """Takes a branch that depends on the data: vmap cannot batch that."""

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = super().forward(batch)
        return out if out.mean() > 0 else out * 1.0


def weighted(params: dict[str, Any], meta: dict[str, Any]) -> nn.Module:
    return Weighted(meta["n_features"], params.get("scale", 1.0))


def itemizing(params: dict[str, Any], meta: dict[str, Any]) -> nn.Module:
    return Itemizing(meta["n_features"], params.get("scale", 1.0))


def branching(params: dict[str, Any], meta: dict[str, Any]) -> nn.Module:
    return Branching(meta["n_features"], params.get("scale", 1.0))


# the names each factory reads, with their defaults (a factory declares them)
weighted.params = itemizing.params = branching.params = {"scale": 1.0}
