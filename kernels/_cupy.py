"""Everything that touches CuPy, which is imported here and nowhere else.

CuPy is imported on first use, so CPU-only machines import ``kernels``
without it. Kernels are built by a factory cached per (kernel, dtype, device)
and compiled by CuPy on their first launch on that device, once per process
(and cached on disk by CuPy across processes).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np
import torch

from hoptune.kernels._source import KernelSpec, preamble

__all__ = [
    "device_names",
    "as_cupy",
    "elementwise_kernel",
    "identity",
    "import_cupy",
    "keep_for_launches",
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


#: The kernels built, by (id of the spec, dtype, device index), each with its spec (kept
#: alive, so its id is not reused). A dict by id, not functools.cache: hashing a spec, a
#: frozen dataclass of long strings, on every launch cost more than the lookup.
_kernels: dict[tuple[int, str, int], tuple[KernelSpec, Any]] = {}


def elementwise_kernel(spec: KernelSpec, dtype: str, device_index: int) -> Any:
    """The CuPy ElementwiseKernel of spec for one dtype and device, built once."""
    key = (id(spec), dtype, device_index)
    built = _kernels.get(key)
    if built is None:
        cupy = import_cupy()
        in_params, out_params = spec.cupy_params(dtype)
        kernel = cupy.ElementwiseKernel(
            in_params,
            out_params,
            spec.operation,
            name=spec.kernel_name(dtype),
            preamble=preamble(spec, dtype),
            options=NVRTC_OPTIONS,
            no_return=True,
        )
        built = _kernels.setdefault(key, (spec, kernel))
    return built[1]


#: Per thread: CuPy's wrapper of each torch stream launched on, by (address, device). A
#: stream object is a context of its thread's, and making one per launch cost microseconds.
_local = threading.local()


def _external_stream(cupy: ModuleType, pointer: int, index: int) -> Any:
    streams = _local.__dict__.setdefault("streams", {})
    stream = streams.get((pointer, index))
    if stream is None:
        with warnings.catch_warnings():  # CuPy 14 deprecates it; 13 has no replacement
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = streams[(pointer, index)] = cupy.cuda.ExternalStream(pointer, index)
    return stream


def launch(
    spec: KernelSpec, dtype: str, device: torch.device, args: Mapping[str, Any], size: int
) -> None:
    """Run spec on CUDA tensors in place, on torch's current stream.

    args maps every parameter name to a tensor (seen by CuPy in place, no copy)
    or a number. size is the loop length, used when the kernel has no "array"
    parameter.
    """
    cupy = import_cupy()
    index = device.index if device.index is not None else torch.cuda.current_device()
    kernel = elementwise_kernel(spec, dtype, index)
    stream = _external_stream(cupy, torch.cuda.current_stream(index).cuda_stream, index)
    current = cupy.cuda.runtime.getDevice()
    if current != index:
        cupy.cuda.runtime.setDevice(index)
    try:
        with stream:
            values = kernel_arguments(cupy, spec, dtype, args, index)
            if spec.has_arrays:
                kernel(*values)
            else:
                kernel(*values, size=size)
    finally:
        if current != index:
            cupy.cuda.runtime.setDevice(current)


def kernel_arguments(
    cupy: ModuleType, spec: KernelSpec, dtype: str, args: Mapping[str, Any],
    device_index: int | None = None,
) -> list[Any]:
    """The kernel's arguments in declaration order: tensors as CuPy arrays, numbers typed."""
    values: list[Any] = []
    for name, number in _argument_types(spec, dtype):
        value = args[name]
        if isinstance(value, torch.Tensor):
            values.append(as_cupy(cupy, value, device_index))
        else:
            values.append(number(value))
    return values


_types: dict[tuple[int, str], tuple[KernelSpec, list[tuple[str, Any]]]] = {}


def _argument_types(spec: KernelSpec, dtype: str) -> list[tuple[str, Any]]:
    """Each parameter's name and the NumPy scalar type a number passed for it becomes, made
    once per kernel and dtype (by the spec's id, as ``elementwise_kernel``)."""
    made = _types.get((id(spec), dtype))
    if made is None:
        made = _types.setdefault((id(spec), dtype), (spec, [
            (p.name, np.dtype(p.dtype_name(dtype)).type) for p in spec.params]))
    return made[1]


#: torch's dtypes a kernel argument may have, as NumPy's
_NUMPY_TYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64,
                torch.int32: np.int32}


def as_cupy(cupy: ModuleType, tensor: torch.Tensor, device_index: int | None = None) -> Any:
    """A one-dimensional CuPy array over a contiguous CUDA tensor's memory, in place.

    Made from the tensor's address (CuPy's ``UnownedMemory``, the tensor its
    owner): a DLPack export took about 33 microseconds a tensor on an H200's
    host, most of a small launch. A tensor of a pointer table (``keep_for_launches``)
    keeps its array, made once. Anything else (another dtype, strides, no
    elements, a CPU tensor) goes through DLPack, detached first: torch refuses to
    export a tensor that requires grad, such as the input of an autograd function.
    """
    kept = tensor.__dict__.get(_KEPT)
    if kept is not None:
        return kept
    dtype = _NUMPY_TYPES.get(tensor.dtype)
    if (device_index is None or dtype is None or not tensor.is_cuda or tensor.numel() == 0
            or not tensor.is_contiguous()):
        return cupy.from_dlpack(tensor.detach())
    n = tensor.numel()
    keep = tensor.__dict__.get(_KEEP, False)
    # a kept array lives in its tensor's __dict__: owning the tensor too would be a cycle
    memory = cupy.cuda.UnownedMemory(tensor.data_ptr(), n * tensor.element_size(),
                                     None if keep else tensor, device_index)
    array = cupy.ndarray((n,), dtype, cupy.cuda.MemoryPointer(memory, 0))
    if keep:
        tensor.__dict__[_KEPT] = array
    return array


_KEEP, _KEPT = "_hoptune_keep_for_launches", "_hoptune_cupy_array"


def keep_for_launches(tensor: torch.Tensor) -> torch.Tensor:
    """Mark a tensor that is launched on many times, unchanged (a pointer table's rows): its
    CuPy array is made at its first launch and kept with it."""
    tensor.__dict__[_KEEP] = True
    return tensor
