"""Pointer tables that let one kernel launch update many tensors in place.

A multi-tensor kernel (see multi_tensor.cuh) receives, for each role (params,
grads, exp_avgs, ...), the data pointers of that role's tensors, plus where
each tensor lies in one flat index space and the chunk table that maps an
index to its tensor in one load. The tensors stay where they are: nothing is
gathered into a flat buffer and scattered back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from hoptune.kernels._cupy import keep_for_launches

__all__ = ["MAX_CHUNKS", "MIN_CHUNK_SHIFT", "VECTOR_BYTES", "PointerTable", "aligned_width",
           "chunk_shift", "device_table", "placed_table", "pointer_table", "to_device",
           "step_rows", "to_device_reals", "vector_width"]

#: The smallest chunk is a warp's 32 indices, so a warp never reads two table entries.
MIN_CHUNK_SHIFT = 5
#: At most this many chunks (512 KiB of table, which stays in a GPU's L2 cache).
MAX_CHUNKS = 1 << 16


@dataclass(frozen=True)
class PointerTable:
    """Per-role pointer rows, each tensor's start and size, and the chunk table, on the
    tensors' device; ``size`` is the launch's length, padding included."""

    rows: dict[str, torch.Tensor]
    starts: torch.Tensor
    sizes: torch.Tensor
    chunks: torch.Tensor
    chunk_shift: int
    n_tensors: int
    size: int
    #: elements per index of the launch: HT_VEC (``vector_width``) where every tensor starts
    #: 16-byte aligned and the kernel reads vectors, else 1
    vector: int = 1

    def args(self) -> dict[str, torch.Tensor | int]:
        """The table as a multi-tensor kernel's arguments, by parameter name (a kernel that
        reads vectors takes ``vector`` besides)."""
        return {**self.rows, "starts": self.starts, "sizes": self.sizes, "chunks": self.chunks,
                "chunk_shift": self.chunk_shift}


#: Bytes of one vector a kernel loads or stores at once (HT_VEC numbers: real.cuh)
VECTOR_BYTES = 16


def vector_width(dtype: torch.dtype) -> int:
    """HT_VEC for ``dtype``'s kernels: the numbers in 16 bytes (complex tensors are viewed as
    their real and imaginary parts)."""
    return VECTOR_BYTES // (dtype.to_real() if dtype.is_complex else dtype).itemsize


def aligned_width(pointers: Sequence[int], width: int) -> int:
    """``width`` where every non-zero pointer is 16-byte aligned (a vector load needs it),
    else 1."""
    return width if all(p % VECTOR_BYTES == 0 for p in pointers) else 1


def chunk_shift(sizes: Sequence[int]) -> int:
    """log2 of the chunk for tensors of sizes: the smallest from a warp up whose padded
    layout needs at most MAX_CHUNKS chunks (a small chunk pads each tensor less)."""
    shift = MIN_CHUNK_SHIFT
    while sum(-(-n >> shift) for n in sizes) > MAX_CHUNKS:
        shift += 1
    return shift


def pointer_table(
    roles: Mapping[str, Sequence[torch.Tensor | None]], device: torch.device, width: int = 1
) -> PointerTable:
    """The table for roles, each a list with one entry per tensor (None: no tensor).

    Every tensor must be contiguous, on device, and as large as the first
    role's tensor in the same position. Empty tensors are left out. A step reads
    only its tensors' addresses and sizes: the layout, the chunk table and the
    table's copy on the device are built once per set of tensors and reused while
    they stay where they are. ``width``: the vector the kernel reads (``vector_width``),
    used where every tensor starts aligned for it (``aligned_width``); 1, elements.
    """
    columns = list(roles.values())
    first = columns[0]
    keep = [j for j, t in enumerate(first) if t is not None and t.numel() > 0]
    sizes = tuple(first[j].numel() for j in keep)
    values: list[int] = []
    for name, column in roles.items():
        if len(column) != len(first):
            raise ValueError(f"role {name!r} has {len(column)} tensors, expected {len(first)}")
        for j in keep:
            t = column[j]
            if t is None:
                values.append(0)
                continue
            if t.device != device or not t.is_contiguous() or t.numel() != first[j].numel():
                raise ValueError(
                    f"role {name!r}, tensor {j}: needs a contiguous tensor of "
                    f"{first[j].numel()} elements on {device}"
                )
            values.append(t.data_ptr())
    return placed_table(tuple(roles), tuple(values), sizes, device,
                        aligned_width(values, width))


@functools.lru_cache(maxsize=64)
def placed_table(roles: tuple[str, ...], pointers: tuple[int, ...], sizes: tuple[int, ...],
                 device: torch.device, width: int = 1) -> PointerTable:
    """The table of ``pointers`` (a row of ``len(sizes)`` per role, in ``roles``' order; 0 for
    no tensor) for non-empty contiguous tensors of ``sizes`` on ``device``, laid out in
    chunks: ``pointer_table`` once it checked the tensors, or a planned step
    (``kernels._plan``) that checked them when it was planned. With ``width`` > 1 (every
    pointer aligned for it: ``aligned_width``) an index of the launch is a vector of
    ``width`` elements: tensor t takes ceil(sizes[t] / width) indices from starts[t];
    sizes stay in elements."""
    units = [-(-n // width) for n in sizes]  # the launch's indices each tensor takes
    shift = chunk_shift(units)
    starts, chunks = [], []
    for t, m in enumerate(units):
        starts.append(len(chunks) << shift)
        chunks += [t] * -(-m >> shift)
    table = to_device((*pointers, *starts, *sizes, *chunks), device)  # cached with the table
    n = len(sizes)
    rows = {name: table[r * n:(r + 1) * n] for r, name in enumerate(roles)}
    at = len(roles) * n
    starts_, sizes_, chunks_ = table[at:at + n], table[at + n:at + 2 * n], table[at + 2 * n:]
    for view in (*rows.values(), starts_, sizes_, chunks_):
        keep_for_launches(view)  # launched on, unchanged, at every step it serves
    return PointerTable(rows=rows, starts=starts_, sizes=sizes_, chunks=chunks_,
                        chunk_shift=shift, n_tensors=n, size=len(chunks) << shift,
                        vector=width)


@functools.lru_cache(maxsize=64)
def device_table(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``to_device``, cached: a table of addresses and sizes is the same while they are."""
    return keep_for_launches(to_device(values, device))


def to_device(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """values as an int64 tensor on device.

    On CUDA the copy goes through pinned memory without blocking the host, so
    an optimizer step never waits for the GPU.
    """
    host = torch.tensor(values, dtype=torch.int64)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def to_device_reals(rows: Sequence[Sequence[float]], device: torch.device, dtype: torch.dtype
                    ) -> torch.Tensor:
    """rows of host floats as one flat ``dtype`` tensor on device, row after row: each number
    rounded once from its double, as a kernel's scalar argument is. On CUDA the copy goes
    through pinned memory without blocking the host, as ``to_device``'s."""
    host = torch.tensor(rows, dtype=torch.float64).to(dtype).reshape(-1)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def step_rows(rows: Sequence[Sequence[float]], device: torch.device, dtype: torch.dtype
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """A table of one row of scalars per step, as ``dtype`` on ``device`` (each number
    rounded once from the host's double, as a kernel's scalar argument is), and the counter
    (int64, 0) of the row the next step reads; both kept for launches."""
    table = to_device_reals(rows, device, dtype)
    row = torch.zeros(1, dtype=torch.int64, device=device)
    return keep_for_launches(table), keep_for_launches(row)
