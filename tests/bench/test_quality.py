"""bench/quality.py: a smoke run tunes real tables three ways, scores each champion on held-out
rows, prints its JSON line, and leaves BENCHMARKS.md alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_smoke_run_scores_every_method_on_held_out_rows_and_writes_nothing(
        tmp_path: Path) -> None:
    before = (ROOT / "BENCHMARKS.md").read_text()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "quality.py"), "--quick",
                           "--jobs", "1"], cwd=tmp_path, text=True, capture_output=True,
                          timeout=300, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(last) == {"diabetes-mlp", "breast-cancer-mlp"}
    regression, classification = last["diabetes-mlp"], last["breast-cancer-mlp"]
    assert (regression["metric"], classification["metric"]) == ("rmse", "accuracy")
    for case in (regression, classification):
        for method in ("hoptune", "random", "optuna"):
            assert len(case[method]["per_seed"]) == 1
            assert case[method]["epochs"] >= 1
            # the champion's metric on the validation rows it was chosen on, every method
            assert len(case[method]["validation_per_seed"]) == 1
            assert case[method]["validation"] == case[method]["validation_per_seed"][0]
        for other in ("random", "optuna"):
            assert case[f"validation_as_good_as_{other}"] in (0, 1)
        # random search trains every one of its 4 trials for both epochs
        assert case["random"]["epochs"] == 8
    # every champion learned something: better than no model on the held-out rows
    assert all(regression[m]["held_out"] < regression["floor"] for m in ("hoptune", "random"))
    assert all(classification[m]["held_out"] > classification["floor"]
               for m in ("hoptune", "random"))
    # a champion's validation accuracy is a share of the validation rows it chose on
    assert all(0 < classification[m]["validation"] <= 1 for m in ("hoptune", "random", "optuna"))
    assert (ROOT / "BENCHMARKS.md").read_text() == before


def test_each_seed_holds_out_its_own_tenth_and_ten_seeds_every_row_once() -> None:
    import numpy as np
    import pandas as pd

    sys.path.insert(0, str(ROOT))
    try:
        from bench import quality
    finally:
        sys.path.remove(str(ROOT))
    table = pd.DataFrame({"row": np.arange(569), "label": np.arange(569) % 2})
    held = []
    for seed in range(10):
        seen, out = quality.hold_out(table, seed)
        assert sorted([*seen["row"], *out["row"]]) == list(range(569))
        assert len(out) in (56, 57)
        held.append(set(out["row"]))
    assert sorted(r for rows in held for r in rows) == list(range(569))  # each row once
    assert set(quality.hold_out(table, 10)[1]["row"]) == held[0]
    # the earlier protocol: one tenth, drawn with seed 7, the same for every seed
    fixed = [set(quality.hold_out(table, seed, fixed=True)[1]["row"]) for seed in (0, 1)]
    assert fixed[0] == fixed[1]
    drawn = np.random.default_rng(quality.HELD_OUT_SEED).random(569) < 0.1
    assert fixed[0] == set(np.flatnonzero(drawn))


def test_movielens_is_fetched_once_and_its_copy_written_whole(tmp_path, monkeypatch) -> None:
    """The copy of MovieLens in the cache appears whole (written aside, then renamed): cases
    run in parallel processes must never read half of it."""
    import zipfile

    sys.path.insert(0, str(ROOT))
    try:
        from bench import quality
    finally:
        sys.path.remove(str(ROOT))
    inter = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t2\t4\t0\n3\t2\t5\t0\n"
    fetched = []

    def pip_download(command, check):  # noqa: ANN001, ANN202
        fetched.append(command)
        with zipfile.ZipFile(Path(command[-1]) / "recbole-1.2.1-py3-none-any.whl", "w") as w:
            w.writestr("recbole/dataset_example/ml-100k/ml-100k.inter", inter)

    monkeypatch.setattr(quality.subprocess, "run", pip_download)
    for _ in range(2):
        table = quality.movielens(None, tmp_path)
        assert table.to_dict("list") == {"user_id": ["1", "3"], "item_id": ["2", "2"],
                                         "rating": [4.0, 5.0]}
    assert len(fetched) == 1  # the second read found the copy
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ml-100k.inter", "recbole-1.2.1-py3-none-any.whl"]  # nothing half-written left
