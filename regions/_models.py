"""The torch modules of the built-in families; each takes the data dict in ``forward``.

Parameters are created in a fixed order, so a model is determined by its
hyperparameters, the ingest's meta and torch's global RNG state.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from hoptune import kernels

__all__ = ["ACTIVATIONS", "RatingMF", "TabularMLP"]

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


def _to_range(z: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Map scores onto (low, high): ``low + (high - low) * sigmoid(z)``.

    The scaled sigmoid is one fused kernel on a GPU (and its safe formulation
    never overflows ``exp`` for large negative scores).
    """
    return low + kernels.scaled_sigmoid(z, high - low)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a * b).sum(-1)``, summed left to right (``cumsum``; in float64 on the CPU).

    Zeros appended to the last axis leave it bitwise unchanged: a fused cohort
    zero-pads smaller embeddings to its largest (``regions._fusion``), and a
    vectorised ``sum`` would group the terms of a longer row differently.
    """
    return torch.cumsum(a * b, dim=-1)[..., -1]


class RatingMF(nn.Module):
    """Biased matrix factorisation: global + user + item bias + <user vector, item vector>.

    The score is mapped into the rating range by ``_to_range``. The global bias
    starts at the score of the training mean rating, the other biases at zero,
    the vectors at N(0, init_std²). ``regularization`` is ``reg`` times the mean
    squared norm of the batch's user and item vectors. Dot products and norms
    sum left to right (``_dot``), so zero padding does not change them.
    """

    def __init__(
        self,
        n_users: int,
        n_items: int,
        embedding_dim: int,
        reg: float,
        init_std: float,
        rating_range: tuple[float, float],
        rating_mean: float,
    ) -> None:
        super().__init__()
        self.low, self.high = float(rating_range[0]), float(rating_range[1])
        self.reg = reg
        self.user_vectors = nn.Embedding(n_users, embedding_dim)
        self.item_vectors = nn.Embedding(n_items, embedding_dim)
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        share = (rating_mean - self.low) / (self.high - self.low)
        share = min(max(share, 1e-3), 1 - 1e-3)
        self.global_bias = nn.Parameter(torch.tensor(math.log(share / (1 - share))))
        with torch.no_grad():
            nn.init.normal_(self.user_vectors.weight, std=init_std)
            nn.init.normal_(self.item_vectors.weight, std=init_std)
            self.user_bias.weight.zero_()
            self.item_bias.weight.zero_()

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        users, items = batch["user"], batch["item"]
        if not self.training:  # scoring or serving: rows may hold ids never trained on
            return self._with_unknown(users, items)
        z = (
            self.global_bias
            + self.user_bias(users).squeeze(-1)
            + self.item_bias(items).squeeze(-1)
            + _dot(self.user_vectors(users), self.item_vectors(items))
        )
        return _to_range(z, self.low, self.high)

    def _with_unknown(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """The same score, where index -1 (an id this model never saw) adds no bias and
        no vector term: an unknown user gets global + item bias, an unknown item
        global + user bias, both unknown the global bias alone."""
        known_user, known_item = users >= 0, items >= 0
        u, i = users.clamp(min=0), items.clamp(min=0)
        z = (
            self.global_bias
            + torch.where(known_user, self.user_bias(u).squeeze(-1), 0.0)
            + torch.where(known_item, self.item_bias(i).squeeze(-1), 0.0)
            + torch.where(known_user & known_item,
                          (self.user_vectors(u) * self.item_vectors(i)).sum(-1), 0.0)
        )
        return _to_range(z, self.low, self.high)

    def regularization(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        users = self.user_vectors(batch["user"])
        items = self.item_vectors(batch["item"])
        users, items = _dot(users, users), _dot(items, items)
        return self.reg * (users + items).mean()


class TabularMLP(nn.Module):
    """``layers`` blocks of Linear(width hidden) + activation + dropout, then a linear head.

    Regression: one output per row (the head's bias starts at the training
    label mean). Classification: ``n_classes`` logits per row.
    """

    def __init__(
        self,
        n_features: int,
        n_classes: int | None,
        hidden: int,
        layers: int,
        dropout: float,
        activation: str,
        label_mean: float,
    ) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        width = n_features
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), ACTIVATIONS[activation](), nn.Dropout(dropout)]
            width = hidden
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(width, n_classes or 1)
        self.regression = n_classes is None
        if self.regression:
            with torch.no_grad():
                self.head.bias.fill_(label_mean)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        output = self.head(self.body(batch["x"]))
        return output.squeeze(-1) if self.regression else output
