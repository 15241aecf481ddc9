"""A user's factory that brings its own loss and metric (examples/), through real workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import app, checkpoint_key, create_study, load_checkpoint
from hoptune.tasks.cli._follow import follow, start_studies

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "examples" / "hoptune.toml").read_text()

pytestmark = pytest.mark.integration


def _example(home: Path, **changes: str) -> Path:
    """examples/hoptune.toml, small, over synthetic ratings in ``home``."""
    from hoptune.regions import write_ratings

    write_ratings(home / "ratings.csv", n_users=80, n_items=60, n_rows=2000, rank=3, noise=0.3,
                  seed=4)
    text = EXAMPLE.replace("epochs = 4", "epochs = 2").replace("trials = 8", "trials = 3")
    for old, new in changes.items():
        text = text.replace(old, new)
    (home / "hoptune.toml").write_text(text)
    return home / "hoptune.toml"


def test_the_example_factory_trains_and_is_judged_by_its_own_mae(home, rt, redis_url,
                                                                 monkeypatch) -> None:
    from hoptune.tasks.cli._cluster import LocalCluster

    monkeypatch.syspath_prepend(str(ROOT))
    region = load_config(_example(home)).region("ratings")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    cluster = LocalCluster({"ratings": 2}, 2, log_dir=home / "logs", loglevel="INFO",
                           env={"HOPTUNE_BROKER_URL": redis_url, "PYTHONPATH": str(ROOT)})
    cluster.start()
    try:
        cluster.wait_ready(app)
        study = create_study(rt, region, manifest=manifest)
        start_studies(app, [study])
        follow(rt, app, [study], progress=False, timeout=300)
    finally:
        cluster.stop()

    record = rt.db.study(study)
    assert record.state == "done" and record.minimize
    assert record.promotion["promoted"], record.promotion
    from examples.mae_rating import build

    validation = rt.validation(manifest)
    for trial in rt.db.trials(study):
        assert trial.state in ("done", "pruned"), trial.failure
        epochs = rt.db.epochs(trial.id)
        last = load_checkpoint(rt.store, checkpoint_key(study, trial.id, len(epochs) - 1,
                                                        region.shards - 1))
        objective = build({**trial.params}, manifest["meta"])
        objective.model.load_state_dict(last.model)
        objective.model.eval().requires_grad_(False)
        # the recorded metric is the factory's own MAE of those weights on the validation rows
        # (a float64 mean of a few hundred rows: any difference is summation order, <1e-12)
        assert epochs[-1].metric == pytest.approx(objective.metric(objective.model, validation),
                                                     rel=1e-12)
    card = Store(rt.settings.store_url).read_json(
        f"models/ratings/{record.promotion['version']}/card.json")
    assert card["metric_name"] == "mae" and card["minimize"] is True


def test_a_space_name_the_factory_does_not_read_is_refused_in_one_line(home) -> None:
    _example(home, **{"reg = {": "regularisation = {"})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "tune", "ratings",
                           "--detach"], cwd=home, env=env, text=True, capture_output=True,
                          timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("hoptune: error: hoptune.toml: region 'ratings': space: family "
                               "'examples.mae_rating:build' has no parameter 'regularisation' "
                               "(known: ")
    assert not (home / "store").exists()
