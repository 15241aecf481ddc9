"""bench/fusion.py: a smoke run measures both ways, prints its JSON line, and leaves
BENCHMARKS.md alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_smoke_run_prints_its_figures_and_writes_nothing(tmp_path: Path) -> None:
    before = (ROOT / "BENCHMARKS.md").read_text()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fusion.py"), "--sizes", "2", "--rounds", "1"],
        cwd=tmp_path, text=True, capture_output=True, timeout=300, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(last) >= {"cpu_speedup_8", "gpu_speedup_8", "cpu_speedup_8_mixed_sizes",
                         "mlp_cpu_speedup_8"}
    assert last["cpu_speedup_8"] is None  # no cohort of 8 in a smoke run
    for model in ("demo rating model", "demo rating model, mixed sizes", "MLP"):
        assert f"cpu {model} K=2: singles" in done.stderr
    assert (ROOT / "BENCHMARKS.md").read_text() == before
