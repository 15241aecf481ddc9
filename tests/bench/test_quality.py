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
        # random search trains every one of its 4 trials for both epochs
        assert case["random"]["epochs"] == 8
    # every champion learned something: better than no model on the held-out rows
    assert all(regression[m]["held_out"] < regression["floor"] for m in ("hoptune", "random"))
    assert all(classification[m]["held_out"] > classification["floor"]
               for m in ("hoptune", "random"))
    assert (ROOT / "BENCHMARKS.md").read_text() == before
