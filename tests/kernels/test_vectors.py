"""The optimizers' kernels read and write their tensors in 16-byte vectors where every tensor of
a launch starts aligned for it, element by element otherwise: bitwise the same update.

Run through the host build (``kernel_path_on_cpu``): the operation gcc compiles is the one
NVRTC compiles for the GPU (tests/kernels/test_cupy_generated.py), vector branch included.
CPU tensors of their own are 16-byte aligned; views one element into a buffer are not.
"""

from __future__ import annotations

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _multi_tensor
from hoptune.kernels._multi_tensor import aligned_width, placed_table, vector_width

SIZES = [1, 3, 4, 5, 17, 64, 1001, 0, 2]

OPTIMIZERS = {
    "adamw": lambda ps: kernels.FusedAdamW(ps, lr=1e-2, weight_decay=1e-2),
    "adamw-amsgrad-maximize": lambda ps: kernels.FusedAdamW(ps, lr=1e-2, amsgrad=True,
                                                            maximize=True),
    "sgd": lambda ps: kernels.FusedSGD(ps, lr=1e-2),
    "sgd-nesterov": lambda ps: kernels.FusedSGD(ps, lr=1e-2, momentum=0.9, nesterov=True,
                                                weight_decay=1e-3),
}


@pytest.fixture
def vectors(kernel_path_on_cpu, monkeypatch) -> list[int]:  # noqa: ANN001
    """The ``vector`` argument of every launch of the test, through the host build."""
    seen: list[int] = []
    real = kernel_path_on_cpu.launch

    def launch(spec, dtype_name, device, args, size):  # noqa: ANN001, ANN202
        seen.append(args["vector"])
        return real(spec, dtype_name, device, args, size)

    monkeypatch.setattr(kernels._cupy, "launch", launch)
    return seen


def _params(dtype: torch.dtype, aligned: bool) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(4)
    out = []
    for n in SIZES:
        values = torch.randn(n, generator=g, dtype=dtype)
        if aligned:
            out.append(torch.nn.Parameter(values.clone()))
        else:
            buffer = torch.empty(n + 1, dtype=dtype)
            buffer[1:] = values
            out.append(torch.nn.Parameter(buffer[1:]))  # one element in: not 16-byte aligned
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("planned", [True, False], ids=["planned", "unplanned"])
def test_a_vector_launch_updates_bitwise_as_an_element_launch(
        vectors, name: str, dtype: torch.dtype, planned: bool) -> None:
    runs = {}
    for aligned in (True, False):
        params = _params(dtype, aligned)
        assert all(p.data_ptr() % 16 == 0 for p in params if p.numel()) is aligned
        optimizer = OPTIMIZERS[name](params)
        optimizer.planned = planned
        vectors.clear()
        for step in range(4):
            g = torch.Generator().manual_seed(50 + step)
            for p in params:
                p.grad = torch.randn(p.shape, generator=g, dtype=dtype)
            optimizer.step()
        assert set(vectors) == {vector_width(dtype) if aligned else 1}, vectors
        runs[aligned] = (params, optimizer)
    (pa, a), (pb, b) = runs[True], runs[False]
    for x, y in zip(pa, pb, strict=True):
        assert torch.equal(x, y)
        assert a.state[x].keys() == b.state[y].keys()
        for key in a.state[x]:
            assert torch.equal(a.state[x][key], b.state[y][key]), key
    changed = [not torch.equal(x, y) for x, y in zip(pa, _params(dtype, True), strict=True)]
    assert changed == [n > 0 for n in SIZES]  # every element was updated, tails too


def test_a_table_in_vectors_gives_each_tensor_its_vectors_from_a_chunk_boundary() -> None:
    sizes = (5, 64, 1)
    table = placed_table(("values",), (16, 32, 48), sizes, torch.device("cpu"), 4)
    assert table.vector == 4 and table.chunk_shift == _multi_tensor.MIN_CHUNK_SHIFT
    # 2, 16 and 1 vectors of 4: one chunk of 32 indices each
    assert table.starts.tolist() == [0, 32, 64] and table.size == 96
    assert table.sizes.tolist() == list(sizes)  # in elements: the last vector's tail
    assert table.chunks.tolist() == [0, 1, 2]
    elements = placed_table(("values",), (16, 32, 48), sizes, torch.device("cpu"))
    assert elements.vector == 1 and elements.starts.tolist() == [0, 32, 96]


def test_a_vector_is_read_only_where_every_pointer_is_aligned_for_it() -> None:
    assert vector_width(torch.float32) == 4 and vector_width(torch.float64) == 2
    assert vector_width(torch.complex64) == 4  # viewed as its float32 parts
    assert aligned_width((0, 16, 4096), 4) == 4  # 0: a role without a tensor
    assert aligned_width((16, 20), 4) == 1


@pytest.mark.parametrize("planned", [True, False], ids=["planned", "unplanned"])
def test_unaligned_gradients_alone_make_a_planned_step_read_elements(
        vectors, planned: bool) -> None:
    """The plan keeps its parameters' and state's alignment; a step's gradients, new each
    step, are checked at each step."""
    runs = []
    for offset in (0, 1, 0):  # aligned, then views one element in, then aligned again
        params = _params(torch.float32, aligned=True)
        optimizer = kernels.FusedAdamW(params, lr=1e-2)
        optimizer.planned = planned
        for step in range(3):
            g = torch.Generator().manual_seed(70 + step)
            for p in params:
                buffer = torch.empty(p.numel() + offset)
                buffer[offset:] = torch.randn(p.numel(), generator=g)
                p.grad = buffer[offset:]
            optimizer.step()
        runs.append(params)
    assert vectors == [4] * 3 + [1] * 3 + [4] * 3
    for a, b in zip(runs[0], runs[1], strict=True):
        assert torch.equal(a, b)
