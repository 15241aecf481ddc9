"""The torch modules of the built-in families; each takes the data dict in ``forward``.

Parameters are created in a fixed order, so a model is determined by its
hyperparameters, the ingest's meta and torch's global RNG state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hoptune import kernels

__all__ = ["ACTIVATIONS", "RatingMF", "TabularMLP", "gather_rows", "stacked_rating_losses"]

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


def _to_range(z: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Map scores onto (low, high): ``low + (high - low) * sigmoid(z)``.

    The scaled sigmoid is one fused kernel on a GPU (and its safe formulation
    never overflows ``exp`` for large negative scores).
    """
    return low + kernels.scaled_sigmoid(z, high - low)


class _LeftToRightDot(torch.autograd.Function):
    """``cumsum(a * b)[..., -1]`` with the gradient autograd gives it, computed directly.

    Autograd of that forward selects the last position (zeros elsewhere), runs a
    reversed cumulative sum over them (flips and a cumsum: every position gets
    ``g`` plus exact zeros, so exactly ``g``) and multiplies by the other
    factor: ``g * b`` and ``g * a``. This backward computes those two products
    only, bit for bit the same, without the zeros, flips and cumsum.
    """

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # the forward takes ctx (no setup_context): apply then skips binding its arguments
        # through inspect.signature on every call; a fused cohort of rating models calls
        # stacked_rating_losses, never vmap, so no vmap rule is needed
        ctx.save_for_backward(a, b)
        return torch.cumsum(a * b, dim=-1)[..., -1]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        a, b = ctx.saved_tensors
        grad = grad.unsqueeze(-1)
        return (grad * b if ctx.needs_input_grad[0] else None,
                grad * a if ctx.needs_input_grad[1] else None)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a * b).sum(-1)``, summed left to right (``cumsum``; in float64 on the CPU).

    Zeros appended to the last axis leave it bitwise unchanged: a fused cohort
    zero-pads smaller embeddings to its largest (``regions._fusion``), and a
    vectorised ``sum`` would group the terms of a longer row differently.
    """
    return _LeftToRightDot.apply(a, b)


def gather_rows(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rows ``ids`` (any shape) of the 2-d ``weight``: ``weight[ids]``.

    ``index_select``, whose gradient adds each id's row into zeros in the order
    of ``ids`` (``index_add_``): a model alone and its fused cohort, whose
    stacked tables are gathered at offset ids, sum every row's gradient in the
    same order, and on the CPU it is several times faster than the embedding's
    own backward for a cohort's tables.
    """
    return weight.index_select(0, ids.reshape(-1)).view(*ids.shape, weight.shape[-1])


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
        return _to_range(rating_score(self.global_bias, *self._rows(users, items)),
                         self.low, self.high)

    def _rows(self, users: torch.Tensor, items: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The batch's user and item biases and vectors."""
        return (gather_rows(self.user_bias.weight, users).squeeze(-1),
                gather_rows(self.item_bias.weight, items).squeeze(-1),
                gather_rows(self.user_vectors.weight, users),
                gather_rows(self.item_vectors.weight, items))

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
        users = gather_rows(self.user_vectors.weight, batch["user"])
        items = gather_rows(self.item_vectors.weight, batch["item"])
        return self.reg * squared_norms(users, items).mean()


def rating_score(global_bias: torch.Tensor, user_bias: torch.Tensor, item_bias: torch.Tensor,
                 users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """A rating model's score (before ``_to_range``) from its batch's gathered rows."""
    return global_bias + user_bias + item_bias + _dot(users, items)


def squared_norms(users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """Each row's squared user and item vector norms, summed: what ``reg`` weighs."""
    return _dot(users, users) + _dot(items, items)


def stacked_rating_losses(model: RatingMF, params: Mapping[str, torch.Tensor],
                          reg: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The training losses of K rating models stacked along a leading trial axis.

    ``params`` holds each of ``model``'s parameters as ``(K, *shape)`` (``model``
    gives only the rating range), ``reg`` the K models' ``reg``, ``batch`` each
    model's own batch as row k of every tensor. Trial k's loss is bit for bit
    ``family.loss`` of model k alone on its batch: the same operations on each
    trial's rows (its tables gathered at offset ids, so each row's gradient adds
    up in the same order; its mean squared error and mean norm reduced over its
    own row), with no ``vmap`` and no per-trial module calls.
    """
    ratings = batch["rating"]
    trials = ratings.shape[0]
    # trial k's row r of a table stacked as (K * rows, width) is row k * rows + r
    ids = {}
    for column, table in (("user", "user_bias.weight"), ("item", "item_bias.weight")):
        offsets = torch.arange(trials, device=ratings.device).mul_(params[table].shape[1])
        ids[column] = batch[column] + offsets.unsqueeze(1)

    def rows(name: str, column: str) -> torch.Tensor:
        table = params[name]
        return gather_rows(table.reshape(-1, table.shape[-1]), ids[column])

    score = rating_score(params["global_bias"].unsqueeze(1),
                         rows("user_bias.weight", "user").squeeze(-1),
                         rows("item_bias.weight", "item").squeeze(-1),
                         rows("user_vectors.weight", "user"), rows("item_vectors.weight", "item"))
    output = _to_range(score, model.low, model.high)
    norms = squared_norms(rows("user_vectors.weight", "user"), rows("item_vectors.weight", "item"))
    # a row's mean over its contiguous elements is the same reduction as the mean of that
    # row alone; the mean squared error's gradient 2 * (x - y) * (1 / n) equals the
    # unbatched (2 / n) * (x - y) bit for bit, 2 being a power of two
    errors = F.mse_loss(output, ratings, reduction="none").mean(1)
    return errors + reg * norms.mean(1)


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
