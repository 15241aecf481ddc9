"""Path selection: the CuPy kernel only where it can run, the reference with a stated reason."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _cupy, _dispatch

CUDA = torch.device("cuda", 0)


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch):
    """Replace the cupy import: fake_cupy(None) makes it fail, fake_cupy(n) finds n devices
    (an exception instance is raised by the device count instead)."""

    def install(count: int | Exception | None) -> None:
        def get_device_count() -> int:
            if isinstance(count, Exception):
                raise count
            return count

        def import_cupy() -> types.SimpleNamespace:
            if count is None:
                raise ImportError("No module named 'cupy'")
            runtime = types.SimpleNamespace(getDeviceCount=get_device_count)
            return types.SimpleNamespace(
                __version__="0.0-test", cuda=types.SimpleNamespace(runtime=runtime)
            )

        monkeypatch.setattr(_cupy, "import_cupy", import_cupy)
        _cupy.unavailable_reason.cache_clear()

    yield install
    _cupy.unavailable_reason.cache_clear()


def test_cpu_tensors_take_the_reference(fake_cupy) -> None:
    fake_cupy(1)  # even with a CuPy that sees a device
    choice = _dispatch.choose_path(torch.device("cpu"), torch.float32)
    assert choice.path == "reference"
    assert "on cpu" in choice.reason


def test_missing_cupy_falls_back(fake_cupy) -> None:
    fake_cupy(None)
    choice = _dispatch.choose_path(CUDA, torch.float32)
    assert choice.path == "reference"
    assert choice.reason == "CuPy is not installed (No module named 'cupy')"


def test_cupy_without_a_device_falls_back(fake_cupy) -> None:
    fake_cupy(RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))
    choice = _dispatch.choose_path(CUDA, torch.float32)
    assert choice.path == "reference"
    assert "finds no usable CUDA device (cudaErrorNoDevice" in choice.reason
    fake_cupy(0)
    assert _dispatch.choose_path(CUDA, torch.float32).reason.endswith("finds no CUDA device")


def test_cupy_with_a_device_takes_the_kernel(fake_cupy) -> None:
    fake_cupy(1)
    assert _dispatch.choose_path(CUDA, torch.float32) == _dispatch.PathChoice(
        "kernel", "CuPy kernel on cuda:0"
    )
    assert _dispatch.choose_path(CUDA, torch.float64).path == "kernel"
    half = _dispatch.choose_path(CUDA, torch.float16)
    assert half.path == "reference"
    assert half.reason == "no kernel is built for float16 (only float32, float64)"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_the_installed_cupy_sees_no_device() -> None:
    pytest.importorskip("cupy", reason="CuPy is not installed here")
    _cupy.unavailable_reason.cache_clear()
    choice = _dispatch.choose_path(CUDA, torch.float32)
    assert choice.path == "reference"
    assert "finds no" in choice.reason


def test_an_optimizer_logs_its_path_once(fresh_log, caplog) -> None:
    caplog.set_level(logging.INFO, logger="kernels")
    for _ in range(2):
        p = torch.ones(3, requires_grad=True)
        optimizer = kernels.FusedSGD([p], lr=0.1)
        for _ in range(3):
            p.grad = torch.ones(3)
            optimizer.step()
    records = [r for r in caplog.records if r.name == "kernels"]
    assert [r.getMessage() for r in records] == [
        "FusedSGD on cpu float32 runs the torch reference: "
        "the tensors are on cpu; the CuPy kernels run on CUDA devices"
    ]


def test_strided_tensors_on_the_kernel_path_fall_back_with_a_reason(
    kernel_path_on_cpu, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="kernels")
    dense, strided = torch.ones(4, 3), torch.ones(3, 4).t()
    optimizer = kernels.FusedSGD([dense, strided], lr=0.1)
    dense.grad, strided.grad = torch.ones(4, 3), torch.ones(4, 3)
    optimizer.step()
    assert kernel_path_on_cpu.launches == [("ht_sgd_float32", 12)]
    assert torch.equal(dense, strided)
    messages = [r.getMessage() for r in caplog.records if r.name == "kernels"]
    assert any("runs the CuPy kernel" in m for m in messages)
    fallback = "runs the torch reference: for the tensors that are not contiguous"
    assert any(fallback in m for m in messages)


def test_kernels_import_and_run_without_cupy() -> None:
    code = (
        "import sys; sys.modules['cupy'] = None\n"  # any 'import cupy' now fails
        "import torch\nfrom hoptune import kernels\n"
        "p = torch.ones(3, requires_grad=True)\n"
        "opt = kernels.make_optimizer('fused_adamw', [p])\n"
        "kernels.scaled_sigmoid(p, 2.0).sum().backward()\n"
        "kernels.clip_grad_norm_([p], 1.0)\n"
        "opt.step()\n"
        "print(sys.modules['cupy'])\n"
    )
    root = Path(kernels.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_cupy_is_imported_in_one_place() -> None:
    package = Path(kernels.__file__).parent
    importers = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "cupy" or n.startswith("cupy.") or n.startswith("cupyx") for n in names):
                importers.add(path.name)
    assert importers == {"_cupy.py"}
