"""Each worker's device and kernel paths, as `hoptune status` and Flower show them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _cupy, _dispatch, _specs
from hoptune.kernels._selftest import SelfTestResult
from hoptune.tasks.worker._info import kernels_summary


def test_the_summary_names_each_path_and_every_fallback(monkeypatch) -> None:
    monkeypatch.setattr(_dispatch, "_logged", set())
    monkeypatch.setattr(_dispatch, "_taken", {})
    monkeypatch.setattr(_cupy, "unavailable_reason", lambda: None)
    monkeypatch.delenv("HOPTUNE_KERNELS", raising=False)

    def failing(spec, device: torch.device) -> SelfTestResult:  # noqa: ANN001
        return SelfTestResult(spec.name, str(device), False, "differs", 0.5, 10.0)

    kernels.configure(runner=failing, identify=lambda d: {"device_name": "Test GPU"})
    try:
        cuda = torch.device("cuda", 0)
        _dispatch.split_by_path("FusedAdamW", cuda, torch.float32, [], _specs.ADAMW)
        line = kernels_summary(kernels.kernel_report(), kernels.paths_taken())
    finally:
        kernels.reset()
    assert line == ("auto: FusedAdamW torch reference; not trusted: ht_adamw on cuda:0 "
                    "(self-test failed: differs)")
    assert kernels_summary({"mode": "torch"}, []) == "torch: no kernel used yet"


@pytest.mark.integration
def test_status_shows_each_worker_and_its_device(make_config, cluster, home, redis_url) -> None:
    make_config()
    workers = cluster({"north": 2}, workers=2)
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "status"], cwd=home,
                          env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "workers:" in lines
    table = lines[lines.index("workers:") + 1:]
    assert table[0].split() == ["worker", "device", "kernels", "shards", "hops"]
    for name, owned in zip(workers.names, workers.assignment, strict=True):
        (row,) = [line for line in table if line.startswith(name)]
        spec = ",".join(f"{r}:{k}" for r, k in owned)
        assert row.split()[1] == "cpu" and spec in row, row


def test_status_without_a_broker_says_so(home) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HOPTUNE_BROKER_URL"}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "status"], cwd=home,
                          env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("no studies yet\n\nworkers: no broker answers (start `hoptune up`, "
                           "or set HOPTUNE_BROKER_URL)\n")


@pytest.mark.integration
def test_the_demo_runs_without_a_gpu_package_and_names_each_workers_device(
        home, redis_url, tmp_path) -> None:
    blocked = tmp_path / "no-gpu-package" / "cupy"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('no GPU package here (test)')\n")
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url,
           "PYTHONPATH": os.pathsep.join([str(blocked.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "demo", "--fixed",
                           "--trials", "1", "--epochs", "1", "--workers", "2", "--no-progress"],
                          cwd=home, env=env, text=True, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    lines = [line for line in done.stdout.splitlines() if " hops on " in line]
    assert len(lines) == 2, done.stdout
    for line in lines:
        assert " on cpu (kernels: auto: " in line and "torch reference" in line, line


@pytest.mark.integration
def test_a_worker_counts_the_hops_it_ran_on_without_a_message(home, redis_url) -> None:
    # one worker owns both shards of each demo region: after a delivery's hop, the trial's
    # next hop runs there without its message, which Celery's count of tasks leaves out
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "demo", "--fixed",
                           "--trials", "1", "--epochs", "1", "--workers", "1", "--no-progress"],
                          cwd=home, env=env, text=True, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    header = lines[0].split()  # each row one trial (its params one word: compact JSON)
    rows = [line.split() for line in lines[2:5]]
    assert [row[0] for row in rows] == ["north", "south", "east"], done.stdout
    hops = sum(int(row[header.index("hops")]) for row in rows)
    (worker,) = [line for line in lines if " hops on " in line]
    assert hops == 6 and f" trained {hops} hops on " in worker, done.stdout
