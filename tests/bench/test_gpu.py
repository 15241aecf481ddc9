"""bench/gpu.py: on a machine without a GPU it says so and prints its JSON line of nulls;
its parts run on the CPU as they would on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_a_gpu_it_says_so_and_prints_nulls(tmp_path: Path) -> None:
    before = (ROOT / "BENCHMARKS.md").read_text()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu.py")], cwd=tmp_path,
                          text=True, capture_output=True, timeout=120, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert "no CUDA device here" in done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("device", "adamw_1e8_vs_torch_fused", "adamw_1e8_bandwidth_share",
                "gpu_hop_overhead_share"):
        assert key in last and last[key] is None
    assert set(last.values()) == {None}
    assert (ROOT / "BENCHMARKS.md").read_text() == before


@pytest.mark.integration
def test_its_measurements_run_on_the_cpu(home: Path, redis_url: str) -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from bench import gpu
    finally:
        sys.path.remove(str(ROOT))
    cpu = torch.device("cpu")
    assert gpu.copy_bandwidth(cpu, size=2**16, repeats=2) > 0
    adamw = gpu.adamw_seconds(cpu, sizes=(1000, 10_000), repeats={1000: 2, 10_000: 2})
    assert set(adamw[1000]) == {"FusedAdamW", "torch AdamW fused", "torch AdamW foreach"}
    assert gpu.fused_adamw_path(cpu).startswith("FusedAdamW")
    hops = gpu.hop_parts(home, ["cpu", "cpu"], rows_per_shard=3000, epochs=1)
    assert hops["train_s"] > 0 and 0 < hops["overhead_share"] < 1
    figures = gpu.summary(cpu, "FusedAdamW", 10.0, adamw, {"cpu": hops})
    assert figures["device"] == "cpu" and figures["adamw_1e8_vs_torch_fused"] > 0
    assert figures["gpu_hop_overhead_share"] == hops["overhead_share"]
    assert json.loads(json.dumps(figures)).keys() == set(gpu.KEYS)
