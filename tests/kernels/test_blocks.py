from __future__ import annotations

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import reference
from hoptune.kernels._blocks import BLOCK, in_blocks
from hoptune.kernels.reference import AdamWScalars, SGDScalars
from tests.kernels.tracking import BoundTracker


def _tensors(n: int, count: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return [torch.randn(n, generator=g).abs_() for _ in range(count)]


def test_blocks_cover_every_element_once() -> None:
    n = 2 * BLOCK + 5
    a, b = torch.zeros(n), torch.zeros(n)
    blocks = list(in_blocks([a, None, b]))
    assert [x.numel() for x, _, _ in blocks] == [BLOCK, BLOCK, 5]
    assert all(y is None for _, y, _ in blocks)
    for x, _, z in blocks:
        x.add_(1)
        z.add_(2)
    assert torch.equal(a, torch.ones(n)) and torch.equal(b, torch.full((n,), 2.0))


@pytest.mark.parametrize(
    "tensors",
    [
        [torch.zeros(BLOCK)],  # small enough
        [torch.zeros(BLOCK + 1), torch.zeros(BLOCK + 2)],  # sizes differ
        [torch.zeros(2, BLOCK).t(), torch.zeros(BLOCK, 2)],  # not contiguous
    ],
)
def test_other_tensors_come_whole(tensors) -> None:
    (whole,) = list(in_blocks(tensors))
    assert all(w is t for w, t in zip(whole, tensors, strict=True))


def test_blocked_updates_equal_whole_ones() -> None:
    n = 3 * BLOCK + 17
    adamw = AdamWScalars.for_step(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1,
                                  step=7)
    sgd = SGDScalars.for_group(lr=0.1, weight_decay=1e-2, momentum=0.9, dampening=0.1)
    whole, blocked = _tensors(n, 5), _tensors(n, 5)
    reference.adamw_step_(*whole, adamw)
    for block in in_blocks(blocked):
        reference.adamw_step_(*block, adamw)
    whole_sgd, blocked_sgd = _tensors(n, 3), _tensors(n, 3)
    reference.sgd_step_(*whole_sgd, sgd, nesterov=False, first_step=False)
    for block in in_blocks(blocked_sgd):
        reference.sgd_step_(*block, sgd, nesterov=False, first_step=False)
    for a, b in zip(whole + whole_sgd, blocked + blocked_sgd, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda p: kernels.FusedAdamW(p, lr=1e-2, amsgrad=True),
         lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, foreach=False)),
        (lambda p: kernels.FusedSGD(p, lr=0.1, momentum=0.9, nesterov=True),
         lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=False)),
    ],
)
def test_optimizers_update_large_tensors_in_blocks(ours, theirs, assert_follows) -> None:
    start = _tensors(2 * BLOCK + 3, 1)
    a, b = [start[0].clone()], [start[0].clone()]
    tracker = BoundTracker(ours(a), theirs(b))
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        grad = torch.randn(a[0].shape, generator=g)
        a[0].grad, b[0].grad = grad.clone(), grad.clone()
        tracker.step()
    assert_follows(tracker, f"{type(tracker.ours).__name__} in blocks vs torch.optim, 3 steps")
    assert not torch.equal(a[0], start[0])
