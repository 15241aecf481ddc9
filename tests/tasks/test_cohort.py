"""A cohort trains as its members would alone: the fused pass against train_pass.

The bound, derived: for rating_mf the fused arithmetic is the single-trial
arithmetic. The stacked loss (regions._models.stacked_rating_losses) gathers
each trial's embedding rows and multiplies them elementwise; the padded
coordinates add exact zeros (x + 0 == x) to the same dot products, and each
trial's errors and norms are reduced over its own batch's row, in the same
order (tests/regions/test_models.py compares those pieces bit for bit); the
gradient of sum(losses) reaches each loss with the factor 1.0 (exact); the
cohort optimizers run each trial's single-trial operations with its own
scalars (tests/kernels/test_cohort.py).
So the error bound is zero: weights, optimizer states, losses and metrics must
be bitwise equal. (The MLP's batched matrix products may sum in another order
than the unbatched ones; its test bounds what the cohort changes instead: the
padded units stay exactly zero; its cohort against single trials is the
hop-path work still to come.)
"""

from __future__ import annotations

import logging

import pytest
import torch

from hoptune.regions import RegionConfig, get_family
from hoptune.tasks.hop._cohort_pass import Member, train_cohort_pass
from hoptune.tasks.hop._training import build_trial_model, make_trial_optimizer, train_pass

USERS, ITEMS, ROWS = 40, 30, 300
META = {"n_users": USERS, "n_items": ITEMS, "rating_range": [1.0, 5.0], "rating_mean": 3.2}
TRIALS = [
    {"lr": 0.05, "weight_decay": 0.0, "embedding_dim": 8, "reg": 1e-3},
    {"lr": 0.01, "weight_decay": 0.1, "embedding_dim": 16, "reg": 1e-2},
    {"lr": 0.2, "weight_decay": 0.01, "embedding_dim": 4, "reg": 0.0},
    {"lr": 0.03, "weight_decay": 0.05, "embedding_dim": 12, "reg": 1e-3, "beta1": 0.8},
]
SEEDS = [11, 12, 13, 14]
VISITS = [[0, 1], [1, 0]]  # the visit order of epochs 0 and 1: both shards each epoch


def _region(family: str = "rating_mf", **extra) -> RegionConfig:
    if family == "rating_mf":
        spec = {"family": family, "rating_range": [1.0, 5.0]}
    else:
        spec = {"family": family, "task": "regression",
                "columns": {"features": ["a", "b", "c"], "label": "y"}}
    return RegionConfig.model_validate({"name": "north", "data": "x.csv", "batch_size": 32,
                                        "shards": 2, "epochs": 2, **spec, **extra})


def _rating_shards() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for rows in (ROWS, ROWS - 37):  # shards of different sizes: a smaller last batch
        out.append({
            "user": torch.randint(0, USERS, (rows,), generator=g),
            "item": torch.randint(0, ITEMS, (rows,), generator=g),
            "rating": (torch.rand(rows, generator=g) * 4 + 1),
        })
    return out


def _members(region: RegionConfig, trials, meta) -> list[Member]:
    members = []
    for seed, params in zip(SEEDS, trials, strict=False):
        model = build_trial_model(region, params, seed, meta)
        members.append(Member(seed, params, model, make_trial_optimizer(region, params, model)))
    return members


def _train(region, members, shards, meta, *, fused: bool, prune_after=None):
    """Both epochs in the visit order; the cohort drops member 2 after epoch 0, shard 0
    when prune_after is given. Returns per-member losses of every pass."""
    losses: list[list[float]] = [[] for _ in members]
    live = list(range(len(members)))
    for epoch, order in enumerate(VISITS):
        for position, shard in enumerate(order):
            if fused:
                done = train_cohort_pass(region, [members[i] for i in live], shards[shard],
                                         epoch=epoch, shard=shard, position=position, meta=meta)
            else:
                done = [train_pass(region, members[i].model, members[i].optimizer,
                                   shards[shard], seed=members[i].seed, epoch=epoch,
                                   shard=shard, position=position, params=members[i].params)
                        for i in live]
            for i, trained in zip(live, done, strict=True):
                losses[i].append(trained.loss)
            if prune_after == (epoch, position):
                live.remove(2)
    return losses


def _assert_same_trial(a: Member, b: Member) -> None:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert sa[name].shape == sb[name].shape, name
        assert torch.equal(sa[name], sb[name]), name
    oa, ob = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys()
    for key, state in ob["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(oa["state"][key][name]), torch.as_tensor(value))


@pytest.mark.parametrize("optimizer", ["fused_adamw", "fused_sgd"])
def test_cohort_of_four_equals_each_trained_alone_bitwise(optimizer) -> None:
    region = _region(optimizer=optimizer)
    trials = [{**t, "momentum": 0.9 * (i % 2)} if optimizer == "fused_sgd" else t
              for i, t in enumerate(TRIALS)]
    if optimizer == "fused_sgd":
        trials = [{k: v for k, v in t.items() if k != "beta1"} for t in trials]
    shards = _rating_shards()
    alone = _members(region, trials, META)
    cohort = _members(region, trials, META)
    solo_losses = _train(region, alone, shards, META, fused=False)
    cohort_losses = _train(region, cohort, shards, META, fused=True)
    assert cohort_losses == solo_losses
    family = get_family(region)
    validation = _rating_shards()[1]
    for a, b in zip(cohort, alone, strict=True):
        _assert_same_trial(a, b)
        assert family.evaluate(a.model, validation) == family.evaluate(b.model, validation)
    assert cohort[0].model.user_vectors.weight.shape == (USERS, 8)  # split to its own size
    first = build_trial_model(region, trials[0], SEEDS[0], META)
    assert not torch.equal(first.user_vectors.weight, cohort[0].model.user_vectors.weight)


def test_pruning_a_member_leaves_the_others_unchanged() -> None:
    region = _region()
    shards = _rating_shards()
    alone = _members(region, TRIALS, META)
    cohort = _members(region, TRIALS, META)
    solo_losses = _train(region, alone, shards, META, fused=False)
    cohort_losses = _train(region, cohort, shards, META, fused=True, prune_after=(0, 0))
    for i in (0, 1, 3):
        assert cohort_losses[i] == solo_losses[i]
        _assert_same_trial(cohort[i], alone[i])
    assert len(cohort_losses[2]) == 1 and cohort_losses[2][0] == solo_losses[2][0]


def _tabular_shard(rows: int = 200) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(rows, 3, generator=g)
    return {"x": x, "y": x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(rows,
                                                                                   generator=g)}


@pytest.mark.parametrize("optimizer", ["fused_adamw", "fused_sgd"])
def test_padded_hidden_units_stay_exactly_zero(optimizer) -> None:
    region = _region("mlp", optimizer=optimizer)
    meta = {"n_features": 3, "label_mean": 0.0}
    trials = [{"hidden": 4, "weight_decay": 0.3, "lr": 0.05, "momentum": 0.9},
              {"hidden": 16, "weight_decay": 0.0, "lr": 0.01, "momentum": 0.0}]
    if optimizer == "fused_adamw":
        trials = [{k: v for k, v in t.items() if k != "momentum"} for t in trials]
    members = _members(region, trials, meta)
    from hoptune.regions import fuse

    family = get_family(region)
    data = _tabular_shard()
    fused = fuse(family, trials, [m.model for m in members], meta)
    from hoptune.tasks.hop._cohort_pass import _cohort_optimizer

    opt = _cohort_optimizer(members, fused.parameters())
    g = torch.Generator().manual_seed(2)
    for _ in range(30):
        rows = torch.randint(0, len(data["y"]), (2, 32), generator=g)
        batch = {k: v[rows] for k, v in data.items()}
        for p in fused.parameters():
            p.grad = None
        fused.losses(batch).sum().backward()
        for name, p in fused.params.items():
            assert torch.all(p.grad[0][fused.padding(name, 0)] == 0), name
        opt.step()
    moved = 0
    for name, p in fused.params.items():
        pad = fused.padding(name, 0)
        moved += int(pad.any())
        assert torch.all(p.detach()[0][pad] == 0), name
        for value in opt.state[p].values():
            if value.dim() == p.dim():
                assert torch.all(value[0][pad] == 0), name
    assert moved == 5  # both hidden layers' weights and biases and the head's weights


@pytest.mark.parametrize("factory", ["itemizing", "branching"])
def test_a_factory_model_vmap_cannot_run_trains_unfused_with_the_reason(factory,
                                                                         caplog) -> None:
    region = _region(f"tests.tasks.cohort_factory:{factory}")
    meta = {"n_features": 3, "label_mean": 0.0}
    trials = [{"lr": 0.01}, {"lr": 0.1, "weight_decay": 0.1}, {"lr": 0.03}]
    data = _tabular_shard()
    alone = _members(region, trials, meta)
    cohort = _members(region, trials, meta)
    with caplog.at_level(logging.WARNING, logger="hoptune.regions._fusion"):
        for shard in (0, 1):
            done = train_cohort_pass(region, cohort, data, epoch=0, shard=shard,
                                     position=shard, meta=meta)
            solo = [train_pass(region, m.model, m.optimizer, data, seed=m.seed, epoch=0,
                               shard=shard, position=shard, params=m.params) for m in alone]
            assert [d.loss for d in done] == [s.loss for s in solo]
    for a, b in zip(cohort, alone, strict=True):
        _assert_same_trial(a, b)
    unfused = [r.getMessage() for r in caplog.records if "unfused" in r.getMessage()]
    assert len(unfused) == 1, unfused  # logged once, not once per pass
    assert "torch.func.vmap cannot run its forward" in unfused[0]
    assert f"cohort_factory:{factory}" in unfused[0]


def test_a_factory_model_vmap_can_run_fuses_and_trains_as_alone(caplog) -> None:
    """Weighted's arithmetic is elementwise plus a left-to-right sum, the same batched or
    not, so the fused pass is bitwise the single-trial one (bound zero)."""
    region = _region("tests.tasks.cohort_factory:weighted")
    meta = {"n_features": 3, "label_mean": 0.0}
    trials = [{"lr": 0.01}, {"lr": 0.1, "weight_decay": 0.1}, {"lr": 0.03, "beta2": 0.9}]
    data = _tabular_shard()
    alone = _members(region, trials, meta)
    cohort = _members(region, trials, meta)
    with caplog.at_level(logging.WARNING, logger="hoptune.regions._fusion"):
        done = train_cohort_pass(region, cohort, data, epoch=0, shard=1, position=0,
                                 meta=meta)
    solo = [train_pass(region, m.model, m.optimizer, data, seed=m.seed, epoch=0, shard=1,
                       position=0, params=m.params)
            for m in alone]
    assert "unfused" not in caplog.text
    assert [d.loss for d in done] == [s.loss for s in solo]
    for a, b in zip(cohort, alone, strict=True):
        _assert_same_trial(a, b)


def test_factory_trials_with_different_model_params_form_separate_cohorts() -> None:
    from hoptune.regions import cohort_key

    family = get_family(_region("tests.tasks.cohort_factory:weighted"))
    assert cohort_key(family, {"scale": 1.0, "lr": 0.1}) == cohort_key(family, {"scale": 1.0})
    assert cohort_key(family, {"scale": 1.0}) != cohort_key(family, {"scale": 2.0})


def test_dropout_trains_unfused_with_the_reason_logged(caplog) -> None:
    region = _region("mlp")
    meta = {"n_features": 3, "label_mean": 0.0}
    trials = [{"hidden": 8, "dropout": 0.2}, {"hidden": 8, "dropout": 0.2, "lr": 0.1}]
    data = _tabular_shard()
    alone = _members(region, trials, meta)
    cohort = _members(region, trials, meta)
    with caplog.at_level(logging.WARNING, logger="hoptune.regions._fusion"):
        done = train_cohort_pass(region, cohort, data, epoch=0, shard=0, position=0,
                                 meta=meta)
    solo = [train_pass(region, m.model, m.optimizer, data, seed=m.seed, epoch=0, shard=0,
                       position=0, params=m.params)
            for m in alone]
    assert [d.loss for d in done] == [s.loss for s in solo]
    for a, b in zip(cohort, alone, strict=True):
        _assert_same_trial(a, b)
    assert "trains its trials unfused: dropout" in caplog.text
