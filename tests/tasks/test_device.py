"""Which device a worker trains on: --gpu, --device, the default, and one-line refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hoptune.core import ConfigError
from hoptune.tasks.cli._cluster import default_workers, worker_command
from hoptune.tasks.worker._device import (
    WorkerDevicePlan,
    local_devices,
    parse_device,
    plan_worker_device,
    worker_device,
    worker_environment,
)


@pytest.mark.parametrize(
    ("device", "gpu", "gpus", "visible", "plan"),
    [
        (None, None, 0, None, WorkerDevicePlan("cpu")),  # no GPU: the CPU
        (None, None, 2, None, WorkerDevicePlan("cuda:0")),  # a GPU is visible: the first
        (None, 1, 2, None, WorkerDevicePlan("cuda:0", visible="1")),  # --gpu: only that one
        (None, 1, 2, "4,6", WorkerDevicePlan("cuda:0", visible="6")),  # counted through it
        ("cpu", 1, 2, None, WorkerDevicePlan("cpu")),  # --device overrides --gpu
        ("cuda:1", None, 2, None, WorkerDevicePlan("cuda:1")),
        ("CUDA", None, 1, None, WorkerDevicePlan("cuda:0")),
        (" cpu ", None, 0, None, WorkerDevicePlan("cpu")),
    ],
)
def test_the_device_a_worker_plans(device, gpu, gpus, visible, plan) -> None:
    assert plan_worker_device(device, gpu, gpus=gpus, visible=visible) == plan


@pytest.mark.parametrize(
    ("device", "gpu", "gpus", "message"),
    [
        ("tpu", None, 2, "--device: expected cpu, cuda or cuda:N, got 'tpu'"),
        ("cpu:1", None, 2, "--device: expected cpu, cuda or cuda:N, got 'cpu:1'"),
        ("cuda:", None, 2, "--device: expected cpu, cuda or cuda:N, got 'cuda:'"),
        ("cuda:7", None, 2, "--device cuda:7: no GPU 7 (this host has 2 visible: 0..1)"),
        (None, 2, 2, "--gpu 2: no GPU 2 (this host has 2 visible: 0..1)"),
        (None, -1, 2, "--gpu -1: no GPU -1 (this host has 2 visible: 0..1)"),
    ],
)
def test_a_bad_device_is_one_line_naming_the_option(device, gpu, gpus, message) -> None:
    with pytest.raises(ConfigError) as caught:
        plan_worker_device(device, gpu, gpus=gpus)
    assert str(caught.value) == message


def test_a_gpu_on_a_host_without_one_says_so() -> None:
    with pytest.raises(ConfigError, match=r"^--device cuda: no CUDA device is visible"):
        parse_device("cuda", gpus=0)


def test_the_plan_reaches_the_training_process_through_the_environment() -> None:
    assert WorkerDevicePlan("cuda:0", visible="3").environ() == {
        "HOPTUNE_DEVICE": "cuda:0", "CUDA_VISIBLE_DEVICES": "3"}
    assert WorkerDevicePlan("cpu").environ() == {"HOPTUNE_DEVICE": "cpu"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_a_gpu_a_worker_trains_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOPTUNE_KERNELS", raising=False)
    assert worker_environment(None, None, None) == {"HOPTUNE_DEVICE": "cpu"}
    assert worker_device({}) == torch.device("cpu")
    assert worker_device({"HOPTUNE_DEVICE": "cpu"}) == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"^HOPTUNE_DEVICE cuda: no CUDA device is visible"):
        worker_device({"HOPTUNE_DEVICE": "cuda"})
    assert default_workers() == 2


def test_the_kernels_setting_is_checked_before_the_worker_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOPTUNE_KERNELS", "fast")
    with pytest.raises(ConfigError, match=r"^HOPTUNE_KERNELS: expected one of auto, cupy, torch, "
                                          r"got 'fast'$"):
        worker_environment("cpu", None, None)
    assert worker_environment("cpu", None, "torch") == {"HOPTUNE_DEVICE": "cpu",
                                                        "HOPTUNE_KERNELS": "torch"}
    with pytest.raises(ConfigError, match=r"^--kernels cupy: this worker trains on the CPU"):
        worker_environment("cpu", None, "cupy")


def test_local_workers_take_the_visible_gpus_in_turn() -> None:
    assert local_devices(3, 2) == ["cuda:0", "cuda:1", "cuda:0"]
    assert local_devices(2, 0) == ["cpu", "cpu"]
    assert default_workers(4) == 4 and default_workers(0) == 2
    command = worker_command([("north", 0)], "w0@host", device="cuda:1")
    assert command[-2:] == ["--device", "cuda:1"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--device", "tpu"), "--device: expected cpu, cuda or cuda:N, got 'tpu'"),
        (("--device", "cuda:7"), "--device cuda:7: no CUDA device is visible"),
        (("--gpu", "0"), "--gpu 0: no CUDA device is visible"),
        (("--kernels", "cupy"), "--kernels cupy: this worker trains on the CPU"),
    ],
)
def test_hoptune_worker_refuses_a_bad_device_in_one_line(home: Path, args, message) -> None:
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "worker", "--shards",
                           "north:0", *args], cwd=home, text=True, capture_output=True,
                          env=os.environ.copy(), timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(f"hoptune: error: {message}")
    assert done.stderr.count("\n") == 1
