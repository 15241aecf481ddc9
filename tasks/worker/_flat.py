"""A checkpoint's tensors and plain values as one flat buffer: a header, then raw tensor bytes.

A hop writes a checkpoint and the next hop reads it, on every hop: this layout
costs one copy of each tensor to write and none to read. Reading a buffer gives
tensors that are views of it (``decode``), where ``torch.load`` copies every
tensor out of its archive into fresh memory, whose first touch costs as much
again as the copy.

Layout: ``MAGIC``, the header's length (8 bytes, little-endian), the header
(JSON: the value's tree, each tensor's dtype, shape and offset from the end of
the header), then each tensor's bytes at an offset aligned to 64 bytes; padding is zero, so equal
values give equal bytes. The tree carries dicts (int and str keys), lists,
tuples, numbers, strings, booleans and None. Anything else (another type, a
sparse or quantized tensor, two tensors over the same memory, which a load
must keep shared) is ``NotFlat``: the caller writes ``torch.save``'s format
instead, which every reader still takes.
"""

from __future__ import annotations

import json
import math
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["MAGIC", "NotFlat", "decode", "encode", "is_flat"]

MAGIC = b"HTFLAT01"
_ALIGN = 64
_LENGTH = struct.Struct("<Q")
_START = len(MAGIC) + _LENGTH.size


class NotFlat(ValueError):
    """The value holds something the flat layout does not carry."""


def is_flat(data: Any) -> bool:
    """Whether the bytes in ``data`` (any buffer) begin as a flat encoding does."""
    return bytes(memoryview(data)[: len(MAGIC)]) == MAGIC


def encode(value: Any, room: int = 0) -> np.ndarray:
    """``value`` laid out flat in a new byte array, with ``room`` bytes left at its end.

    ``NotFlat`` if it holds what the layout does not carry (see the module).
    """
    import torch

    tensors: list[torch.Tensor] = []
    tree = _tree(value, tensors)
    _check_disjoint(tensors)
    offsets, end = [], 0  # from the start of the tensors' bytes, after the header
    for t in tensors:
        offsets.append(end)
        end = _aligned(end + t.nbytes)
    entries = [[str(t.dtype).removeprefix("torch."), list(t.shape), off]
               for t, off in zip(tensors, offsets, strict=True)]
    header = json.dumps({"tree": tree, "tensors": entries}, separators=(",", ":")).encode()
    start = _aligned(_START + len(header))
    buffer = torch.empty(start + end + room, dtype=torch.uint8)
    head = MAGIC + _LENGTH.pack(len(header)) + header
    buffer[: len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
    buffer[len(head):start].zero_()
    for t, off in zip(tensors, offsets, strict=True):
        _view(buffer, start + off, t.dtype, t.shape).copy_(t)
        buffer[start + off + t.nbytes:start + _aligned(off + t.nbytes)].zero_()
    return buffer.numpy()


def decode(data: np.ndarray, length: int, device: torch.device | None = None) -> Any:
    """The value flat-encoded in the first ``length`` bytes of ``data`` (a writable byte
    array), its tensors views of ``data`` (copied to ``device`` if that is not the CPU).
    ``ValueError`` naming what is wrong if those bytes are not a whole flat encoding."""
    import torch

    if length < _START or not is_flat(data):
        raise ValueError("not a flat checkpoint")
    (size,) = _LENGTH.unpack(bytes(data[len(MAGIC):_START]))
    if _START + size > length:
        raise ValueError(f"its header runs past its end ({_START + size} > {length} bytes)")
    header = json.loads(bytes(data[_START:_START + size]))
    start = _aligned(_START + size)
    buffer = torch.from_numpy(data)
    tensors = []
    for name, shape, off in header["tensors"]:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {name!r}")
        nbytes, off = dtype.itemsize * math.prod(int(d) for d in shape), start + off
        if off % _ALIGN or off < start or off + nbytes > length:
            raise ValueError(f"a tensor at {off} of {nbytes} bytes lies outside its "
                             f"{length} bytes")
        t = _view(buffer, off, dtype, shape)
        tensors.append(t if device is None or device.type == "cpu" else t.to(device))
    return _value(header["tree"], tensors)


def _tree(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` as JSON, each tensor replaced by its index in ``tensors`` (appended)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise NotFlat(f"a {value.layout} tensor")
        tensors.append(value.detach())
        return {"t": len(tensors) - 1}
    if isinstance(value, dict):
        if not all(type(k) in (int, str) for k in value):
            raise NotFlat("a dict key that is neither int nor str")
        return {"d": [[k, _tree(v, tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"l" if isinstance(value, list) else "u": [_tree(v, tensors) for v in value]}
    if value is None or type(value) in (bool, int, float, str):
        return value
    raise NotFlat(f"a value of type {type(value).__name__}")


def _value(tree: Any, tensors: list[torch.Tensor]) -> Any:
    """The value ``_tree`` made ``tree`` of."""
    if isinstance(tree, dict):
        ((kind, body),) = tree.items()
        if kind == "t":
            return tensors[body]
        if kind == "d":
            return {k: _value(v, tensors) for k, v in body}
        items = [_value(v, tensors) for v in body]
        return items if kind == "l" else tuple(items)
    return tree


def _check_disjoint(tensors: list[torch.Tensor]) -> None:
    """``NotFlat`` if two tensors overlap in memory: written apart, they would load apart."""
    spans = sorted((str(t.device), t.data_ptr(), t.data_ptr() + _extent(t))
                   for t in tensors if t.numel())
    # sorted by where they begin: two overlap only if two neighbours do
    for (where, _, end), (there, begin, _) in zip(spans, spans[1:], strict=False):
        if where == there and begin < end:
            raise NotFlat("two tensors share memory")


def _extent(t: torch.Tensor) -> int:
    """The bytes from a tensor's first element to past its last (strides and all)."""
    return (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))) * t.itemsize


def _view(buffer: torch.Tensor, offset: int, dtype: torch.dtype, shape: Any) -> torch.Tensor:
    nbytes = dtype.itemsize * math.prod(int(d) for d in shape)
    return buffer[offset:offset + nbytes].view(dtype).view(tuple(shape))


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN
