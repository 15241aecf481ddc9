"""The rating model's pieces: each is bit for bit what it replaces or stacks.

The written-out backward of the left-to-right dot, the row gather and the
stacked losses of a cohort are exact rewrites, not approximations: the test
compares bits, on whatever CPU runs it (the batched reductions' claim,
``mean(1)`` of a row equal to the mean of that row alone, is checked here for
every row count up to a few batches).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hoptune.regions import RegionConfig, fuse, get_family
from hoptune.regions._models import _dot, gather_rows

META = {"n_users": 23, "n_items": 17, "rating_range": [1.0, 5.0], "rating_mean": 3.1}


def _autograd_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(a * b, dim=-1)[..., -1]


@pytest.mark.parametrize("same", [False, True], ids=["a.b", "a.a"])
def test_the_dots_gradient_is_autograds_gradient_of_its_forward_bit_for_bit(same) -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(5, 64, 13, generator=g, requires_grad=True)
    b = a if same else torch.randn(5, 64, 13, generator=g, requires_grad=True)
    weights = torch.randn(5, 64, generator=g)
    inputs = (a,) if same else (a, b)
    ours = torch.autograd.grad((_dot(a, b) * weights).sum(), inputs)
    theirs = torch.autograd.grad((_autograd_dot(a, b) * weights).sum(), inputs)
    assert torch.equal(_dot(a, b), _autograd_dot(a, b))
    assert all(torch.equal(x, y) for x, y in zip(ours, theirs, strict=True))


def test_gathered_rows_and_their_gradient_are_the_embeddings() -> None:
    g = torch.Generator().manual_seed(4)
    weight = torch.randn(23, 6, generator=g, requires_grad=True)
    ids = torch.randint(0, 23, (4, 50), generator=g)  # repeated ids: summed gradients
    upstream = torch.randn(4, 50, 6, generator=g)
    ours = gather_rows(weight, ids)
    theirs = F.embedding(ids, weight)
    assert torch.equal(ours, theirs)
    (ours_grad,) = torch.autograd.grad((ours * upstream).sum(), weight)
    (theirs_grad,) = torch.autograd.grad((theirs * upstream).sum(), weight)
    assert torch.equal(ours_grad, theirs_grad)


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 31, 32, 33, 100, 257, 700])
def test_a_cohorts_stacked_losses_and_gradients_are_each_model_alone(rows) -> None:
    region = RegionConfig.model_validate({"name": "north", "data": "x.csv",
                                          "family": "rating_mf", "rating_range": [1.0, 5.0]})
    family = get_family(region)
    params = [{"embedding_dim": 3, "reg": 0.01}, {"embedding_dim": 8, "reg": 0.0},
              {"embedding_dim": 5, "reg": 0.3}]
    models = []
    for i, p in enumerate(params):
        torch.manual_seed(i)
        models.append(family.build(p, META))
    g = torch.Generator().manual_seed(rows)
    batches = [{"user": torch.randint(0, 23, (rows,), generator=g),
                "item": torch.randint(0, 17, (rows,), generator=g),
                "rating": torch.rand(rows, generator=g) * 4 + 1} for _ in models]
    fused = fuse(family, params, models, META)
    stacked = {k: torch.stack([b[k] for b in batches]) for k in batches[0]}
    losses = fused.losses(stacked)
    losses.sum().backward()
    for i, (model, batch) in enumerate(zip(models, batches, strict=True)):
        alone = family.loss(model, batch)
        alone.backward()
        assert torch.equal(losses[i], alone), i
        for name, param in model.named_parameters():
            assert torch.equal(fused.member(name, i), param.detach()), (i, name)
            own = fused.params[name].grad[i][tuple(slice(0, n) for n in param.shape)]
            assert torch.equal(own, param.grad), (i, name)
