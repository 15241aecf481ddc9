"""The nightly retraining on real Redis and real workers, run twice; and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner._db import NightlyRecords

pytestmark = pytest.mark.integration


def hoptune(home: Path, redis_url: str, *args: str, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url}
    return subprocess.run([sys.executable, "-m", "tasks.cli", *args], cwd=home, env=env,
                          text=True, capture_output=True, timeout=timeout)


def card(store: Path, region: str, version: str) -> dict:
    return json.loads((store / "models" / region / version / "card.json").read_text())


def champion(store: Path, region: str) -> str:
    return json.loads((store / "models" / region / "champion.json").read_text())["version"]


def test_two_nights_promote_only_where_the_metric_improved(make_config, rt, cluster, home,
                                                           redis_url) -> None:
    make_config(("north", "south"), shards=2, epochs=2, trials=4, parallel=2)
    cluster({"north": 2, "south": 2}, workers=2)
    store = home / "store"

    first = hoptune(home, redis_url, "nightly", "--no-progress")
    assert first.returncode == 0, first.stdout + first.stderr
    records = NightlyRecords(rt.db)
    (run1,) = records.runs()
    assert run1["state"] == "done"
    for region in ("north", "south"):
        assert champion(store, region) == "v0001"
        first_card = card(store, region, "v0001")
        assert first_card["previous"] is None
        assert (store / "models" / region / "v0001" / "weights.pt").is_file()
        assert first_card["visit_orders"] and first_card["data_hash"]
    assert {r["region"]: (r["state"], r["ingested"]) for r in records.regions(run1["id"])} == {
        "north": ("promoted", 1), "south": ("promoted", 1)}

    second = hoptune(home, redis_url, "nightly", "--no-progress")
    assert second.returncode == 0, second.stdout + second.stderr
    run2 = records.runs()[-1]
    assert run2["state"] == "done" and run2["id"] != run1["id"]
    for row in records.regions(run2["id"]):
        assert row["ingested"] == 0  # the data did not change: nothing re-ingested
        study = rt.db.study(row["study_id"])
        parent = rt.db.study(study["parent_id"])  # warm-started from the first night
        assert parent["nightly_run_id"] == run1["id"] and parent["region"] == row["region"]
        decision = study["promotion"]
        held = decision["champion_metric"]
        assert decision["champion"] == "v0001" and held is not None
        if decision["promoted"]:
            assert row["state"] == "promoted"
            assert champion(store, row["region"]) == "v0002"
            new = card(store, row["region"], "v0002")
            assert new["metric"] < held  # RMSE: lower is better, on the same data
            assert new["previous"] == "v0001" and new["previous_metric"] == held
        else:
            assert row["state"] == "kept"
            assert champion(store, row["region"]) == "v0001"
            assert not (store / "models" / row["region"] / "v0002").exists()
            assert decision["challenger_metric"] >= held

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
    runs = [subprocess.Popen([sys.executable, "-m", "tasks.cli", "nightly", "--detach"],
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
