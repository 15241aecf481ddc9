"""A pass's steps: eager, or with forward and backward captured once in a CUDA graph.

On a GPU a small model's step is bound by the host: an H200 ran the demo
rating model's pass in 228 ms of which its kernels took 4.5, each step's
forward and backward launching some fifty kernels from Python and the
autograd engine. Where ``capture_choice`` allows it, ``run_steps`` trains the
pass's first batch as always (it also warms up what a capture must find
ready: the kernels compiled, cuBLAS's handles, the allocator), then records
the second batch's gather, forward and backward once in a CUDA graph, and
for every later batch of the full size copies the batch's row indices into
the graph's input and replays it: the same kernels on the same addresses, so
the gradients, and the weights the optimizer makes of them, are bit for bit
those of the eager steps. The optimizer's step, gradient clipping and the
loss's sum stay outside the graph (the fused step is one launch, planned
once: ``kernels._plan``). The last, smaller batch runs eagerly.

A capture that fails (a model that synchronises with the host, an operation
CUDA cannot record) costs nothing but the attempt: the step runs eagerly,
the pass goes on eagerly, and the reason is logged once per reason.
``HOPTUNE_CUDA_GRAPHS=off`` turns capture off.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hoptune.core import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = ["GRAPHS_VARIABLE", "CaptureChoice", "capture_choice", "graphs_mode", "run_steps"]

log = logging.getLogger(__name__)

GRAPHS_VARIABLE = "HOPTUNE_CUDA_GRAPHS"
MODES = ("auto", "off")
#: Full batches a pass needs before a capture can repay itself: the first runs eagerly, the
#: capture costs about one eager step, and the rest replay.
MIN_FULL_BATCHES = 4

_logged: set[str] = set()


def graphs_mode(environ: dict[str, str] | None = None) -> str:
    """``HOPTUNE_CUDA_GRAPHS``: ``auto`` (the default: capture where ``capture_choice``
    allows) or ``off``; ``ConfigError`` naming the variable otherwise."""
    env = os.environ if environ is None else environ
    value = env.get(GRAPHS_VARIABLE, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ConfigError(f"{GRAPHS_VARIABLE}: one of {', '.join(MODES)}, "
                          f"got {env[GRAPHS_VARIABLE]!r}")
    return value


@dataclass(frozen=True)
class CaptureChoice:
    """Whether a pass captures its forward and backward, and why."""

    capture: bool
    reason: str


def capture_choice(device: torch.device, rows: int, batch_size: int,
                   mode: str | None = None) -> CaptureChoice:
    """Whether a pass over ``rows`` rows in batches of ``batch_size`` on ``device`` captures."""
    mode = graphs_mode() if mode is None else mode
    if mode == "off":
        return CaptureChoice(False, f"{GRAPHS_VARIABLE}=off")
    if device.type != "cuda":
        return CaptureChoice(False, f"trains on {device.type}: CUDA graphs are a GPU's")
    full = rows // batch_size
    if full < MIN_FULL_BATCHES:
        return CaptureChoice(False, f"{full} full batches of {batch_size}: fewer than "
                                    f"{MIN_FULL_BATCHES}, too few to repay a capture")
    return CaptureChoice(True, f"{full - 1} of {full} full batches replayed from one capture")


class _Graph:
    """One captured gather, forward and backward: its input indices and output losses."""

    def __init__(self, graph: torch.cuda.CUDAGraph, index: torch.Tensor,
                 losses: torch.Tensor) -> None:
        self.graph, self.index, self.losses = graph, index, losses

    def run(self, index: torch.Tensor) -> torch.Tensor:
        self.index.copy_(index)
        self.graph.replay()
        return self.losses


def _capture(index: torch.Tensor, step: Callable[[torch.Tensor], torch.Tensor],
             params: Sequence[torch.Tensor]) -> _Graph | str:
    """``step(index)`` (gather, forward, backward: the detached losses) recorded in a CUDA
    graph on a side stream, or why it could not be. Nothing recorded has run yet."""
    import torch  # here: a command that only checks the setting (graphs_mode) imports no torch

    static = index.clone()
    for p in params:
        p.grad = None  # the backward's gradients are made in the graph's memory, then kept
    graph = torch.cuda.CUDAGraph()
    ambient = torch.cuda.current_stream(index.device)
    side = torch.cuda.Stream(index.device)
    side.wait_stream(ambient)
    try:
        with torch.cuda.stream(side):
            # thread_local: what the capturing thread may not do during a capture is refused,
            # and the worker's other threads (its checkpoint writer) go on unhindered
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                losses = step(static)
            except Exception:
                with contextlib.suppress(Exception):  # the step's error is the one to tell
                    graph.capture_end()
                raise
            graph.capture_end()
    except Exception as exc:  # noqa: BLE001 - any failure means: train eagerly
        for p in params:
            p.grad = None
        torch.cuda.synchronize(index.device)
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    ambient.wait_stream(side)
    return _Graph(graph, static, losses)


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.info(message)


def run_steps(indices: Iterable[torch.Tensor], step: Callable[[torch.Tensor], torch.Tensor],
              params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer,
              totals: torch.Tensor, rows_of: Callable[[torch.Tensor], int], *,
              choice: CaptureChoice, after_backward: Callable[[], None] | None = None) -> int:
    """Train one step per batch of row ``indices``; the samples seen.

    ``step(index)`` gathers the batch, computes its losses, runs the backward
    and returns the losses detached (a scalar, or one per trial of a cohort);
    each step then runs ``after_backward`` (clipping) and the optimizer, and
    adds its losses times its rows (``rows_of(index)``) to ``totals``, on the
    device. Full batches after the first replay a captured ``step`` where
    ``choice`` says so and the capture succeeds.
    """
    graph: _Graph | None = None
    tried = not choice.capture
    full: torch.Size | None = None
    samples = 0
    for index in indices:
        if full is None:
            full = index.shape
        losses = None
        if graph is None and not tried and index.shape == full and samples > 0:
            tried = True
            made = _capture(index, step, params)
            if isinstance(made, str):
                _log_once(f"CUDA graphs: training eagerly, the capture failed ({made})")
            else:
                graph = made
                _log_once("CUDA graphs: each pass's gather, forward and backward captured "
                          "once and replayed for its full batches")
        if graph is not None and index.shape == full:
            losses = graph.run(index)
        if losses is None:
            for p in params:
                p.grad = None
            losses = step(index)
        if after_backward is not None:
            after_backward()
        optimizer.step()
        n = rows_of(index)
        totals += losses.double() * n
        samples += n
    if graph is not None:
        for p in params:
            p.grad = None  # the graph's memory goes with it
    return samples
