"""Promotion on fresh data: the champion is re-scored on the new validation rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hoptune.core import Store
from hoptune.regions import decode_validation, ingest, load_config
from hoptune.tasks import create_study, run_inline
from hoptune.tasks.worker._messages import tune_step_dispatch
from hoptune.tuner import StudyRow, champion_card, load_predictor


def _night(rt, region, configs) -> StudyRow:  # noqa: ANN001
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest, configs=configs)
    run_inline(rt, [tune_step_dispatch(study)])
    return rt.db.study(study)


def _add_newcomers(csv: Path) -> None:
    """Append ratings by users and of items the first champion never saw."""
    table = pd.read_csv(csv)
    extra = table.sample(n=600, random_state=5).reset_index(drop=True)
    extra["user_id"] = [f"new-u{i % 40}" for i in range(len(extra))]
    extra.loc[::2, "item_id"] = [f"new-i{i % 30}" for i in range(len(extra[::2]))]
    pd.concat([table, extra]).to_csv(csv, index=False)


def test_new_users_and_items_the_champion_is_compared_on_the_same_new_rows(
        make_config, rt, home) -> None:
    path = make_config(epochs=2, rows=3000)
    region = load_config(path).region("north")
    first = _night(rt, region, [{"lr": 0.05, "embedding_dim": 8}])
    assert first.promotion["version"] == "v0001"

    _add_newcomers(home / "data" / "north.csv")
    good = _night(rt, region, [{"lr": 0.05, "embedding_dim": 8}])
    manifest = good.manifest
    rows = decode_validation(rt.store, manifest, region)
    old_ids = set(load_predictor(rt.store, "north", "v0001").ids["user"])
    assert (~rows["user_id"].isin(old_ids)).sum() > 0  # the new rows hold users v0001 never saw

    decision = good.promotion
    # the champion's metric: its own id maps on the new validation rows, fallback for newcomers
    held = load_predictor(rt.store, "north", "v0001").score(rows)
    assert decision["champion"] == "v0001" and decision["champion_metric"] == held
    # trained on the newcomers' rows too, the challenger is better there: promoted, and its
    # card holds both metrics and the rows they were computed on
    assert decision["promoted"] and decision["challenger_metric"] < held
    card = champion_card(rt.store, "north")
    assert (card["metric"], card["previous_metric"]) == (decision["challenger_metric"], held)
    assert card["compared_on"] == {"data_hash": manifest["hash"], "validation_rows": len(rows)}

    # a much worse challenger on the same rows is not promoted, and both metrics are recorded
    champion_before = champion_card(rt.store, "north")["version"]
    worse = _night(rt, region, [{"lr": 1e-5, "embedding_dim": 4, "epochs": 1}])
    decision = worse.promotion
    assert not decision["promoted"]
    assert decision["champion"] == champion_before
    assert decision["challenger_metric"] > decision["champion_metric"]
    assert decision["champion_metric"] == load_predictor(rt.store, "north",
                                                         champion_before).score(rows)
    assert champion_card(rt.store, "north")["version"] == champion_before
