"""Everything that touches CuPy, which is imported here and nowhere else.

CuPy is imported on first use, so CPU-only machines import ``kernels``
without it. Kernels are built by a factory cached per (kernel, dtype, device)
and compiled by CuPy on their first launch on that device, once per process
(and cached on disk by CuPy across processes).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np
import torch

from hoptune.kernels._source import KernelSpec, preamble

__all__ = [
    "device_names",
    "elementwise_kernel",
    "identity",
    "import_cupy",
    "kernel_arguments",
    "launch",
    "unavailable_reason",
]

# Without contraction into fused multiply-adds the kernels round operation for
# operation like the torch reference; they are memory bound, so nothing is lost.
NVRTC_OPTIONS = ("--fmad=false",)


def import_cupy() -> ModuleType:
    """The cupy module; raises ImportError where it is not installed."""
    import cupy

    return cupy


@functools.cache
def unavailable_reason() -> str | None:
    """Why the CuPy kernels cannot run in this process, or None if they can."""
    try:
        cupy = import_cupy()
    except ImportError as exc:
        return f"CuPy is not installed ({exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy raises its own runtime errors, and OSError without a driver
        return f"CuPy {cupy.__version__} is installed but finds no usable CUDA device ({exc})"
    if count == 0:
        return f"CuPy {cupy.__version__} is installed but finds no CUDA device"
    return None


def _cuda_version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def identity(device: torch.device) -> dict[str, str]:
    """What a kernel's behaviour on device depends on: the GPU's name, CuPy's and CUDA's versions.

    Keys: ``device_name``, ``cupy`` and ``cuda`` (CuPy's CUDA runtime), ``torch_cuda``
    (the CUDA torch is built for); a value that cannot be read says why.
    """
    out = {"device_name": str(device), "cupy": "not installed", "cuda": "unknown",
           "torch_cuda": torch.version.cuda or "none"}
    if device.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(device)
    try:
        cupy = import_cupy()
    except ImportError:
        return out
    out["cupy"] = cupy.__version__
    try:
        out["cuda"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
    except Exception as exc:  # noqa: BLE001 - CuPy raises its own errors without a driver
        out["cuda"] = f"unknown ({type(exc).__name__})"
    return out


def device_names() -> list[str] | None:
    """The names of the CUDA devices CuPy sees, in its order; None where CuPy is not installed."""
    try:
        cupy = import_cupy()
    except ImportError:
        return None
    names = []
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


@functools.cache
def elementwise_kernel(spec: KernelSpec, dtype: str, device_index: int) -> Any:
    """The CuPy ElementwiseKernel of spec for one dtype and device, built once."""
    cupy = import_cupy()
    in_params, out_params = spec.cupy_params(dtype)
    return cupy.ElementwiseKernel(
        in_params,
        out_params,
        spec.operation,
        name=spec.kernel_name(dtype),
        preamble=preamble(spec, dtype),
        options=NVRTC_OPTIONS,
        no_return=True,
    )


def launch(
    spec: KernelSpec, dtype: str, device: torch.device, args: Mapping[str, Any], size: int
) -> None:
    """Run spec on CUDA tensors in place, on torch's current stream.

    args maps every parameter name to a tensor (shared with CuPy through DLPack,
    no copy) or a number. size is the loop length, used when the kernel has no
    "array" parameter.
    """
    cupy = import_cupy()
    index = device.index if device.index is not None else torch.cuda.current_device()
    kernel = elementwise_kernel(spec, dtype, index)
    stream = torch.cuda.current_stream(index).cuda_stream
    with cupy.cuda.Device(index), cupy.cuda.ExternalStream(stream):
        values = kernel_arguments(cupy, spec, dtype, args)
        if spec.has_arrays:
            kernel(*values)
        else:
            kernel(*values, size=size)


def kernel_arguments(
    cupy: ModuleType, spec: KernelSpec, dtype: str, args: Mapping[str, Any]
) -> list[Any]:
    """The kernel's arguments in declaration order: tensors as CuPy arrays, numbers typed.

    Tensors are detached before their DLPack export (torch refuses to export a
    tensor that requires grad, such as the input of an autograd function).
    """
    values: list[Any] = []
    for p in spec.params:
        value = args[p.name]
        if isinstance(value, torch.Tensor):
            values.append(cupy.from_dlpack(value.detach()))
        else:
            values.append(np.dtype(p.dtype_name(dtype)).type(value))
    return values
