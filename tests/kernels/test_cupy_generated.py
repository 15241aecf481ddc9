"""The CUDA source CuPy generates for each kernel compiles with NVRTC for sm_80 and sm_90.

CuPy builds an ``ElementwiseKernel``'s source only at its first launch, so
constructing the kernels (test_cupy.py) compiles nothing, and the nvcc test
compiles hoptune's own stand-in for CuPy's wrapper. Here, without a device,
CuPy's own code generator (``cupy._core._kernel._get_elementwise_kernel_code``)
writes the source from the argument descriptions that a launch through
``_cupy.launch`` produces (every array one-dimensional and contiguous, the
scalars as declared, one ``CIndexer``), CuPy's headers are put in front of it
and its options assembled as ``cupy._core.core.compile_with_cache`` does, and
NVRTC compiles it to a cubin the way ``cupy.cuda.compiler`` does (its public
``compile_using_nvrtc`` asks the driver for the device, so its program class is
used directly). The ``gpu`` test in test_gpu_launch.py checks that this source
is the one CuPy compiles on a real launch.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from hoptune.kernels import _cupy, _source, _specs

# cupy/_core/_kernel.pxd: enum _ArgKind
ARG_KIND_NDARRAY, ARG_KIND_INDEXER, ARG_KIND_SCALAR = 1, 2, 3
ARCHS = ["80", "90"]


def _nvrtc_unavailable() -> str | None:
    try:
        import cupy  # noqa: F401
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # ImportError, or CuPy's error for a missing libnvrtc
        return f"NVRTC is not available here ({type(exc).__name__}: {exc})"
    return None


UNAVAILABLE = _nvrtc_unavailable()
needs_nvrtc = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")


def launch_arginfos(spec: _source.KernelSpec, dtype: str, index_32_bits: bool = True
                    ) -> tuple[Any, ...]:
    """CuPy's descriptions of the arguments ``_cupy.launch`` passes, and of the indexer."""
    import cupy
    from cupy._core import _carray, _kernel, _scalar

    infos = []
    for p in spec.params:
        dt = np.dtype(p.dtype_name(dtype))
        if p.kind == "scalar":
            infos.append(_kernel._ArgInfo(ARG_KIND_SCALAR, _scalar.CScalar, dt, 0, True, True))
        else:  # from_dlpack of a contiguous tensor; "array" ones are reduced to one dimension
            infos.append(_kernel._ArgInfo(ARG_KIND_NDARRAY, cupy.ndarray, dt, 1, True,
                                          index_32_bits))
    infos.append(_kernel._ArgInfo(ARG_KIND_INDEXER, _carray.Indexer, None, 1, True,
                                  index_32_bits))
    return tuple(infos)


def generated_code(spec: _source.KernelSpec, dtype: str, index_32_bits: bool = True) -> str:
    """The kernel source CuPy generates at the first launch of spec's kernel for dtype."""
    from cupy._core import _kernel

    kernel = _cupy.elementwise_kernel(spec, dtype, 0)
    in_types = tuple(None if p.kind == "scalar" else np.dtype(p.dtype_name(dtype))
                     for p in spec.inputs)
    out_types = tuple(np.dtype(p.dtype_name(dtype)) for p in spec.outputs)
    _, _, type_map = kernel._decide_params_type(in_types, out_types)
    return _kernel._get_elementwise_kernel_code(
        launch_arginfos(spec, dtype, index_32_bits), type_map, kernel.params, kernel.operation,
        kernel.name, kernel.preamble, **kernel.kwargs)


def nvrtc_input(spec: _source.KernelSpec, dtype: str, arch: str, index_32_bits: bool = True
                ) -> tuple[str, tuple[str, ...]]:
    """The source and options NVRTC receives from CuPy for this kernel on ``sm_{arch}``."""
    from cupy._core import core

    kernel = _cupy.elementwise_kernel(spec, dtype, 0)
    headers = "".join(f"#include <{h}>\n" for h in core._cupy_header_list)
    options = core.assemble_cupy_compiler_options(kernel.kwargs["options"])
    options += ("-ftz=true", f"-arch=sm_{arch}", "--device-as-default-execution-space")
    return headers + generated_code(spec, dtype, index_32_bits), options


def _cases() -> list[Any]:
    cases = []
    for spec in _specs.ALL:
        for dtype in _source.DTYPES:
            for arch in ARCHS:
                cases.append(pytest.param(spec, dtype, arch, True,
                                          id=f"{spec.name}-{dtype}-sm_{arch}"))
            # arrays of 2**31 elements or more get 64-bit indexing: another kernel
            cases.append(pytest.param(spec, dtype, "90", False,
                                      id=f"{spec.name}-{dtype}-sm_90-index64"))
    return cases


@pytest.mark.parametrize("dtype", list(_source.DTYPES))
@pytest.mark.parametrize("spec", _specs.ALL, ids=lambda s: s.name)
def test_the_generated_source_is_the_declared_kernel(spec: _source.KernelSpec,
                                                     dtype: str) -> None:
    pytest.importorskip("cupy", reason="CuPy is not installed here")
    code = generated_code(spec, dtype)
    assert _source.preamble(spec, dtype) in code
    assert f'extern "C" __global__ void {spec.kernel_name(dtype)}(' in code
    for line in spec.operation.strip().splitlines():
        assert line.strip() in code
    for p in spec.params:
        c_type = p.c_type(dtype)
        if p.kind == "scalar":
            assert f"const {c_type} {p.name}," in code
        else:
            name = p.name if p.kind == "raw" else f"_raw_{p.name}"
            assert f"CArray<{c_type}, 1, 1, 1> {name}," in code


@needs_nvrtc
@pytest.mark.parametrize(("spec", "dtype", "arch", "index_32_bits"), _cases())
def test_nvrtc_compiles_the_source_cupy_generates(spec: _source.KernelSpec, dtype: str,
                                                  arch: str, index_32_bits: bool) -> None:
    from cupy.cuda import compiler

    source, options = nvrtc_input(spec, dtype, arch, index_32_bits)
    log = io.StringIO()
    program = compiler._NVRTCProgram(source, f"{spec.kernel_name(dtype)}.cu", method="cubin")
    cubin, _ = program.compile(options, log)
    assert cubin.startswith(b"\x7fELF")
    assert spec.kernel_name(dtype).encode() in cubin
    assert "warning" not in log.getvalue().lower(), log.getvalue()


def _launch_every_kernel(dtype: str) -> None:
    """One launch of each kernel for dtype, through the public functions, on CUDA tensors."""
    import torch

    from hoptune import kernels

    torch_dtype = getattr(torch, dtype)
    for make in (lambda p: kernels.FusedAdamW(p), lambda p: kernels.FusedSGD(p, lr=0.1,
                                                                             momentum=0.9)):
        param = torch.nn.Parameter(torch.ones(8, dtype=torch_dtype, device="cuda"))
        param.grad = torch.ones_like(param)
        optimizer = make([param])
        optimizer.step()
        steps = optimizer.device_steps(1)  # AdamW's next step read from the device: _rows
        if steps is not None:
            steps.step()
            steps.counted()
    for make in (
        lambda p: kernels.CohortAdamW(p, lr=[1e-3, 1e-2], betas=[(0.9, 0.999)] * 2,
                                      eps=[1e-8] * 2, weight_decay=[0.0, 0.1]),
        lambda p: kernels.CohortSGD(p, lr=[0.1, 0.2], momentum=[0.9, 0.0], dampening=[0, 0],
                                    weight_decay=[0.0, 0.1]),
    ):
        stacked = torch.nn.Parameter(torch.ones(2, 4, dtype=torch_dtype, device="cuda"))
        stacked.grad = torch.ones_like(stacked)
        make([stacked]).step()
    kernels.clip_grad_norm_([param], 0.1)
    x = torch.linspace(-3, 3, 16, dtype=torch_dtype, device="cuda", requires_grad=True)
    kernels.scaled_sigmoid(x, 5.0).sum().backward()
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(_source.DTYPES))
def test_a_real_launch_compiles_exactly_this_source(dtype: str) -> None:
    """On a device: the source CuPy compiled at the launch is the one the NVRTC test builds."""
    import torch

    reason = None if torch.cuda.is_available() else "no CUDA device"
    reason = reason or _cupy.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    _launch_every_kernel(dtype)
    for spec in _specs.ALL:
        kernel = _cupy.elementwise_kernel(spec, dtype, torch.cuda.current_device())
        assert list(kernel.cached_codes.values()) == [generated_code(spec, dtype)], spec.name
