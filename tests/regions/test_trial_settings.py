from __future__ import annotations

import math

import pytest
import torch

from hoptune.core import ConfigError
from hoptune.regions import TrialSettings, trial_settings


def _settings(schedule: str, warmup: int = 0, epochs: int = 4) -> TrialSettings:
    return TrialSettings(batch_size=8, epochs=epochs, optimizer="sgd", lr_schedule=schedule,
                         warmup_epochs=warmup)


def test_warm_up_rises_hop_by_hop_then_cosine_falls_to_zero_at_the_last_hop() -> None:
    s = _settings("cosine", warmup=1, epochs=3)
    shards = 2
    scales = [s.lr_scale(e, p, shards) for e in range(3) for p in range(shards)]
    assert scales[:2] == [1 / 3, 2 / 3]  # warm-up: 2 hops, linear
    assert scales[2] == 1.0  # the first hop after warm-up trains at the full rate
    assert all(a > b for a, b in zip(scales[2:], scales[3:], strict=False))
    assert scales[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 4)))


def test_step_divides_by_ten_at_half_and_three_quarters() -> None:
    s = _settings("step", epochs=4)
    assert [s.lr_scale(e, 0, 1) for e in range(4)] == pytest.approx([1, 1, 0.1, 0.01])
    assert [_settings("none").lr_scale(e, 0, 1) for e in range(4)] == [1, 1, 1, 1]


def test_a_trial_cannot_train_longer_than_its_study(rating_region) -> None:
    region = rating_region()
    assert trial_settings(region, {"epochs": 2, "batch_size": 32.0}).batch_size == 32
    with pytest.raises(ConfigError) as caught:
        trial_settings(region, {"epochs": 4})
    assert str(caught.value) == (
        "region 'north': parameter 'epochs': 4 is more than the study's epochs (3)")


def test_the_schedule_sets_each_hops_learning_rate(rating_region) -> None:
    from hoptune.tasks.hop._training import make_trial_optimizer, train_pass

    region = rating_region()
    model = torch.nn.Linear(2, 1)

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, batch):  # noqa: ANN001, ANN202
            return self.inner(torch.stack([batch["user"], batch["item"]], 1).float()).squeeze(-1)

    wrapped = Wrapped()
    params = {"lr": 0.1, "lr_schedule": "step", "epochs": 2}
    optimizer = make_trial_optimizer(region, params, wrapped)
    data = {"user": torch.arange(4), "item": torch.arange(4), "rating": torch.ones(4)}
    train_pass(region, wrapped, optimizer, data, seed=0, epoch=1, shard=0, position=0,
               params=params)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    assert optimizer.param_groups[0]["initial_lr"] == 0.1
