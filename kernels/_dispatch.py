"""Which path runs a kernel, and why: the CuPy kernel or the torch reference.

The kernel path needs CUDA tensors of a dtype the kernels are built for, a
CuPy that sees a device, and a kernel trusted on that device: its self-test
there agreed with the torch reference (``_trust``), unless the kernels
setting says otherwise. Everything else runs the torch reference of the same
formulas. Each distinct choice is logged once per process on the "kernels"
logger, with its reason, and kept for the worker's info (``paths_taken``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch

from hoptune.kernels import _cupy, _launches, _trust
from hoptune.kernels._launches import dtype_name
from hoptune.kernels._source import DTYPES, KernelSpec

__all__ = [
    "host_work_only",
    "KERNEL",
    "REFERENCE",
    "TORCH",
    "PathChoice",
    "Slot",
    "choose_path",
    "dtype_name",
    "kernel_path",
    "launch",
    "log_once",
    "paths_taken",
    "split_by_path",
]

logger = logging.getLogger("kernels")

KERNEL: Literal["kernel"] = "kernel"
REFERENCE: Literal["reference"] = "reference"
#: An optimizer replaced by torch.optim's own fused one (see ``make_optimizer``).
TORCH: Literal["torch"] = "torch"
_WHAT = {KERNEL: "the CuPy kernel", REFERENCE: "the torch reference",
         TORCH: "torch.optim's fused implementation"}

_logged: set[tuple[str, str, str, str, str]] = set()
# The latest choice per (owner, device, dtype), for the worker's info.
_taken: dict[tuple[str, str, str], tuple[str, str]] = {}


@dataclass(frozen=True)
class PathChoice:
    """The path chosen for tensors of one device and dtype, and the reason."""

    path: Literal["kernel", "reference", "torch"]
    reason: str


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


def kernel_path(spec: KernelSpec, device: torch.device, dtype: torch.dtype) -> PathChoice:
    """The path of spec on device for dtype: ``choose_path``, then, on a CUDA device, trust.

    On a CUDA device the kernel path is taken only where the kernels setting
    allows it and spec's self-test there passed (``_trust.trust``); with the
    setting ``cupy``, a kernel that cannot run there is an error instead.
    """
    choice = choose_path(device, dtype)
    if device.type != "cuda":
        return choice
    if choice.path == REFERENCE:
        if dtype_name(dtype) in DTYPES:
            _trust.require_kernels(spec, device, choice.reason)
        return choice
    trusted = _trust.trust(spec, device)
    if trusted.kernel:
        return PathChoice(KERNEL, f"{choice.reason}, {trusted.reason}")
    return PathChoice(REFERENCE, trusted.reason)


def log_once(owner: str, device: torch.device, dtype: torch.dtype, choice: PathChoice) -> None:
    """Log choice for (owner, device, dtype) unless this process already has."""
    key = (owner, str(device), dtype_name(dtype), choice.path, choice.reason)
    if key in _logged:
        return
    _logged.add(key)
    _taken[key[:3]] = (choice.path, choice.reason)
    what = _WHAT[choice.path]
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
    _launches.run(spec, dtype, device, args, size)


def paths_taken() -> list[dict[str, str]]:
    """Every path this process chose so far: owner, device, dtype, path and reason."""
    return [{"owner": owner, "device": device, "dtype": dtype, "path": path, "reason": reason}
            for (owner, device, dtype), (path, reason) in sorted(_taken.items())]


Slot = tuple[torch.Tensor | None, ...]


def split_by_path(
    owner: str, device: torch.device, dtype: torch.dtype, slots: list[Slot], spec: KernelSpec
) -> tuple[list[Slot], list[Slot]]:
    """Split slots (the tensors of one element-wise update each) into kernel and reference.

    All slots share device and dtype; spec is the kernel they would run. On the
    kernel path a slot still goes to the reference if one of its tensors is not
    contiguous or has another dtype or device, since the kernels address memory
    directly.
    """
    choice = kernel_path(spec, device, dtype)
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


@contextmanager
def host_work_only() -> Iterator[None]:
    """While it lasts, every tensor takes the kernel path and a launch does nothing: what a
    fused step costs on the host around its launch, measurable on any machine
    (``bench/host_step.py``). Nothing is updated, so never while training."""
    global choose_path
    chosen, launch = choose_path, _cupy.launch

    def kernel(device: torch.device, dtype: torch.dtype) -> PathChoice:
        return PathChoice(KERNEL, "host work only (kernels.host_work_only)")

    choose_path, _cupy.launch = kernel, lambda spec, dtype, device, args, size: None
    try:
        yield
    finally:
        choose_path, _cupy.launch = chosen, launch
