"""The nightly retraining on real Redis and real workers, run twice; and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoptune.tuner import NightlyRecords

pytestmark = pytest.mark.integration


def hoptune(home: Path, redis_url: str, *args: str, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url}
    return subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", *args], cwd=home, env=env,
                          text=True, capture_output=True, timeout=timeout)


def card(store: Path, region: str, version: str) -> dict:
    return json.loads((store / "models" / region / version / "card.json").read_text())


def champion(store: Path, region: str) -> str:
    return json.loads((store / "models" / region / "champion.json").read_text())["version"]


NIGHT = """
[defaults]
shards = 2
epochs = 2
batch_size = 128
seed = 3
validation_fraction = 0.2
trials = 2
parallel = 2
[defaults.params]
embedding_dim = 8
reg = 0.0001
[defaults.pruner]
reduction_factor = 2
min_epochs = 1
"""

# a learning rate that barely moves the model in two epochs, and one that trains it
POOR, GOOD = (1e-4, 1.2e-4), (0.03, 0.05)


def write_night(home: Path, lr: dict[str, tuple[float, float]]) -> None:
    """The configuration of one night: each region's search space confined to an lr range."""
    text = NIGHT
    for region, (low, high) in lr.items():
        text += f"""
[regions.{region}]
data = "data/{region}.csv"
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]
space = {{ lr = {{ type = "real", low = {low}, high = {high} }} }}
"""
    (home / "hoptune.toml").write_text(text)


def test_two_nights_promote_only_where_the_metric_improved(make_config, rt, cluster, home,
                                                           redis_url) -> None:
    """Night two is made to beat the champion in north, to lose in south, and brings new data
    (more users and items) to east, where the champion is re-scored on the new rows."""
    from hoptune.regions import write_ratings

    regions = ("north", "south", "east")
    make_config(regions)  # the data of the first night
    cluster({r: 2 for r in regions}, workers=2)
    store = home / "store"

    write_night(home, {"north": POOR, "south": GOOD, "east": GOOD})
    first = hoptune(home, redis_url, "nightly", "--no-progress")
    assert first.returncode == 0, first.stdout + first.stderr
    records = NightlyRecords(rt.db)
    (run1,) = records.runs()
    assert run1["state"] == "done"
    for region in regions:
        assert champion(store, region) == "v0001"
        first_card = card(store, region, "v0001")
        assert first_card["previous"] is None
        assert (store / "models" / region / "v0001" / "weights.pt").is_file()
        assert first_card["visit_orders"] and first_card["data_hash"]
    assert {r["region"]: (r["state"], r["ingested"]) for r in records.regions(run1["id"])} == {
        region: ("promoted", 1) for region in regions}

    write_night(home, {"north": GOOD, "south": POOR, "east": GOOD})
    write_ratings(home / "data" / "east.csv", n_users=90, n_items=70, n_rows=3000, rank=3,
                  noise=0.3, seed=99)
    second = hoptune(home, redis_url, "nightly", "--no-progress")
    assert second.returncode == 0, second.stdout + second.stderr
    run2 = records.runs()[-1]
    assert run2["state"] == "done" and run2["id"] != run1["id"]
    rows = {r["region"]: r for r in records.regions(run2["id"])}
    east = rt.db.study(rows["east"]["study_id"]).promotion
    east_state = "promoted" if east["challenger_metric"] < east["champion_metric"] else "kept"
    assert {name: (r["state"], r["ingested"]) for name, r in rows.items()} == {
        "north": ("promoted", 0), "south": ("kept", 0), "east": (east_state, 1)}
    decisions = {}
    for name, row in rows.items():
        study = rt.db.study(row["study_id"])
        parent = rt.db.study(study.parent_id)  # warm-started from the first night
        assert parent.nightly_run_id == run1["id"] and parent.region == name
        decisions[name] = study.promotion
        assert decisions[name]["champion"] == "v0001"

    # north: the challenger beat the champion on the same validation data
    held = decisions["north"]["champion_metric"]
    assert champion(store, "north") == "v0002"
    new = card(store, "north", "v0002")
    assert new["metric"] < held  # RMSE: lower is better
    assert new["previous"] == "v0001" and new["previous_metric"] == held
    assert new["params"]["lr"] >= GOOD[0]
    # south: the champion stays; the challenger did not beat it
    assert champion(store, "south") == "v0001"
    assert not (store / "models" / "south" / "v0002").exists()
    assert decisions["south"]["challenger_metric"] >= decisions["south"]["champion_metric"]
    # east: new data; the champion is re-scored on its new validation rows through its own
    # id maps, and the better of the two is the champion
    assert east["compared_on"]["data_hash"] == rt.db.study(rows["east"]["study_id"]).data_hash
    assert champion(store, "east") == ("v0002" if east_state == "promoted" else "v0001")

    models = hoptune(home, redis_url, "models")
    assert models.returncode == 0 and "v0001" in models.stdout
    out = home / "served"
    exported = hoptune(home, redis_url, "export", "north", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert {p.name for p in out.iterdir()} == {"weights.pt", "card.json", "ids.json"}
    status = hoptune(home, redis_url, "status")
    assert "last nightly run per region" in status.stdout
    report = hoptune(home, redis_url, "report", "north", "--out", str(home / "report"))
    assert report.returncode == 0, report.stderr
    pngs = {p.name for p in (home / "report").glob("*.png")}
    assert pngs == {"optimization_history.png", "params.png", "learning_curves.png",
                    "hops_gantt.png", "champion_history.png"}
    page = (home / "report" / "index.html").read_text()
    assert all(name in page for name in pngs) and "v0001" in page


def test_a_second_nightly_run_at_once_refuses(make_config, rt, home, redis_url) -> None:
    make_config(("north", "south"), shards=2, epochs=1, trials=2, parallel=2)
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url}
    runs = [subprocess.Popen([sys.executable, "-m", "hoptune.tasks.cli", "nightly", "--detach"],
                             cwd=home, env=env, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE) for _ in range(2)]
    results = [(p.wait(120), *p.communicate()) for p in runs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    assert refused.startswith("hoptune: error: a nightly run is already going (nightly-run-")
    assert refused.endswith("not starting another\n") and refused.count("\n") == 1
    states = sorted(r["state"] for r in NightlyRecords(rt.db).runs())
    assert states == ["refused", "running"]
    # the refused run started nothing
    assert len(rt.db.studies()) == 2


def test_a_broken_region_is_recorded_and_the_others_finish(make_config, rt, cluster, home,
                                                           redis_url) -> None:
    make_config(("north", "south"), shards=2, epochs=1, trials=2, parallel=2)
    csv = home / "data" / "south.csv"
    lines = csv.read_text().splitlines()
    user, item, _ = lines[4].split(",")
    lines[4] = f"{user},{item},7"
    csv.write_text("\n".join(lines) + "\n")
    cluster({"north": 2}, workers=2)

    result = hoptune(home, redis_url, "nightly", "--no-progress")
    assert result.returncode == 1, result.stdout + result.stderr
    (run,) = NightlyRecords(rt.db).runs()
    assert run["state"] == "done"
    rows = {r["region"]: r for r in NightlyRecords(rt.db).regions(run["id"])}
    assert rows["north"]["state"] == "promoted"
    assert rows["south"]["state"] == "failed"
    assert rows["south"]["outcome"] == (
        "data/south.csv: column 'rating': row 4: value 7.0 outside rating_range [1.0, 5.0]")
    assert champion(home / "store", "north") == "v0001"
    assert not (home / "store" / "models" / "south").exists()
