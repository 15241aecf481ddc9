from __future__ import annotations

import pytest
import torch

from hoptune.core import ConfigError
from hoptune.regions import (
    get_family,
    ingest,
    iter_batches,
    load_shard,
    load_validation,
    write_ratings,
)
from hoptune.regions._models import _to_range

TINY = "tests.regions.tiny_factory"


def train(family, model, data, steps: int, lr: float) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(0)
    done = 0
    while done < steps:
        for batch in iter_batches(data, 32, generator):
            optimizer.zero_grad()
            family.loss(model, batch).backward()
            optimizer.step()
            done += 1
            if done == steps:
                return


def training_data(store, manifest) -> dict[str, torch.Tensor]:
    parts = [load_shard(store, manifest, k) for k in range(manifest["shards"])]
    return {key: torch.cat([part[key] for part in parts]) for key in parts[0]}


def test_rating_mf_learns(rating_region, store, workdir):
    region = rating_region()
    write_ratings(workdir / "data" / "north.csv", 60, 40, 1500, rank=2, noise=0.2, seed=1)
    manifest = ingest(region, store).manifest
    family = get_family(region)
    assert (family.name, family.metric_name, family.minimize) == ("rating_mf", "rmse", True)
    torch.manual_seed(0)
    model = family.build({"embedding_dim": 4}, manifest["meta"])
    validation = load_validation(store, manifest)
    before = family.evaluate(model, validation)
    train(family, model, training_data(store, manifest), steps=150, lr=0.05)
    after = family.evaluate(model, validation)
    assert after < 0.75 * before
    output = model(validation)
    assert output.min() >= 1.0 and output.max() <= 5.0


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_mlp_learns(tabular_region, store, task):
    region = tabular_region(task, rows=300)
    manifest = ingest(region, store).manifest
    family = get_family(region)
    classifying = task == "classification"
    assert family.metric_name == ("accuracy" if classifying else "rmse")
    assert family.minimize is not classifying
    torch.manual_seed(0)
    model = family.build({"hidden": 16, "activation": "tanh"}, manifest["meta"])
    validation = load_validation(store, manifest)
    before = family.evaluate(model, validation)
    train(family, model, training_data(store, manifest), steps=80, lr=0.03)
    after = family.evaluate(model, validation)
    if classifying:
        assert after > max(before, 0.85)
    else:
        assert after < 0.5 * before


def test_build_is_determined_by_torch_rng(rating_region, store):
    region = rating_region()
    meta = ingest(region, store).manifest["meta"]
    family = get_family(region)

    def weights(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        return list(family.build({}, meta).state_dict().values())

    assert all(torch.equal(a, b) for a, b in zip(weights(1), weights(1), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(weights(1), weights(2), strict=True))


def test_evaluate_restores_training_mode_and_tracks_no_gradient(tabular_region, store):
    region = tabular_region("classification")
    manifest = ingest(region, store).manifest
    family = get_family(region)
    model = family.build({"dropout": 0.5}, manifest["meta"])
    validation = load_validation(store, manifest)
    model.train()
    first = family.evaluate(model, validation)
    assert model.training
    assert first == family.evaluate(model, validation)  # dropout was off
    model.eval()
    family.evaluate(model, validation)
    assert not model.training
    assert all(p.grad is None for p in model.parameters())
    # no autograd graph is built: every forward pass of the evaluation runs without one
    graphs: list[bool] = []
    model.register_forward_hook(
        lambda _module, _inputs, output: graphs.append(torch.is_grad_enabled()
                                                       or output.requires_grad))
    with torch.enable_grad():
        family.evaluate(model, validation)
    assert graphs and not any(graphs)


def test_rating_loss_adds_regularisation_of_the_batch_vectors():
    from hoptune.regions._families import _RatingMFFamily

    family = _RatingMFFamily("rating")
    meta = {"n_users": 3, "n_items": 2, "rating_range": [1.0, 5.0], "rating_mean": 3.0}
    batch = {
        "user": torch.tensor([0, 2]),
        "item": torch.tensor([1, 1]),
        "rating": torch.tensor([4.0, 2.0]),
    }
    torch.manual_seed(0)
    plain = family.build({"reg": 0.0}, meta)
    torch.manual_seed(0)
    regularised = family.build({"reg": 0.5}, meta)
    vectors = plain.user_vectors(batch["user"]).pow(2).sum(-1) + plain.item_vectors(
        batch["item"]
    ).pow(2).sum(-1)
    with_reg, without = family.loss(regularised, batch), family.loss(plain, batch)
    # two float32 losses of order one, each rounded a few times: their difference is exact
    # to a few ulps of the larger, not to a relative tolerance of the (small) difference
    ulps = 4 * torch.finfo(torch.float32).eps * (abs(with_reg.item()) + abs(without.item()))
    assert (with_reg - without).item() == pytest.approx(0.5 * vectors.mean().item(), abs=ulps)


def test_to_range_maps_scores_into_the_rating_range():
    z = torch.tensor([-50.0, 0.0, 50.0])
    assert _to_range(z, 1.0, 5.0).tolist() == pytest.approx([1.0, 3.0, 5.0])


def test_rating_model_reaches_a_million_parameters():
    from hoptune.regions._families import _RatingMFFamily

    meta = {"n_users": 20000, "n_items": 12000, "rating_range": [1.0, 5.0], "rating_mean": 3.5}
    model = _RatingMFFamily("rating").build({"embedding_dim": 32}, meta)
    assert sum(p.numel() for p in model.parameters()) == 32000 * 33 + 1


def test_default_params_are_merged_under_given_ones(rating_region):
    family = get_family(rating_region())
    assert family.params({"embedding_dim": 8, "lr": 0.1}) == {
        "embedding_dim": 8,
        "reg": 1e-3,
        "init_std": 0.01,
        "lr": 0.1,
        "weight_decay": 0.0,
    }


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"embeding_dim": 8},
            "family 'rating_mf' has no parameter 'embeding_dim' (did you mean "
            "'embedding_dim'?) (known: "
            "amsgrad, batch_size, beta1, beta2, dampening, embedding_dim, epochs, eps, init_std, "
            "lr, lr_schedule, momentum, nesterov, optimizer, reg, warmup_epochs, weight_decay)",
        ),
        (
            {"embedding_dim": 0},
            "family 'rating_mf': parameter 'embedding_dim' must be an integer >= 1, got 0",
        ),
        (
            {"embedding_dim": 2.5},
            "family 'rating_mf': parameter 'embedding_dim' must be an integer >= 1, got 2.5",
        ),
        ({"reg": "high"}, "family 'rating_mf': parameter 'reg' must be a number >= 0, got 'high'"),
    ],
)
def test_bad_rating_params(rating_region, store, params, message):
    region = rating_region()
    meta = ingest(region, store).manifest["meta"]
    with pytest.raises(ConfigError) as caught:
        get_family(region).build(params, meta)
    assert str(caught.value) == message


def test_params_may_come_from_a_search_space_as_numpy_numbers(rating_region, store):
    import numpy as np

    region = rating_region()
    meta = ingest(region, store).manifest["meta"]
    model = get_family(region).build(
        {"embedding_dim": np.int64(6), "reg": np.float64(0.1), "momentum": 0.9}, meta
    )
    assert model.user_vectors.embedding_dim == 6


def test_bad_mlp_params(tabular_region, store):
    region = tabular_region("regression")
    meta = ingest(region, store).manifest["meta"]
    family = get_family(region)
    with pytest.raises(ConfigError) as caught:
        family.build({"activation": "swish"}, meta)
    assert str(caught.value) == (
        "family 'mlp': parameter 'activation' must be one of relu, tanh, gelu, got 'swish'"
    )
    with pytest.raises(ConfigError) as caught:
        family.build({"dropout": 1.0}, meta)
    assert str(caught.value) == "family 'mlp': parameter 'dropout' must be < 1, got 1.0"


def test_region_params_and_space_names_are_checked(rating_region):
    with pytest.raises(ConfigError) as caught:
        get_family(rating_region(settings="[regions.north.params]\ndim = 8\n"))
    assert str(caught.value).startswith(
        "region 'north': params: family 'rating_mf' has no parameter 'dim' (known: "
    )
    with pytest.raises(ConfigError) as caught:
        get_family(
            rating_region(
                settings='[regions.north.space]\nhidden = { type = "int", low = 1, high = 4 }\n'
            )
        )
    assert str(caught.value).startswith(
        "region 'north': space: family 'rating_mf' has no parameter 'hidden' (known: "
    )


def test_own_factory_is_imported_and_trained(tabular_region, store):
    region = tabular_region(
        "regression", family=f"{TINY}:build", settings="[regions.west.params]\nscale = 2.0\n"
    )
    manifest = ingest(region, store).manifest
    family = get_family(region)
    assert (family.name, family.metric_name, family.minimize) == (f"{TINY}:build", "rmse", True)
    assert family.params(region.params) == {"lr": 0.01, "scale": 2.0, "weight_decay": 0.0}
    torch.manual_seed(0)
    model = family.build(region.params, manifest["meta"])
    assert type(model).__name__ == "TinyRegressor" and model.scale == 2.0
    validation = load_validation(store, manifest)
    before = family.evaluate(model, validation)
    train(family, model, training_data(store, manifest), steps=60, lr=0.05)
    assert family.evaluate(model, validation) < 0.5 * before


@pytest.mark.parametrize(
    ("family", "message"),
    [
        (
            "tests.regions.nowhere:build",
            "cannot import 'tests.regions.nowhere': No module named 'tests.regions.nowhere'",
        ),
        (f"{TINY}:missing", f"module '{TINY}' has no 'missing'"),
        (f"{TINY}:NOT_A_FUNCTION", "'NOT_A_FUNCTION' is not callable"),
    ],
)
def test_bad_factory_path_names_region_and_value(tabular_region, family, message):
    region = tabular_region("regression", family=family)
    with pytest.raises(ConfigError) as caught:
        get_family(region)
    assert str(caught.value) == f"region 'west': family {family!r}: {message}"


def test_factory_must_return_a_module(tabular_region, store):
    region = tabular_region("regression", family=f"{TINY}:build_nothing")
    meta = ingest(region, store).manifest["meta"]
    with pytest.raises(ConfigError) as caught:
        get_family(region).build({}, meta)
    assert str(caught.value) == (
        f"family '{TINY}:build_nothing' returned NoneType, not a torch.nn.Module "
        f"nor an object with model, loss, metric and minimize"
    )
