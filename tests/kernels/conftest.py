"""Fixtures for the kernels tests.

``host_kernels`` builds every kernel from its declaration (kernels._specs) into
a host shared library with gcc; ``kernel_path_on_cpu`` makes the package take
its kernel path on CPU tensors and launch that library instead of CuPy, so the
code the GPU would run (operation, pointer tables, argument order) is executed
and compared without a GPU.
"""

from __future__ import annotations

import ctypes
import io
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import torch

from kernels import _cupy, _dispatch, _source, _specs

SCALAR_CTYPES = {"int32": ctypes.c_int, "int64": ctypes.c_longlong}
REAL_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double}


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Small models train far faster on one thread on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which path choices were logged, so a test sees its own."""
    monkeypatch.setattr(_dispatch, "_logged", set())


class HostKernels:
    """The kernels compiled for the host, launched like CuPy launches them."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._library = library
        self.launches: list[tuple[str, int]] = []

    def launch(
        self,
        spec: _source.KernelSpec,
        dtype: str,
        device: torch.device,
        args: Mapping[str, Any],
        size: int,
    ) -> None:
        assert device.type == "cpu"
        function = getattr(self._library, spec.kernel_name(dtype))
        values: list[Any] = [ctypes.c_ssize_t(size)]
        for p in spec.params:
            value = args[p.name]
            if p.kind == "scalar":
                ctype = REAL_CTYPES[dtype] if p.type == "real" else SCALAR_CTYPES[p.type]
                values.append(ctype(value))
            else:
                assert isinstance(value, torch.Tensor) and value.is_contiguous()
                assert value.dtype == getattr(torch, p.dtype_name(dtype))
                if p.kind == "array":
                    assert value.numel() == size
                values.append(ctypes.c_void_p(value.data_ptr()))
        function.restype = None
        function(*values)
        self.launches.append((spec.kernel_name(dtype), size))


@pytest.fixture(scope="session")
def host_kernels(tmp_path_factory: pytest.TempPathFactory) -> HostKernels:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: the host build of the kernels cannot be made")
    build = tmp_path_factory.mktemp("host_kernels")
    source = build / "kernels.cpp"
    source.write_text(_source.host_translation_unit(_specs.ALL))
    library = build / "kernels.so"
    subprocess.run(
        [gcc, "-x", "c++", "-O2", "-ffp-contract=off", "-fPIC", "-shared", "-Wall",
         "-Werror", "-o", str(library), str(source), "-lm"],
        check=True,
        capture_output=True,
    )
    return HostKernels(ctypes.CDLL(str(library)))


@pytest.fixture
def kernel_path_on_cpu(
    monkeypatch: pytest.MonkeyPatch, host_kernels: HostKernels, fresh_log: None
) -> HostKernels:
    """CPU float32/float64 tensors take the kernel path, launched from the host build."""
    real_choose = _dispatch.choose_path

    def choose(device: torch.device, dtype: torch.dtype) -> _dispatch.PathChoice:
        if device.type == "cpu" and dtype in (torch.float32, torch.float64):
            return _dispatch.PathChoice(_dispatch.KERNEL, "host build of the kernels (test)")
        return real_choose(device, dtype)

    monkeypatch.setattr(_dispatch, "choose_path", choose)
    monkeypatch.setattr(_cupy, "launch", host_kernels.launch)
    host_kernels.launches.clear()
    return host_kernels


class RatingNet(torch.nn.Module):
    """A small rating model: an MLP whose output scaled_sigmoid maps into (0, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(8, 32),
            torch.nn.Tanh(),
            torch.nn.LayerNorm(32),
            torch.nn.Linear(32, 16),
            torch.nn.GELU(),
            torch.nn.Linear(16, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import kernels

        return kernels.scaled_sigmoid(self.body(x).squeeze(-1), 5.0)


class Training:
    """Deterministic training of RatingNet on fixed synthetic ratings."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(64, 8, generator=g)
        self.y = torch.rand(64, generator=g) * 5

    def model(self, dtype: torch.dtype = torch.float32) -> RatingNet:
        torch.manual_seed(0)
        return RatingNet().to(dtype)

    def steps(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, n: int) -> None:
        dtype = next(model.parameters()).dtype
        x, y = self.x.to(dtype), self.y.to(dtype)
        for _ in range(n):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    def run(
        self,
        make: Callable[[Any], torch.optim.Optimizer],
        n: int,
        dtype: torch.dtype = torch.float32,
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        model = self.model(dtype)
        optimizer = make(model.parameters())
        self.steps(model, optimizer, n)
        return model, optimizer

    def run_resumed(
        self, make: Callable[[Any], torch.optim.Optimizer], k: int, n: int
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """k steps, a checkpoint as torch.save bytes, a fresh model and optimizer, n - k steps."""
        model, optimizer = self.run(make, k)
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
        del model, optimizer
        checkpoint = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
        model = self.model()
        for p in model.parameters():  # a fresh model must not start from the old weights
            p.data.add_(1.0)
        model.load_state_dict(checkpoint["model"])
        optimizer = make(model.parameters())
        optimizer.load_state_dict(checkpoint["optimizer"])
        self.steps(model, optimizer, n - k)
        return model, optimizer


@pytest.fixture(scope="session")
def training() -> Training:
    return Training()


def state_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every weight and every optimizer state tensor, in a fixed order."""
    out = [p.detach() for p in model.parameters()]
    for p in model.parameters():
        for key in sorted(optimizer.state[p]):
            out.append(torch.as_tensor(optimizer.state[p][key]))
    return out


#: How close a fused optimizer must follow torch.optim after 200 steps, by dtype:
#: |ours - torch| <= tol * (1 + |torch|). torch's CPU kernels fuse multiply-adds
#: (lerp, addcmul, add with alpha) where the reference rounds twice; in float32
#: training turns that ulp per step into a drift of a few 1e-7 over 200 steps.
FOLLOW_TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-12}


@pytest.fixture(scope="session")
def assert_follows() -> Callable[[list[torch.Tensor], list[torch.Tensor]], None]:
    def check(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> None:
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            tol = FOLLOW_TOLERANCE[b.dtype] if b.is_floating_point() else 0.0
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)

    return check


@pytest.fixture(scope="session")
def snapshot() -> Callable[[torch.nn.Module, torch.optim.Optimizer], list[torch.Tensor]]:
    return state_tensors
