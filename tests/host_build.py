"""The kernels built for the host with gcc, and a kernel path on CPU tensors that launches them.

``host_kernels`` builds every kernel from its declaration (kernels._specs) into
a host shared library; ``kernel_path_on_cpu`` makes the package take its
kernel path on CPU tensors and launch that library instead of CuPy, so the
code the GPU would run (operation, pointer tables, argument order) is executed
and compared without a GPU. The kernels tests and the tests of a pass's steps
(tests/tasks/test_steps.py) import these fixtures.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pytest
import torch

from hoptune.kernels import _cupy, _dispatch, _source, _specs

__all__ = ["HostKernels", "device_steps_beside", "fresh_log", "host_kernels",
           "kernel_path_on_cpu"]

SCALAR_CTYPES = {"int32": ctypes.c_int, "int64": ctypes.c_longlong}
REAL_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double}


@pytest.fixture
def fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which path choices were logged, so a test sees its own."""
    monkeypatch.setattr(_dispatch, "_logged", set())


class HostKernels:
    """The kernels compiled for the host, launched like CuPy launches them.

    ``launches`` records (kernel name, elements) per launch: a multi-tensor launch's
    elements are its tensors' sizes summed, without the chunks' padding.
    """

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
        # a multi-tensor launch is recorded by the elements it updates, padding left out
        elements = int(args["sizes"].sum()) if "sizes" in args else size
        self.launches.append((spec.kernel_name(dtype), elements))


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


def device_steps_beside(steps: Any, other: torch.optim.Optimizer,
                        params: Sequence[Sequence[torch.Tensor]],
                        gradients: Iterable[Sequence[torch.Tensor]],
                        check: Callable[[], None]) -> None:
    """``steps`` (``DeviceSteps`` of the optimizer of ``params[0]``) and ``other``'s steps
    from Python (over ``params[1]``), side by side: for each of ``gradients``, both sides'
    gradients written in place (where a CUDA graph keeps them), one device step taken and
    counted, one step of ``other``, then ``check()``."""
    for step_gradients in gradients:
        for side in params:
            for p, grad in zip(side, step_gradients, strict=True):
                p.grad.copy_(grad)
        steps.step()
        steps.counted()
        other.step()
        check()
