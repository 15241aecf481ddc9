"""A model factory from outside hoptune, named in a configuration as
``tests.regions.tiny_factory:build`` (the families tests import it by that name)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class TinyRegressor(nn.Module):
    """A linear model over the standardised features, scaled by the ``scale`` parameter."""

    def __init__(self, n_features: int, scale: float) -> None:
        super().__init__()
        self.linear = nn.Linear(n_features, 1)
        self.scale = scale

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.scale * self.linear(batch["x"]).squeeze(-1)


def build(params: dict[str, Any], meta: dict[str, Any]) -> nn.Module:
    return TinyRegressor(meta["n_features"], params["scale"])


def build_nothing(params: dict[str, Any], meta: dict[str, Any]) -> None:
    return None


NOT_A_FUNCTION = 3


build.params = {"scale": 1.0}
build_nothing.params = ()
