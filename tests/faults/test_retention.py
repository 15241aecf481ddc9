"""After a study only the retained checkpoints remain, and ``hoptune gc`` clears old ones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_a_finished_study_keeps_only_each_trials_final_weights(scenario, workers, home: Path,
                                                               fault_env) -> None:
    workers.start("w0", "north:0,north:1")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}, {"lr": 0.02}], epochs=3)
    scenario.settle(study)
    scenario.check(study)
    rt = scenario.runtime()
    kept = [k for k in rt.store.list("checkpoints") if k.endswith(".pt")]
    trials = rt.db.trials(study)
    assert sorted(kept) == sorted(
        f"checkpoints/study-{study}/trial-{t.id}/e0002-p0001.pt" for t in trials)
    env = {**os.environ, **fault_env}
    dry = subprocess.run(["hoptune", "gc", "--older-than", "0", "--dry-run"], cwd=home,
                         env=env, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and dry.stdout.startswith("would remove 2 checkpoints")
    assert sorted(rt.store.list("checkpoints")) == sorted(kept)
    done = subprocess.run(["hoptune", "gc", "--older-than", "0"], cwd=home, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("removed 2 checkpoints")
    assert rt.store.list("checkpoints") == []
    bad = subprocess.run(["hoptune", "gc", "--older-than", "-1"], cwd=home, env=env,
                         capture_output=True, text=True, timeout=60)
    assert (bad.returncode, bad.stderr) == (
        2, "hoptune: error: --older-than: must be >= 0 days, got -1.0\n")
