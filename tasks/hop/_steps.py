"""A pass's steps: eager, or with forward and backward captured once in a CUDA graph.

On a GPU a small model's step is bound by the host: an H200 ran the demo
rating model's pass in 228 ms of which its kernels took 4.5, each step's
forward and backward launching some fifty kernels from Python and the
autograd engine. Where ``capture_choice`` allows it, ``run_steps`` trains the
pass's first batch as always (it also warms up what a capture must find
ready: the kernels compiled, cuBLAS's handles, the allocator; a later pass of
the same process, on a device warmed so, skips this and captures its first
batch), then records the second batch's gather, forward and backward once in
a CUDA graph, and
for every later batch of the full size copies the batch's row indices into
the graph's input and replays it: the same kernels on the same addresses, so
the gradients, and the weights the optimizer makes of them, are bit for bit
those of the eager steps. The last, smaller batch runs eagerly.

The optimizer's step after a replayed backward (with gradient clipping
before it) is a second capture: a fused optimizer's planned step is one
launch (``kernels._plan``), but AdamW's scalars change with the step count,
so after the first replay, its gradients now where the graph keeps them,
the pass asks the optimizer for its remaining steps from the device
(``FusedOptimizer.device_steps``: the scalars of each step as rows of a
table on the device, read at a counter the step advances), takes the first
of them from Python, records it, and replays that record after every later
replayed backward: per full batch, an index copy and two replays, with
nothing computed on the host but the step counts. The step is bitwise the
planned step it stands for; a cohort's optimizers do the same with their
per-trial tables. An optimizer that cannot take its steps from the device
(torch's own) steps from Python after each replay, as before. The loss's sum
stays outside the graphs.

A capture that fails (a model that synchronises with the host, an operation
CUDA cannot record) costs nothing but the attempt: the step runs eagerly,
the pass goes on eagerly (or, for the optimizer's capture, launches its
device steps from Python), and the reason is logged once per reason.
``HOPTUNE_CUDA_GRAPHS=off`` turns capture off; ``backward`` captures the pass
but leaves the optimizer's steps to Python.
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

    from hoptune.kernels import DeviceSteps

__all__ = ["GRAPHS_VARIABLE", "CaptureChoice", "capture_choice", "graphs_mode", "run_steps"]

log = logging.getLogger(__name__)

GRAPHS_VARIABLE = "HOPTUNE_CUDA_GRAPHS"
#: auto: capture the pass and its optimizer steps; backward: the gather, forward and backward
#: only (the optimizer steps from Python, as without a capture); off: every step eagerly
MODES = ("auto", "backward", "off")
#: Full batches a pass needs before a capture can repay itself: the first runs eagerly, the
#: capture costs about one eager step, and the rest replay.
MIN_FULL_BATCHES = 4

_logged: set[str] = set()
#: Devices on which a pass of this process captured: what a capture must find ready (kernels
#: compiled, the libraries' handles, the allocator) is, so a later pass captures its first
#: batch instead of training it eagerly first.
_warmed: set[str] = set()


def graphs_mode(environ: dict[str, str] | None = None) -> str:
    """``HOPTUNE_CUDA_GRAPHS``: ``auto`` (the default: capture where ``capture_choice``
    allows), ``backward`` (capture, but not the optimizer's steps) or ``off``;
    ``ConfigError`` naming the variable otherwise."""
    env = os.environ if environ is None else environ
    value = env.get(GRAPHS_VARIABLE, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ConfigError(f"{GRAPHS_VARIABLE}: one of {', '.join(MODES)}, "
                          f"got {env[GRAPHS_VARIABLE]!r}")
    return value


@dataclass(frozen=True)
class CaptureChoice:
    """Whether a pass captures its forward and backward, and why; with ``steps``, also its
    clipping and optimizer steps after the first replay (where the optimizer can)."""

    capture: bool
    reason: str
    steps: bool = True


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
    replayed = f"{full - 1} of {full} full batches replayed from one capture"
    if mode == "backward":
        return CaptureChoice(True, f"{replayed}, the optimizer's steps from Python "
                                   f"({GRAPHS_VARIABLE}=backward)", steps=False)
    return CaptureChoice(True, replayed)


class _Graph:
    """One captured gather, forward and backward: its input indices and output losses."""

    def __init__(self, graph: torch.cuda.CUDAGraph, index: torch.Tensor,
                 losses: torch.Tensor) -> None:
        self.graph, self.index, self.losses = graph, index, losses

    def run(self, index: torch.Tensor) -> torch.Tensor:
        self.index.copy_(index)
        self.graph.replay()
        return self.losses


def _record(work: Callable[[], object], device: torch.device
            ) -> tuple[torch.cuda.CUDAGraph, object] | str:
    """``work()`` recorded in a CUDA graph on a side stream, with what it returned, or why
    it could not be. Nothing recorded has run yet."""
    import torch  # here: a command that only checks the setting (graphs_mode) imports no torch

    graph = torch.cuda.CUDAGraph()
    ambient = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(ambient)
    try:
        with torch.cuda.stream(side):
            # thread_local: what the capturing thread may not do during a capture is refused,
            # and the worker's other threads (its checkpoint writer) go on unhindered
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                made = work()
            except Exception:
                with contextlib.suppress(Exception):  # the work's error is the one to tell
                    graph.capture_end()
                raise
            graph.capture_end()
    except Exception as exc:  # noqa: BLE001 - any failure means: run it eagerly
        torch.cuda.synchronize(device)
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    ambient.wait_stream(side)
    return graph, made


def _capture(index: torch.Tensor, step: Callable[[torch.Tensor], torch.Tensor],
             params: Sequence[torch.Tensor]) -> _Graph | str:
    """``step(index)`` (gather, forward, backward: the detached losses) recorded in a CUDA
    graph, or why it could not be. Nothing recorded has run yet."""
    static = index.clone()
    for p in params:
        p.grad = None  # the backward's gradients are made in the graph's memory, then kept
    made = _record(lambda: step(static), index.device)
    if isinstance(made, str):
        for p in params:
            p.grad = None
        return made
    graph, losses = made
    return _Graph(graph, static, losses)


class _OptimizerSteps:
    """The clipping and optimizer steps after a pass's replayed batches: ``DeviceSteps`` (the
    optimizer's next steps, nothing in them from the host), each after ``after_backward``;
    the first taken from Python (it readies what a capture needs), and recorded then, each
    later one a replay of that record. Where the capture fails, every one from Python."""

    def __init__(self, steps: DeviceSteps, after_backward: Callable[[], None] | None,
                 device: torch.device) -> None:
        self.steps, self.after_backward, self.device = steps, after_backward, device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.tried = False

    def _work(self) -> None:
        if self.after_backward is not None:
            self.after_backward()
        self.steps.step()

    def take(self) -> None:
        """One step: the record replayed, or the work run (and, the first time, recorded)."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self._work()
            if not self.tried:
                self.tried = True
                made = _record(self._work, self.device)
                if isinstance(made, str):
                    _log_once(f"CUDA graphs: optimizer steps launched from Python, their "
                              f"capture failed ({made})")
                else:
                    self.graph = made[0]
                    _log_once("CUDA graphs: each pass's clipping and optimizer step captured "
                              "once and replayed after each replayed backward")
        self.steps.counted()


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
    ``choice`` says so and the capture succeeds; after the first of them, where
    the optimizer can take its next steps from the device (``device_steps``),
    clipping and optimizer step are replayed from a capture of their own.
    """
    batches = list(indices) if choice.capture else indices
    full_batches = (sum(1 for i in batches if i.shape == batches[0].shape)
                    if choice.capture and batches else 0)
    graph: _Graph | None = None
    steps: _OptimizerSteps | None = None
    tried = not choice.capture
    prepared = False
    full: torch.Size | None = None
    samples = seen_full = 0
    for index in batches:
        if full is None:
            full = index.shape
        losses = None
        if (graph is None and not tried and index.shape == full
                and (samples > 0 or str(index.device) in _warmed)):
            tried = True
            made = _capture(index, step, params)
            if isinstance(made, str):
                _log_once(f"CUDA graphs: training eagerly, the capture failed ({made})")
            else:
                graph = made
                _warmed.add(str(index.device))
                _log_once("CUDA graphs: each pass's gather, forward and backward captured "
                          "once and replayed for its full batches")
        replayed = graph is not None and index.shape == full
        if replayed:
            losses = graph.run(index)
        if losses is None:
            for p in params:
                p.grad = None
            losses = step(index)
        if replayed and steps is not None:
            steps.take()
        else:
            if after_backward is not None:
                after_backward()
            optimizer.step()
            if replayed and not prepared and choice.steps:  # the graph keeps the gradients
                prepared = True
                steps = _prepare_steps(optimizer, full_batches - seen_full - 1, after_backward,
                                       index.device)
        n = rows_of(index)
        totals += losses.double() * n
        samples += n
        seen_full += index.shape == full
    if graph is not None:
        for p in params:
            p.grad = None  # the graph's memory goes with it
    return samples


def _prepare_steps(optimizer: torch.optim.Optimizer, count: int,
                   after_backward: Callable[[], None] | None, device: torch.device
                   ) -> _OptimizerSteps | None:
    """The optimizer's next ``count`` steps from the device, where it can take them and
    there are enough to repay a capture (two or more); else None, and it steps as always."""
    device_steps = getattr(optimizer, "device_steps", None)
    if count < 2 or device_steps is None:
        return None
    prepared = device_steps(count)
    if prepared is None:
        _log_once(f"CUDA graphs: optimizer steps launched from Python ({type(optimizer).__name__}"
                  f" cannot take its steps from the device here)")
        return None
    return _OptimizerSteps(prepared, after_backward, device)
