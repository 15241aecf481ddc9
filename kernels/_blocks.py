"""Cache blocking for the torch reference on the CPU.

The reference spends a dozen elementwise passes on one update. Run over a
whole large tensor, each pass streams it through memory again; run block by
block, the passes over one block stay in the CPU cache, so memory sees each
number about once, as it does with the fused kernel. The results are the same
as for the whole tensors: every operation is elementwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

__all__ = ["BLOCK", "in_blocks"]

#: Elements per block: with a dozen float32 arrays and temporaries, about 3 MB.
BLOCK = 1 << 16


def in_blocks(
    tensors: Sequence[torch.Tensor | None],
) -> Iterator[tuple[torch.Tensor | None, ...]]:
    """The tensors of one elementwise update, as aligned blocks of at most BLOCK elements.

    Tensors off the CPU, small ones, and ones that are not all contiguous and of
    one size come back whole.
    """
    first = tensors[0]
    assert first is not None
    n = first.numel()
    alike = all(t is None or (t.is_contiguous() and t.numel() == n) for t in tensors)
    if first.device.type != "cpu" or n <= BLOCK or not alike:
        yield tuple(tensors)
        return
    flat = [None if t is None else t.view(-1) for t in tensors]
    for start in range(0, n, BLOCK):
        yield tuple(None if t is None else t[start : start + BLOCK] for t in flat)
