"""Pointer tables that let one kernel launch update many tensors in place.

A multi-tensor kernel (see multi_tensor.cuh) receives, for each role (params,
grads, exp_avgs, ...), the data pointers of that role's tensors, plus the
offsets of the tensors in one flat index space. The tensors stay where they
are: nothing is gathered into a flat buffer and scattered back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = ["PointerTable", "device_table", "pointer_table"]


@dataclass(frozen=True)
class PointerTable:
    """Per-role pointer rows and the offsets row, on the tensors' device."""

    rows: dict[str, torch.Tensor]
    offsets: torch.Tensor
    n_tensors: int
    size: int


def pointer_table(
    roles: Mapping[str, Sequence[torch.Tensor | None]], device: torch.device
) -> PointerTable:
    """The table for roles, each a list with one entry per tensor (None: no tensor).

    Every tensor must be contiguous, on device, and as large as the first
    role's tensor in the same position. Empty tensors are left out.
    """
    columns = list(roles.values())
    first = columns[0]
    keep = [j for j, t in enumerate(first) if t is not None and t.numel() > 0]
    offsets = [0]
    for j in keep:
        offsets.append(offsets[-1] + first[j].numel())
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
        values.append(0)
    values += offsets
    table = device_table(tuple(values), device).view(len(columns) + 1, len(keep) + 1)
    rows = {name: table[r] for r, name in enumerate(roles)}
    return PointerTable(rows=rows, offsets=table[-1], n_tensors=len(keep), size=offsets[-1])


@functools.lru_cache(maxsize=64)
def device_table(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """values as an int64 tensor on device; cached, since a table holds only addresses.

    On CUDA the copy goes through pinned memory without blocking the host, so
    an optimizer step never waits for the GPU.
    """
    host = torch.tensor(values, dtype=torch.int64)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
