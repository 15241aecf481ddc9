"""bench/kernels.py: its block of BENCHMARKS.md and its summary line."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench" / "kernels.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_kernels", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_kernels"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["bench_kernels"]


def test_a_small_run_reports_every_optimizer(bench) -> None:
    plan = bench.plan(quick=True)
    plan = bench.Plan(plan.device, (1000,), {1000: 2}, plan.optimizers)
    seconds = {(1000, name): s for name, s in bench.step_seconds(plan, 1000).items()}
    assert set(seconds) == {(1000, name) for name in plan.optimizers}
    assert all(s > 0 for s in seconds.values())
    block = bench.report("python bench/kernels.py", plan, seconds)
    assert block.startswith("## Fused AdamW step")
    assert torch.__version__ in block
    for name in plan.optimizers:
        assert f"| 1e3 | {name} |" in block
    headline = json.loads(json.dumps(bench.summary(plan, seconds)))
    assert headline["device"] == plan.device.type
    ratios = [k for k in headline if k.startswith("fused_adamw_vs_torch_")]
    assert len(ratios) == len(plan.optimizers) - 1
