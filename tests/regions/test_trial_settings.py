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


def test_auto_batch_size_is_256_or_a_power_of_two_at_most_a_quarter_of_a_small_regions_rows(
        ) -> None:
    from hoptune.regions import auto_batch_size

    assert [auto_batch_size(n) for n in (100_000, 1024, 1023, 512, 511, 414, 318, 256, 255)] == [
        256, 256, 128, 128, 64, 64, 64, 64, 32]
    assert auto_batch_size(10) == auto_batch_size(0) == 32  # never below 32


def test_a_study_resolves_auto_from_its_manifest_and_an_integer_or_a_trial_param_wins(
        rating_region, store) -> None:
    from hoptune.regions import ingest, resolved_region

    region = rating_region(rows=120, settings="").model_copy(update={"batch_size": "auto"})
    manifest = ingest(region, store).manifest
    training = sum(manifest["rows"])
    assert training < 128  # a tiny region: the least auto batch
    resolved = resolved_region(region, manifest)
    assert (resolved.batch_size, resolved.shards) == (32, 2)
    assert trial_settings(resolved, {}).batch_size == 32
    assert trial_settings(region, {"batch_size": 16}).batch_size == 16  # a tuned batch size
    with pytest.raises(ValueError, match="batch_size 'auto' is decided when a study starts"):
        trial_settings(region, {})
    fixed = region.model_copy(update={"batch_size": 256})
    assert resolved_region(fixed, manifest) is fixed  # nothing to resolve: the same region


def test_auto_is_the_default_batch_size_and_a_bad_one_names_the_field(write_config) -> None:
    from hoptune.regions import load_config

    body = ('[regions.north]\ndata = "data/north.csv"\nfamily = "rating_mf"\n'
            'rating_range = [1.0, 5.0]\n')
    assert load_config(write_config(body)).region("north").batch_size == "auto"
    with pytest.raises(ConfigError, match="must be an integer >= 1 or 'auto', got 'big'"):
        load_config(write_config('[defaults]\nbatch_size = "big"\n' + body))
