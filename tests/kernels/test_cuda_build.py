"""The complete CUDA source of every kernel compiles with nvcc for sm_80 and sm_90."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from hoptune.kernels import _cupy, _source, _specs

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def translation_unit(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("cuda") / "kernels.cu"
    path.write_text(_source.cuda_translation_unit(_specs.ALL))
    return path


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_compiles(translation_unit, arch) -> None:
    # One translation unit, every kernel and dtype, built the way CuPy builds them
    # (its NVRTC options), to a cubin so ptxas checks the code too.
    cubin = translation_unit.with_name(f"kernels_{arch}.cubin")
    done = subprocess.run(
        [NVCC, f"-arch={arch}", *_cupy.NVRTC_OPTIONS, "-Werror", "all-warnings", "-cubin",
         "-o", str(cubin), str(translation_unit)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    binary = cubin.read_bytes()
    for spec in _specs.ALL:
        for dtype in _source.DTYPES:
            assert spec.kernel_name(dtype).encode() in binary


def test_the_wrapper_runs_the_declared_operation(translation_unit) -> None:
    source = translation_unit.read_text()
    for spec in _specs.ALL:
        for dtype in _source.DTYPES:
            assert f'extern "C" __global__ void {spec.kernel_name(dtype)}(' in source
        for line in spec.operation.strip().splitlines():
            assert line.strip() in source
