"""select = "best" | "last": the trial's metric and the champion's weights follow it."""

from __future__ import annotations

import math

import pytest

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import create_study, run_inline
from hoptune.tasks.worker._messages import tune_step_dispatch
from hoptune.tuner import champion_card, load_weights


def _study(make_config, rt, select: str):  # noqa: ANN001, ANN202
    path = make_config(epochs=3, trials=1, parallel=1, rows=1000, batch_size=100)
    body = path.read_text().replace('family = "rating_mf"',
                                    'family = "tests.tasks.counting_factory:build_peaked"')
    body = "\n".join(line for line in body.splitlines()
                     if not line.startswith(("embedding_dim", "reg ")))
    path.write_text(body + f'\nselect = "{select}"\n')
    region = load_config(path).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    per_epoch = sum(math.ceil(rows / 100) for rows in manifest["rows"])
    # the metric is best (0) at the end of epoch 1 of 3
    study = create_study(rt, region, manifest=manifest, configs=[{"peak": 2 * per_epoch}])
    run_inline(rt, [tune_step_dispatch(study)])
    return region, study, per_epoch


@pytest.mark.parametrize(("select", "epoch"), [("best", 1), ("last", 2)])
def test_the_champion_is_the_selected_epochs_weights(make_config, rt, select, epoch) -> None:
    region, study, per_epoch = _study(make_config, rt, select)
    (trial,) = rt.db.trials(study)
    assert [e.metric for e in rt.db.epochs(trial.id)] == [per_epoch, 0, per_epoch]
    assert rt.db.study(study).promotion["challenger_metric"] == (0 if select == "best"
                                                                   else per_epoch)
    card = champion_card(rt.store, "north")
    # the card numbers epochs from 1, as every table and the report do
    assert (card["select"], card["selected_epoch"]) == (select, epoch + 1)
    assert card["metric"] == (0 if select == "best" else per_epoch)
    assert card["last_epoch_metric"] == per_epoch
    weights = load_weights(rt.store, "north", card["version"])
    assert int(weights["batches"]) == (epoch + 1) * per_epoch
    # what the ended trial kept: its final weights and, for "best", its best epoch's
    kept = sorted(k.rsplit("/", 1)[1] for k in
                  rt.store.list(f"checkpoints/study-{study}/trial-{trial.id}"))
    ends = [f"e{e:04d}-p{region.shards - 1:04d}.pt" for e in sorted({epoch, 2})]
    assert kept == ends
