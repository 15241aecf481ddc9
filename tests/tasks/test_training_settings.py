"""Batch size, epochs and optimizer are hyperparameters: each trial trains with its own."""

from __future__ import annotations

import math

import pytest

from hoptune.core import ConfigError, Store
from hoptune.regions import get_family, ingest, load_config
from hoptune.tasks import checkpoint_key, create_study, load_checkpoint, run_inline
from hoptune.tasks.worker._messages import tune_step_dispatch

SPACE = """
batch_size = { type = "int", low = 16, high = 512, prior = "log" }
optimizer = { type = "categorical", choices = ["adamw", "fused_sgd"] }
epochs = { type = "int", low = 1, high = 3 }
"""


def _counting(path, space: str):  # noqa: ANN001, ANN202
    """The test configuration with the counting factory as north's family, and ``space``."""
    body = path.read_text().replace('family = "rating_mf"',
                                    'family = "tests.tasks.counting_factory:build"')
    body = "\n".join(line for line in body.splitlines()
                     if not line.startswith(("embedding_dim", "reg ")))
    path.write_text(body + "\n[regions.north.space]\n" + space + "\n")
    return load_config(path).region("north")


def _region(make_config, rt, space: str):  # noqa: ANN001, ANN202
    region = _counting(make_config(epochs=3, trials=6, parallel=2, rows=1500), space)
    return region, ingest(region, Store(rt.settings.store_url)).manifest


def test_each_trial_trains_with_its_own_batch_size_optimizer_and_epochs(make_config, rt) -> None:
    region, manifest = _region(make_config, rt, SPACE)
    study = create_study(rt, region, manifest=manifest)
    run_inline(rt, [tune_step_dispatch(study)])
    trials = rt.db.trials(study)
    assert len(trials) == 6 and all(t.state in ("done", "pruned") for t in trials)
    assert len({t.params["batch_size"] for t in trials}) > 1
    assert {t.params["optimizer"] for t in trials} == {"adamw", "fused_sgd"}
    shard_rows = manifest["rows"]
    for t in trials:
        params = t.params
        if t.state == "done":  # a finished trial ran exactly its own epochs
            assert t.epochs_done == params["epochs"]
        assert t.epochs_done <= params["epochs"]
        final = load_checkpoint(rt.store, checkpoint_key(study, t.id, t.epochs_done - 1,
                                                         region.shards - 1))
        # the model counted its batches: ceil(rows / batch_size) per shard, per epoch
        per_epoch = sum(math.ceil(rows / params["batch_size"]) for rows in shard_rows)
        assert int(final.model["batches"]) == per_epoch * t.epochs_done
        assert int(final.model["largest_batch"]) == min(params["batch_size"], max(shard_rows))
        group = final.optimizer["param_groups"][0]
        assert ("betas" in group) == (params["optimizer"] == "adamw")
        assert ("momentum" in group) == (params["optimizer"] == "fused_sgd")


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ('epochs = { type = "int", low = 1, high = 5 }',
         "regions.north.space.epochs: 5 is more than the study's epochs (3)"),
        ('optimizer = { type = "categorical", choices = ["adamw", "adam"] }',
         "regions.north.space.optimizer: must be one of fused_adamw, fused_sgd, adamw, sgd, "
         "got 'adam'"),
        ('lr_schedule = { type = "categorical", choices = ["cosine", "linear"] }',
         "regions.north.space.lr_schedule: must be one of none, cosine, step, got 'linear'"),
        ('dimm = { type = "int", low = 2, high = 8 }',
         "region 'north': space: family 'tests.tasks.counting_factory:build' has no parameter "
         "'dimm' (did you mean 'dim'?) (known: amsgrad, batch_size, beta1, beta2, dampening, "
         "dim, epochs, eps, lr, "
         "lr_schedule, momentum, nesterov, optimizer, warmup_epochs, weight_decay)"),
    ],
)
def test_a_space_no_trial_could_train_is_refused_in_one_line(make_config, rt, space, message
                                                             ) -> None:
    with pytest.raises(ConfigError) as caught:
        get_family(_counting(make_config(epochs=3), space))
    assert str(caught.value) == message
