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
    sweep = gpu.optimizer_sweep(cpu, sizes=(1000, 10_000), tensors=(10, 100),
                                repeats={1000: 2, 10_000: 2})
    assert {(r["optimizer"], r["tensors"], r["parameters"], r["by"]) for r in sweep} == {
        (o, t, n, by) for o in ("AdamW", "SGD") for t in (10, 100) for n in (1000, 10_000)
        for by in ("ours", "torch fused", "torch foreach")}
    assert all(r["seconds"] > 0 for r in sweep)
    adamw = gpu.adamw_table(sweep)
    assert set(adamw[1000]) == {"FusedAdamW", "torch AdamW fused", "torch AdamW foreach"}
    assert gpu.slowest_ratio(sweep, "SGD", smallest=1000) == min(
        r["seconds"] / ours["seconds"] for r in sweep for ours in sweep
        if r["by"] == "torch fused" and ours["by"] == "ours" and r["optimizer"] == "SGD"
        and ours["optimizer"] == "SGD" and (r["tensors"], r["parameters"]) == (
            ours["tensors"], ours["parameters"]))
    cohorts = gpu.cohort_rates(cpu, sizes=(1, 2), rounds=1)
    assert set(cohorts["sizes"]) == {1, 2} and cohorts["cpu_thread"] > 0
    assert all(v > 0 for r in cohorts["sizes"].values() for v in r.values())
    assert gpu.pass_busy(cpu, sizes=(1, 2)) == {1: 0.0, 2: 0.0}  # no device work on a CPU
    os.environ.pop("HOPTUNE_CUDA_GRAPHS", None)
    graphs = gpu.graph_rates(cpu, sizes=(1, 2), rounds=1)  # all eager on a CPU
    assert set(graphs) == {1, 2} and all(v > 0 for r in graphs.values() for v in r.values())
    assert all(set(r) == {"captured", "backward", "eager"} for r in graphs.values())
    assert "HOPTUNE_CUDA_GRAPHS" not in os.environ  # the setting it changed, put back
    assert gpu.fused_adamw_path(cpu).startswith("FusedAdamW")
    from bench.hop_overhead import _calibrate  # the rows of a hop of about --hop-seconds

    rows, size = _calibrate(home, 0.05, 1, "cpu", rows=4000)
    assert rows > 0 and size > 0 and not (home / "calibration").exists()
    hops = gpu.hop_parts(home, ["cpu", "cpu"], rows_per_shard=3000, epochs=1)
    assert hops["train_s"] > 0 and 0 < hops["overhead_share"] < 1
    figures = gpu.summary(cpu, "FusedAdamW", 10.0, adamw, {"cpu": hops})
    assert figures["device"] == "cpu" and figures["adamw_1e8_vs_torch_fused"] > 0
    assert figures["gpu_hop_overhead_share"] == hops["overhead_share"]
    assert json.loads(json.dumps(figures)).keys() == set(gpu.KEYS)
    checks = {"pytest_gpu": "3 passed", "pytest_exit": 0, "doctor": ["ok   devices: 1"],
              "doctor_exit": 0}
    figures = gpu.summary(cpu, "FusedAdamW", 10.0, adamw, {"cpu": hops}, sweep=sweep,
                          cohorts=cohorts, checks=checks, busy={1: 0.25, 32: "Boom: failed"},
                          graphs={1: {"captured": 30.0, "backward": 15.0, "eager": 3.0},
                                  32: {"captured": 100.0, "backward": 80.0, "eager": 50.0}})
    assert (figures["captured_over_eager_single"], figures["captured_over_eager_cohort_32"]) == (
        10.0, 2.0)
    assert (figures["captured_over_backward_single"],
            figures["captured_over_backward_cohort_32"]) == (2.0, 1.25)
    assert figures["gpu_busy_single_pass"] == 0.25
    assert figures["gpu_busy_cohort_32_pass"] == "Boom: failed"
    assert figures["sgd_slowest_vs_torch_fused"] > 0 and figures["sgd_1e8_bandwidth_share"] > 0
    assert figures["single_hops_vs_cpu_thread"] > 0 and figures["cohort_32_vs_cpu_thread"] is None
    assert figures["fuse_auto_demo"] == 16  # fuse = "auto" on a CPU: regions.CPU_FUSE
    assert figures["pytest_gpu"] == "3 passed" and figures["doctor"] == ["ok   devices: 1"]
    assert json.loads(json.dumps(figures)).keys() == set(gpu.KEYS)
    table = "\n".join(gpu.sweep_lines(sweep, 10.0) + gpu.cohort_lines(cohorts))
    assert table.count("| AdamW | 100 |") == 2 and table.count("| SGD | 10 |") == 2
    assert "| 2 |" in table and "fuses cohorts of up to 16 trials" in table


def test_the_checks_it_records_are_pytests_summary_and_doctors_verdicts() -> None:
    """What bench/gpu.py keeps of `pytest -m gpu` and `hoptune doctor`, from their output."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench import gpu
    finally:
        sys.path.remove(str(ROOT))
    out = "..s\n= warnings summary =\n== 3 passed, 1 skipped, 1230 deselected in 9.1s ==\n"
    assert gpu.pytest_summary(out) == "3 passed, 1 skipped, 1230 deselected in 9.1s"
    assert gpu.pytest_summary("ERROR: no tests\n") is None
    doctor = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "doctor"], text=True,
                            capture_output=True, timeout=120, env=os.environ.copy())
    verdicts = gpu.doctor_verdicts(doctor.stdout)
    assert verdicts[0].startswith("versions: Python")
    assert any(v.startswith("ok") and "devices" in v for v in verdicts)
    assert all(v.split(" ", 1)[0] in ("versions:", "ok", "warn", "fail") for v in verdicts)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_the_gpu_session_script_runs_every_step_and_leaves_its_logs_under_out(
        tmp_path: Path) -> None:
    """bench/gpu_session.sh, the one run a lent GPU gets, tried where there is none: each step
    runs, bench/gpu.py says there is no GPU, and the logs land under $OUT. It runs in this
    environment, not from the GPU machine's wheels a checkout may hold in .whl/ (another
    Python's)."""
    before = (ROOT / "BENCHMARKS.md").read_text()
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_session.sh")], cwd=ROOT, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "OUT": str(out), "PYTHON": sys.executable,
                               "HOPTUNE_WHEELS": str(tmp_path / "no-wheels")})
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == {"nvidia-smi.txt", "gpu.json", "gpu.log",
                                               "BENCHMARKS.md"}
    assert "no CUDA device here" in (out / "gpu.log").read_text()
    last = json.loads((out / "gpu.json").read_text().strip().splitlines()[-1])
    assert set(last.values()) == {None}
    assert json.loads(done.stdout.splitlines()[0]) == last
    assert (out / "BENCHMARKS.md").read_text() == before
    assert (ROOT / "BENCHMARKS.md").read_text() == before


def test_the_busy_share_is_the_union_of_the_devices_intervals_over_the_pass() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from bench import gpu
    finally:
        sys.path.remove(str(ROOT))
    assert gpu.busy_share([], 0.0, 10.0) == 0.0
    assert gpu.busy_share([(1, 3), (2, 4), (6, 7)], 0.0, 10.0) == 0.4  # overlaps count once
    assert gpu.busy_share([(-5, 2), (9, 20)], 0.0, 10.0) == 0.3  # clipped to the pass
    assert gpu.busy_share([(3, 4), (0, 10)], 0.0, 10.0) == 1.0
    assert gpu.busy_share([(1, 2)], 5.0, 5.0) == 0.0


def test_the_device_work_leaves_out_ranges_named_on_the_host() -> None:
    """A ``record_function`` range (the pass's own, an optimizer's step) is also recorded on
    the device, spanning its kernels and the gaps between them: counted as work, every pass
    looked 99% busy."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    sys.path.insert(0, str(ROOT))
    try:
        from bench import gpu
    finally:
        sys.path.remove(str(ROOT))

    def event(start: float, end: float, device: DeviceType, annotation: bool = False):  # noqa: ANN202
        return SimpleNamespace(time_range=SimpleNamespace(start=start, end=end),
                               device_type=device, is_user_annotation=annotation)

    events = [event(0, 100, DeviceType.CPU), event(0, 100, DeviceType.CUDA, annotation=True),
              event(10, 12, DeviceType.CUDA), event(50, 51, DeviceType.CUDA)]
    work = gpu.device_work(events)
    assert work == [(10, 12), (50, 51)]
    assert gpu.busy_share(work, 0, 100) == 0.03
