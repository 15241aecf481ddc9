"""Kernel declarations and the source code generated from them.

A ``KernelSpec`` declares one elementwise kernel once: its parameters, the
``.cuh`` files holding its math and the operation that calls into that math.
From it come the CuPy ``ElementwiseKernel`` arguments (``cupy_params``,
``preamble``), a standalone CUDA ``__global__`` wrapper for nvcc, and a host
C++ wrapper built with gcc, so the code a GPU would run can be compiled and
executed where there is none.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DTYPES",
    "KernelSpec",
    "Param",
    "cuda_translation_unit",
    "header_text",
    "host_translation_unit",
    "preamble",
]

_HERE = Path(__file__).resolve().parent

#: The dtypes the kernels are built for: name -> (C type, HT_DOUBLE value).
DTYPES: dict[str, tuple[str, int]] = {"float32": ("float", 0), "float64": ("double", 1)}

# A parameter's type is "real" (the kernel's floating type) or a fixed integer type.
_FIXED_TYPES = {"int32": "int", "int64": "long long"}

# The operation is written against these names, defined by real.cuh.
_REAL_HEADER = "real.cuh"


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    kind is "raw" (an array the operation indexes itself), "array" (one element
    per index, bound by reference as CuPy does) or "scalar".
    """

    name: str
    type: str
    kind: str

    def __post_init__(self) -> None:
        if self.type != "real" and self.type not in _FIXED_TYPES:
            raise ValueError(f"parameter {self.name!r}: unknown type {self.type!r}")
        if self.kind not in ("raw", "array", "scalar"):
            raise ValueError(f"parameter {self.name!r}: unknown kind {self.kind!r}")

    def dtype_name(self, dtype: str) -> str:
        """The NumPy/CuPy dtype name of this parameter in a kernel built for dtype."""
        return dtype if self.type == "real" else self.type

    def c_type(self, dtype: str) -> str:
        return DTYPES[dtype][0] if self.type == "real" else _FIXED_TYPES[self.type]


@dataclass(frozen=True)
class KernelSpec:
    """The single declaration of one elementwise kernel.

    The operation sees ``i`` (the flat index), every parameter by name, and the
    macros of real.cuh (``HT_REAL``, ``HT_FN``); it is the same text for every
    dtype. Immutable and hashable, so it can key caches.
    """

    name: str
    headers: tuple[str, ...]
    inputs: tuple[Param, ...]
    outputs: tuple[Param, ...]
    operation: str

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names) or "i" in names:
            raise ValueError(f"kernel {self.name!r}: parameter names must be unique and not 'i'")
        unknown = [h for h in self.headers if not (_HERE / h).is_file()]
        if unknown:
            raise ValueError(f"kernel {self.name!r}: no such header {unknown}")

    @property
    def params(self) -> tuple[Param, ...]:
        return self.inputs + self.outputs

    @property
    def has_arrays(self) -> bool:
        """Whether the loop size follows from an "array" parameter (else it is passed)."""
        return any(p.kind == "array" for p in self.params)

    def kernel_name(self, dtype: str) -> str:
        return f"{self.name}_{dtype}"

    def cupy_params(self, dtype: str) -> tuple[str, str]:
        """The in_params and out_params strings of the CuPy ElementwiseKernel."""

        def declare(params: tuple[Param, ...]) -> str:
            return ", ".join(
                f"{'raw ' if p.kind == 'raw' else ''}{p.dtype_name(dtype)} {p.name}"
                for p in params
            )

        return declare(self.inputs), declare(self.outputs)


@functools.cache
def header_text(name: str) -> str:
    """The text of one of the package's .cuh files."""
    return (_HERE / name).read_text()


def _math(headers: Iterable[str], dtype: str) -> str:
    parts = [f"#undef HT_DOUBLE\n#define HT_DOUBLE {DTYPES[dtype][1]}\n", header_text(_REAL_HEADER)]
    parts += [header_text(h) for h in headers]
    return "\n".join(parts)


def preamble(spec: KernelSpec, dtype: str) -> str:
    """The CuPy preamble of a kernel: its .cuh math, built for dtype."""
    return _math(spec.headers, dtype)


def _wrapper(spec: KernelSpec, dtype: str, *, device: bool) -> str:
    """A kernel function around spec.operation that binds parameters as CuPy does.

    Inputs are const; "array" parameters become references to element i
    (``const T &x = _raw_x[i]``); "raw" ones are plain pointers, which index like
    CuPy's CArray. On the device the loop is CuPy's grid-stride loop.
    """
    args = ["const ptrdiff_t _n"]
    bind = []
    for p in spec.params:
        const = "const " if p in spec.inputs else ""
        ctype = p.c_type(dtype)
        if p.kind == "scalar":
            args.append(f"{const}{ctype} {p.name}")
        elif p.kind == "raw":
            args.append(f"{const}{ctype} *{p.name}")
        else:
            args.append(f"{const}{ctype} *_raw_{p.name}")
            bind.append(f"        {const}{ctype} &{p.name} = _raw_{p.name}[i];")
    if device:
        head = f'extern "C" __global__ void {spec.kernel_name(dtype)}'
        loop = (
            "for (ptrdiff_t i = static_cast<ptrdiff_t>(blockIdx.x) * blockDim.x + threadIdx.x;"
            " i < _n; i += static_cast<ptrdiff_t>(blockDim.x) * gridDim.x)"
        )
    else:
        head = f'extern "C" void {spec.kernel_name(dtype)}'
        loop = "for (ptrdiff_t i = 0; i < _n; ++i)"
    operation = textwrap.indent(spec.operation.strip() + ";", " " * 8)
    body = "\n".join([*bind, operation])
    return f"{head}({', '.join(args)})\n{{\n    {loop} {{\n{body}\n    }}\n}}\n"


def _translation_unit(specs: Iterable[KernelSpec], *, device: bool) -> str:
    specs = list(specs)
    headers = list(dict.fromkeys(h for spec in specs for h in spec.headers))
    parts = []
    for dtype in DTYPES:
        parts.append(_math(headers, dtype))
        parts += [_wrapper(spec, dtype, device=device) for spec in specs]
    return "\n".join(parts)


def cuda_translation_unit(specs: Iterable[KernelSpec]) -> str:
    """The complete CUDA source of every kernel in specs, for every dtype, for nvcc."""
    return "/* generated by kernels._source */\n" + _translation_unit(specs, device=True)


_HOST_PRELUDE = """/* generated by kernels._source: the kernels as host functions */
#include <math.h>
#include <stddef.h>
#define __device__
#define __forceinline__ static inline
"""


def host_translation_unit(specs: Iterable[KernelSpec]) -> str:
    """The same kernels as plain C++ functions (``extern "C"``, first argument the size).

    Built with gcc into a shared library, it runs the exact operations of the
    GPU kernels on host memory, which is how the kernel path is tested without
    a GPU.
    """
    return _HOST_PRELUDE + _translation_unit(specs, device=False)
