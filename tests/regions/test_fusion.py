"""Which trials fuse: regions.cohort_key and fuse's refusals."""

from __future__ import annotations

import pytest

from hoptune.regions import RegionConfig, Unfusable, cohort_key, fuse, get_family


def _family(name: str):
    spec = ({"family": name, "rating_range": [1.0, 5.0]} if name == "rating_mf" else
            {"family": name, "task": "regression",
             "columns": {"features": ["a"], "label": "y"}})
    return get_family(RegionConfig.model_validate({"name": "north", "data": "x.csv", **spec}))


def test_rating_trials_fuse_whatever_their_sizes_and_hyperparameters() -> None:
    family = _family("rating_mf")
    assert cohort_key(family, {"embedding_dim": 4, "lr": 0.1}) == cohort_key(
        family, {"embedding_dim": 32, "reg": 0.5, "init_std": 0.01})


def test_mlp_trials_fuse_across_widths_but_not_depths_activations_or_dropout() -> None:
    family = _family("mlp")
    assert cohort_key(family, {"hidden": 8}) == cohort_key(family, {"hidden": 64, "lr": 1.0})
    assert cohort_key(family, {"layers": 1}) != cohort_key(family, {"layers": 2})
    assert cohort_key(family, {"activation": "tanh"}) != cohort_key(family, {})
    dropout = cohort_key(family, {"dropout": 0.1})
    assert isinstance(dropout, Unfusable) and "dropout" in dropout.reason


def test_fuse_refuses_trials_of_different_cohorts() -> None:
    family = _family("mlp")
    with pytest.raises(ValueError, match="different cohorts"):
        fuse(family, [{"layers": 1}, {"layers": 2}], [], {"n_features": 1})
