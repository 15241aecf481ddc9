"""The CuPy side, as far as it goes without a device: the kernels' declarations build."""

from __future__ import annotations

import pytest

from hoptune.kernels import _cupy, _source, _specs


@pytest.mark.parametrize("dtype", list(_source.DTYPES))
@pytest.mark.parametrize("spec", _specs.ALL, ids=lambda s: s.name)
def test_every_declaration_builds_an_elementwise_kernel(spec, dtype) -> None:
    pytest.importorskip("cupy", reason="CuPy is not installed here")
    kernel = _cupy.elementwise_kernel(spec, dtype, 0)
    # CuPy parsed the parameter lists: names, dtypes, raw-ness and count all as declared.
    assert kernel.name == spec.kernel_name(dtype)
    assert [p.name for p in kernel.in_params] == [p.name for p in spec.inputs]
    assert [p.name for p in kernel.out_params] == [p.name for p in spec.outputs]
    assert [p.raw for p in kernel.params[: len(spec.params)]] == [
        p.kind == "raw" for p in spec.params
    ]
    assert [str(p.dtype) for p in kernel.params[: len(spec.params)]] == [
        p.dtype_name(dtype) for p in spec.params
    ]
    assert kernel.preamble == _source.preamble(spec, dtype)
    assert _cupy.elementwise_kernel(spec, dtype, 0) is kernel  # built once, then cached
