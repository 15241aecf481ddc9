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
from hoptune.kernels import FusedAdamW, clip_grad_norm_
from hoptune.tasks.hop import _steps
from hoptune.tasks.hop._steps import CaptureChoice, capture_choice, graphs_mode, run_steps
from tests.host_build import fresh_log, host_kernels, kernel_path_on_cpu  # noqa: F401 - fixtures

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
    backward = capture_choice(CUDA, rows=1000, batch_size=100, mode="backward")
    assert backward.capture and not backward.steps
    assert backward.reason.endswith("the optimizer's steps from Python "
                                    "(HOPTUNE_CUDA_GRAPHS=backward)")


def test_the_mode_is_auto_or_off_and_anything_else_names_the_variable() -> None:
    assert graphs_mode({}) == "auto"
    assert graphs_mode({"HOPTUNE_CUDA_GRAPHS": " OFF "}) == "off"
    assert graphs_mode({"HOPTUNE_CUDA_GRAPHS": "backward"}) == "backward"
    with pytest.raises(ConfigError,
                       match="HOPTUNE_CUDA_GRAPHS: one of auto, backward, off, got 'yes'"):
        graphs_mode({"HOPTUNE_CUDA_GRAPHS": "yes"})


class FakeGraph:
    """``_capture``'s contract on the CPU: nothing runs at the capture; each replay runs the
    recorded step on the static index the batch was copied into, its losses in one tensor
    and its gradients in the tensors the first replay made (a graph's stay where they are)."""

    def __init__(self, index: torch.Tensor, step, params) -> None:  # noqa: ANN001
        self.index, self.step, self.params = index.clone(), step, params
        self.losses: torch.Tensor | None = None
        self.grads: list[torch.Tensor] | None = None
        self.replayed: list[list[int]] = []

    def run(self, index: torch.Tensor) -> torch.Tensor:
        self.index.copy_(index)
        self.replayed.append(index.tolist())
        for p in self.params:
            p.grad = None
        losses = self.step(self.index)
        if self.losses is None:
            self.losses = torch.empty_like(losses)
            self.grads = [p.grad for p in self.params]
        self.losses.copy_(losses)
        for p, kept in zip(self.params, self.grads, strict=True):
            kept.copy_(p.grad)
            p.grad = kept
        return self.losses


def _fake_captures():  # noqa: ANN202
    """A stand-in for ``_capture`` and the list of the FakeGraphs it made, in order."""
    made: list[FakeGraph] = []

    def capture(index, step, params):  # noqa: ANN001, ANN202
        made.append(FakeGraph(index, step, params))
        return made[-1]

    return made, capture


def _training(seed: int = 0, rows: int = 23):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(rows, 4, generator=g), torch.randn(rows, generator=g)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = FusedAdamW(model.parameters(), lr=0.01)
    eager: list[list[int]] = []

    def step(chosen: torch.Tensor) -> torch.Tensor:
        eager.append(chosen.tolist())
        loss = torch.nn.functional.mse_loss(model(x[chosen]).squeeze(-1), y[chosen])
        loss.backward()
        return loss.detach()

    order = torch.randperm(rows, generator=torch.Generator().manual_seed(5))
    # 23 rows: 4 full batches of 5, then 3 rows
    indices = [order[i:i + 5] for i in range(0, rows, 5)]
    return model, optimizer, step, indices, eager


def _run(choice: CaptureChoice, capture=None, monkeypatch=None, rows: int = 23,  # noqa: ANN001, ANN202
         clip: float | None = None, warmed: bool = False):
    model, optimizer, step, indices, eager = _training(rows=rows)
    if capture is not None:
        monkeypatch.setattr(_steps, "_capture", capture)
        if not warmed:
            monkeypatch.setattr(_steps, "_warmed", set())  # a process that never captured
    params = list(model.parameters())
    total = torch.zeros((), dtype=torch.float64)
    samples = run_steps(indices, step, params, optimizer, total, len, choice=choice,
                        after_backward=None if clip is None
                        else lambda: clip_grad_norm_(params, clip))
    return model, total, samples, indices, eager


def test_full_batches_after_the_first_replay_one_capture_bitwise_like_eager_steps(
        monkeypatch) -> None:
    made, capture = _fake_captures()

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


class FakeRecord:
    """``_record``'s contract on the CPU: nothing runs when the work is recorded; each replay
    runs it again."""

    def __init__(self, work) -> None:  # noqa: ANN001
        self.work, self.replays = work, 0

    def replay(self) -> None:
        self.replays += 1
        self.work()


@pytest.mark.parametrize("clip", [None, 0.05], ids=["no-clip", "clip"])
def test_optimizer_steps_after_the_first_replay_are_one_record_bitwise_like_eager_steps(
        monkeypatch, kernel_path_on_cpu, clip) -> None:  # noqa: F811 - the fixture
    made, capture = _fake_captures()
    records: list[FakeRecord] = []

    def record(work, device):  # noqa: ANN001, ANN202
        records.append(FakeRecord(work))
        return records[-1], None

    monkeypatch.setattr(_steps, "_record", record)
    # 33 rows: 6 full batches of 5, then 3 rows
    eager_model, eager_total, _, _, _ = _run(CaptureChoice(False, "test"), rows=33, clip=clip)
    eager_launches = [k for k, _ in kernel_path_on_cpu.launches]
    kernel_path_on_cpu.launches.clear()
    model, total, samples, indices, eager = _run(CaptureChoice(True, "test"), capture,
                                                 monkeypatch, rows=33, clip=clip)
    (graph,), (steps,) = made, records
    assert graph.replayed == [i.tolist() for i in indices[1:6]]
    # batch 1's step from the host's scalars; batch 2's from the device's rows, recorded
    # then; batches 3 to 5 replay that record
    assert steps.replays == 3
    launched = [k for k, _ in kernel_path_on_cpu.launches]
    assert launched.count("ht_adamw_rows_float32") == 4
    assert launched.count("ht_adamw_float32") == eager_launches.count("ht_adamw_float32") - 4
    assert launched.count("ht_scale_float32") == eager_launches.count("ht_scale_float32")
    assert samples == 33 and torch.equal(total, eager_total)
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_optimizer_steps_whose_record_fails_run_from_python(monkeypatch, kernel_path_on_cpu,  # noqa: F811
                                                            caplog) -> None:
    caplog.set_level(logging.INFO, logger=_steps.__name__)
    monkeypatch.setattr(_steps, "_logged", set())
    monkeypatch.setattr(_steps, "_capture", lambda index, step, params: FakeGraph(
        index, step, params))
    monkeypatch.setattr(_steps, "_record", lambda work, device: "RuntimeError: no capture")
    eager_model, eager_total, _, _, _ = _run(CaptureChoice(False, "test"), rows=33)
    model, total, _, _, _ = _run(CaptureChoice(True, "test"), rows=33)
    assert torch.equal(total, eager_total)
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert [k for k, _ in kernel_path_on_cpu.launches].count("ht_adamw_rows_float32") == 4
    assert ("CUDA graphs: optimizer steps launched from Python, their capture failed "
            "(RuntimeError: no capture)") in caplog.messages


def test_a_pass_after_a_capture_in_the_same_process_captures_its_first_batch(
        monkeypatch) -> None:
    made, capture = _fake_captures()

    eager_model, eager_total, _, _, _ = _run(CaptureChoice(False, "test"))
    _run(CaptureChoice(True, "test"), capture, monkeypatch)  # this process's first capture
    assert _steps._warmed == {"cpu"}
    model, total, _, indices, eager = _run(CaptureChoice(True, "test"), capture, monkeypatch,
                                           warmed=True)
    first, second = made
    assert first.replayed == [i.tolist() for i in indices[1:4]]
    assert second.replayed == [i.tolist() for i in indices[:4]]  # no eager first batch
    assert eager == [i.tolist() for i in indices]  # each batch stepped once, replayed or not
    assert torch.equal(total, eager_total)
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_pass_that_captures_only_its_backward_steps_the_optimizer_from_python(
        monkeypatch, kernel_path_on_cpu) -> None:  # noqa: F811 - the fixture
    monkeypatch.setattr(_steps, "_record", lambda work, device: pytest.fail("recorded"))
    eager_model, eager_total, _, _, _ = _run(CaptureChoice(False, "test"), rows=33)
    kernel_path_on_cpu.launches.clear()
    model, total, _, _, _ = _run(CaptureChoice(True, "test", steps=False),
                                 lambda index, step, params: FakeGraph(index, step, params),
                                 monkeypatch, rows=33)
    assert "ht_adamw_rows_float32" not in [k for k, _ in kernel_path_on_cpu.launches]
    assert torch.equal(total, eager_total)
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        assert torch.equal(a, b)
