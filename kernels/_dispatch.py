"""Which path runs a kernel, and why: the CuPy kernel or the torch reference.

The kernel path needs CUDA tensors of a dtype the kernels are built for and a
CuPy that sees a device; everything else runs the torch reference of the same
formulas. Each distinct choice is logged once per process on the "kernels"
logger, with its reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from kernels import _cupy
from kernels._source import DTYPES, KernelSpec

__all__ = [
    "KERNEL",
    "REFERENCE",
    "PathChoice",
    "Slot",
    "choose_path",
    "dtype_name",
    "launch",
    "log_once",
    "split_by_path",
]

logger = logging.getLogger("kernels")

KERNEL: Literal["kernel"] = "kernel"
REFERENCE: Literal["reference"] = "reference"

_logged: set[tuple[str, str, str, str, str]] = set()


@dataclass(frozen=True)
class PathChoice:
    """The path chosen for tensors of one device and dtype, and the reason."""

    path: Literal["kernel", "reference"]
    reason: str


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def choose_path(device: torch.device, dtype: torch.dtype) -> PathChoice:
    """The path for tensors on device with dtype; probes CuPy only for CUDA tensors."""
    if device.type != "cuda":
        return PathChoice(
            REFERENCE, f"the tensors are on {device.type}; the CuPy kernels run on CUDA devices"
        )
    if dtype_name(dtype) not in DTYPES:
        return PathChoice(
            REFERENCE,
            f"no kernel is built for {dtype_name(dtype)} (only {', '.join(DTYPES)})",
        )
    reason = _cupy.unavailable_reason()
    if reason is not None:
        return PathChoice(REFERENCE, reason)
    return PathChoice(KERNEL, f"CuPy kernel on {device}")


def log_once(owner: str, device: torch.device, dtype: torch.dtype, choice: PathChoice) -> None:
    """Log choice for (owner, device, dtype) unless this process already has."""
    key = (owner, str(device), dtype_name(dtype), choice.path, choice.reason)
    if key in _logged:
        return
    _logged.add(key)
    what = "the CuPy kernel" if choice.path == KERNEL else "the torch reference"
    logger.info(
        "%s on %s %s runs %s: %s", owner, device, dtype_name(dtype), what, choice.reason
    )


def launch(
    spec: KernelSpec,
    dtype: torch.dtype,
    device: torch.device,
    args: Mapping[str, Any],
    size: int,
) -> None:
    """Run spec with args (one per parameter, by name) on the kernel path."""
    names = [p.name for p in spec.params]
    if sorted(args) != sorted(names):
        raise TypeError(f"{spec.name}: expected arguments {names}, got {sorted(args)}")
    _cupy.launch(spec, dtype_name(dtype), device, args, size)


Slot = tuple[torch.Tensor | None, ...]


def split_by_path(
    owner: str, device: torch.device, dtype: torch.dtype, slots: list[Slot]
) -> tuple[list[Slot], list[Slot]]:
    """Split slots (the tensors of one element-wise update each) into kernel and reference.

    All slots share device and dtype. On the kernel path a slot still goes to
    the reference if one of its tensors is not contiguous or has another dtype
    or device, since the kernels address memory directly.
    """
    choice = choose_path(device, dtype)
    log_once(owner, device, dtype, choice)
    if choice.path == REFERENCE:
        return [], slots

    def direct(slot: Slot) -> bool:
        return all(
            t is None or (t.is_contiguous() and t.dtype == dtype and t.device == device)
            for t in slot
        )

    kernel = [s for s in slots if direct(s)]
    reference = [s for s in slots if not direct(s)]
    if reference:
        log_once(
            owner,
            device,
            dtype,
            PathChoice(
                REFERENCE,
                "for the tensors that are not contiguous, or whose gradient or state has "
                "another dtype or device",
            ),
        )
    return kernel, reference
