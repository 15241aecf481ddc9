"""Serving a champion: hoptune.load_champion in a fresh process, and `hoptune predict`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from hoptune.core import Store
from hoptune.regions import decode_validation, ingest, load_config
from hoptune.tasks import create_study, run_inline
from hoptune.tasks.hop._training import build_trial_model
from hoptune.tasks.worker._messages import tune_step_dispatch
from hoptune.tuner import champion_card, load_weights


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", *args], cwd=home,
                          env=os.environ.copy(), text=True, capture_output=True, timeout=120)


def _champion(make_config, rt):  # noqa: ANN001, ANN202
    region = load_config(make_config(epochs=2, rows=2000)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.05}])
    run_inline(rt, [tune_step_dispatch(study)])
    return region, manifest, champion_card(rt.store, "north")


def test_a_champion_loaded_in_a_fresh_process_predicts_as_the_study_scored(
        make_config, rt, home) -> None:
    region, manifest, card = _champion(make_config, rt)
    # the study's own path: its model on its encoded validation rows
    model = build_trial_model(region, card["params"], card["seed"], manifest["meta"])
    model.load_state_dict(load_weights(rt.store, "north", card["version"]))
    with torch.no_grad():
        expected = model.eval()(rt.validation(manifest)).double().numpy()

    decode_validation(rt.store, manifest, region).to_csv(home / "rows.csv", index=False)
    exported = _cli(home, "export", "north", "--out", str(home / "served"))
    assert exported.returncode == 0, exported.stderr
    script = ("import sys, numpy, pandas, hoptune\n"
              "rows = pandas.read_csv('rows.csv')\n"
              "numpy.save('store.npy', hoptune.load_champion('north').predict(rows))\n"
              "numpy.save('export.npy', hoptune.load_exported('served').predict(\n"
              "    rows.to_dict('records')))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=home, env=os.environ.copy(),
                          text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(home / "store.npy"), expected)
    np.testing.assert_array_equal(np.load(home / "export.npy"), expected)


def test_predict_gives_unseen_ids_the_fallback_and_refuses_a_bad_row(make_config, rt,
                                                                     home) -> None:
    region, manifest, card = _champion(make_config, rt)
    rows = decode_validation(rt.store, manifest, region).drop(columns="rating").head(20)
    rows.loc[0, "user_id"] = "never-seen"  # a known item
    rows.loc[1, ["user_id", "item_id"]] = ["never-seen", "nor-this"]
    rows.to_csv(home / "in.csv", index=False)
    done = _cli(home, "predict", "north", "--input", "in.csv", "--out", "out.csv")
    assert done.returncode == 0, done.stderr
    out = pd.read_csv(home / "out.csv")
    assert len(out) == 20 and out["prediction"].notna().all()
    # the fallback: global bias plus the known item's bias (no user terms), in the range
    weights = load_weights(rt.store, "north", card["version"])
    items = Store(rt.settings.store_url).read_json(manifest["files"]["ids"])["item"]
    k = items.index(str(rows.loc[0, "item_id"]))
    z = weights["global_bias"] + weights["item_bias.weight"][k, 0]
    # the model's scaled sigmoid is another float32 formulation: a few ulps (2**-24) apart
    ulps = 8 * 2**-24
    assert out.loc[0, "prediction"] == pytest.approx(float(1 + 4 * torch.sigmoid(z)), rel=ulps)
    assert out.loc[1, "prediction"] == pytest.approx(
        float(1 + 4 * torch.sigmoid(weights["global_bias"])), rel=ulps)

    lines = (home / "in.csv").read_text().splitlines()
    lines[5] = ",i3"  # row 5: no user id
    (home / "bad.csv").write_text("\n".join(lines) + "\n")
    done = _cli(home, "predict", "north", "--input", "bad.csv", "--out", "bad-out.csv")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "hoptune: error: bad.csv: column 'user_id': row 5: empty cell"]
    assert not (home / "bad-out.csv").exists()
    assert sorted(p.name for p in home.glob("*out*")) == ["out.csv"]


def test_predict_says_how_many_rows_the_fallback_predicted_and_marks_them(make_config, rt,
                                                                          home) -> None:
    region, manifest, _ = _champion(make_config, rt)
    rows = decode_validation(rt.store, manifest, region).drop(columns="rating").head(10)
    rows.loc[2, "user_id"] = "never-seen"
    rows.loc[7, "item_id"] = "nor-this"
    rows.to_csv(home / "in.csv", index=False)
    done = _cli(home, "predict", "north", "--input", "in.csv", "--out", "out.csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(
        "written to out.csv; 2 of them by the fallback (a user or item the model never saw): "
        "--mark-fallback marks which")
    assert "fallback" not in pd.read_csv(home / "out.csv").columns
    done = _cli(home, "predict", "north", "--input", "in.csv", "--out", "marked.parquet",
                "--mark-fallback")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("2 of them by the fallback (a user or item the model "
                                        "never saw)")
    marked = pd.read_parquet(home / "marked.parquet")
    assert marked["fallback"].tolist() == [i in (2, 7) for i in range(10)]
    np.testing.assert_allclose(marked["prediction"], pd.read_csv(home / "out.csv")["prediction"])
