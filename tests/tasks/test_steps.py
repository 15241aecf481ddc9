"""A pass's steps (``tasks.hop._steps``): when a pass captures, and what it does with a capture.

The capture itself needs a GPU (tests/tasks/test_graphs_gpu.py). Here a stand-in
with the same contract, a step recorded with a static index and replayed by
copying each batch's indices into it, drives the same loop on the CPU: which
batches replay, which run eagerly, what a failed capture leaves, and that the
weights come out bitwise those of the eager loop.
"""

from __future__ import annotations

import logging

import pytest
import torch

from hoptune.core import ConfigError
from hoptune.kernels import FusedAdamW
from hoptune.tasks.hop import _steps
from hoptune.tasks.hop._steps import CaptureChoice, capture_choice, graphs_mode, run_steps

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")


def test_a_pass_captures_on_a_gpu_with_enough_full_batches() -> None:
    assert capture_choice(CUDA, rows=1000, batch_size=100, mode="auto") == CaptureChoice(
        True, "9 of 10 full batches replayed from one capture")
    few = capture_choice(CUDA, rows=399, batch_size=100, mode="auto")
    assert not few.capture and "3 full batches of 100" in few.reason
    cpu = capture_choice(CPU, rows=1000, batch_size=100, mode="auto")
    assert not cpu.capture and "cpu" in cpu.reason
    off = capture_choice(CUDA, rows=1000, batch_size=100, mode="off")
    assert off == CaptureChoice(False, "HOPTUNE_CUDA_GRAPHS=off")


def test_the_mode_is_auto_or_off_and_anything_else_names_the_variable() -> None:
    assert graphs_mode({}) == "auto"
    assert graphs_mode({"HOPTUNE_CUDA_GRAPHS": " OFF "}) == "off"
    with pytest.raises(ConfigError, match="HOPTUNE_CUDA_GRAPHS: one of auto, off, got 'yes'"):
        graphs_mode({"HOPTUNE_CUDA_GRAPHS": "yes"})


class FakeGraph:
    """``_capture``'s contract on the CPU: nothing runs at the capture; each replay runs the
    recorded step on the static index the batch was copied into, its losses in one tensor."""

    def __init__(self, index: torch.Tensor, step, params) -> None:  # noqa: ANN001
        self.index, self.step, self.params = index.clone(), step, params
        self.losses: torch.Tensor | None = None
        self.replayed: list[list[int]] = []

    def run(self, index: torch.Tensor) -> torch.Tensor:
        self.index.copy_(index)
        self.replayed.append(index.tolist())
        for p in self.params:
            p.grad = None
        losses = self.step(self.index)
        if self.losses is None:
            self.losses = torch.empty_like(losses)
        self.losses.copy_(losses)
        return self.losses


def _training(seed: int = 0):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(23, 4, generator=g), torch.randn(23, generator=g)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = FusedAdamW(model.parameters(), lr=0.01)
    eager: list[list[int]] = []

    def step(chosen: torch.Tensor) -> torch.Tensor:
        eager.append(chosen.tolist())
        loss = torch.nn.functional.mse_loss(model(x[chosen]).squeeze(-1), y[chosen])
        loss.backward()
        return loss.detach()

    order = torch.randperm(23, generator=torch.Generator().manual_seed(5))
    indices = [order[i:i + 5] for i in range(0, 23, 5)]  # 4 full batches of 5, then 3 rows
    return model, optimizer, step, indices, eager


def _run(choice: CaptureChoice, capture=None, monkeypatch=None):  # noqa: ANN001, ANN202
    model, optimizer, step, indices, eager = _training()
    if capture is not None:
        monkeypatch.setattr(_steps, "_capture", capture)
    total = torch.zeros((), dtype=torch.float64)
    samples = run_steps(indices, step, list(model.parameters()), optimizer, total, len,
                        choice=choice)
    return model, total, samples, indices, eager


def test_full_batches_after_the_first_replay_one_capture_bitwise_like_eager_steps(
        monkeypatch) -> None:
    made: list[FakeGraph] = []

    def capture(index, step, params):  # noqa: ANN001, ANN202
        made.append(FakeGraph(index, step, params))
        return made[-1]

    eager_model, eager_total, eager_samples, _, _ = _run(CaptureChoice(False, "test"))
    model, total, samples, indices, eager = _run(CaptureChoice(True, "test"), capture,
                                                 monkeypatch)
    (graph,) = made
    # the first batch eagerly; the capture at the second, which it then replays, as every
    # later full batch; the last, smaller batch eagerly
    assert eager[0] == indices[0].tolist() and eager[-1] == indices[-1].tolist()
    assert graph.replayed == [i.tolist() for i in indices[1:4]]
    assert (samples, eager_samples) == (23, 23)
    assert torch.equal(total, eager_total)
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_failed_capture_trains_the_pass_eagerly_and_says_why_once(monkeypatch,
                                                                    caplog) -> None:
    caplog.set_level(logging.INFO, logger=_steps.__name__)
    monkeypatch.setattr(_steps, "_logged", set())
    tries = []

    def capture(index, step, params):  # noqa: ANN001, ANN202
        tries.append(index.tolist())
        return "RuntimeError: operation not permitted when stream is capturing"

    eager_model, eager_total, _, _, _ = _run(CaptureChoice(False, "test"))
    for _ in range(2):
        model, total, samples, indices, eager = _run(CaptureChoice(True, "test"), capture,
                                                     monkeypatch)
        assert eager == [i.tolist() for i in indices]  # every batch eagerly
        assert torch.equal(total, eager_total)
        for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
            assert torch.equal(a, b)
    assert len(tries) == 2  # once per pass
    lines = [r.getMessage() for r in caplog.records if "CUDA graphs" in r.getMessage()]
    assert lines == ["CUDA graphs: training eagerly, the capture failed (RuntimeError: "
                     "operation not permitted when stream is capturing)"]


def test_a_pass_without_capture_never_tries(monkeypatch) -> None:
    def capture(*args):  # noqa: ANN002, ANN202
        raise AssertionError("captured")

    _, _, samples, indices, eager = _run(CaptureChoice(False, "cpu"), capture, monkeypatch)
    assert samples == 23 and eager == [i.tolist() for i in indices]
