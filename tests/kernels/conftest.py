"""Fixtures for the kernels tests.

``host_kernels`` and ``kernel_path_on_cpu`` (tests/host_build.py) launch the
kernels built for the host with gcc on CPU tensors, so the code the GPU would
run (operation, pointer tables, argument order) is executed and compared
without a GPU.

Every comparison of a kernel with a reference goes through ``within_bound``
(the error model's bound, element by element); ``error_report`` collects the
largest error / bound ratio per kernel and prints it at the end of the session
(``pytest -s tests/kernels``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import torch

from hoptune import kernels
from tests.host_build import HostKernels, fresh_log, host_kernels, kernel_path_on_cpu
from tests.kernels.tracking import BoundTracker

__all__ = ["HostKernels", "fresh_log", "host_kernels", "kernel_path_on_cpu"]  # fixtures here


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Small models train far faster on one thread on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class RatingNet(torch.nn.Module):
    """A small rating model: an MLP whose output scaled_sigmoid maps into (0, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(8, 32),
            torch.nn.Tanh(),
            torch.nn.LayerNorm(32),
            torch.nn.Linear(32, 16),
            torch.nn.GELU(),
            torch.nn.Linear(16, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from hoptune import kernels

        return kernels.scaled_sigmoid(self.body(x).squeeze(-1), 5.0)


class Training:
    """Deterministic training of RatingNet on fixed synthetic ratings."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(64, 8, generator=g)
        self.y = torch.rand(64, generator=g) * 5

    def model(self, dtype: torch.dtype = torch.float32) -> RatingNet:
        torch.manual_seed(0)
        return RatingNet().to(dtype)

    def steps(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, n: int) -> None:
        dtype = next(model.parameters()).dtype
        x, y = self.x.to(dtype), self.y.to(dtype)
        for _ in range(n):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    def run(
        self,
        make: Callable[[Any], torch.optim.Optimizer],
        n: int,
        dtype: torch.dtype = torch.float32,
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        model = self.model(dtype)
        optimizer = make(model.parameters())
        self.steps(model, optimizer, n)
        return model, optimizer

    def run_together(
        self,
        make_ours: Callable[[Any], torch.optim.Optimizer],
        make_theirs: Callable[[Any], torch.optim.Optimizer],
        n: int,
        dtype: torch.dtype = torch.float32,
        check: Callable[[BoundTracker], None] | None = None,
    ) -> tuple[torch.nn.Module, BoundTracker]:
        """n steps of two trainings side by side; ours' model and the tracker of their bound."""
        models = [self.model(dtype), self.model(dtype)]
        ours, theirs = make_ours(models[0].parameters()), make_theirs(models[1].parameters())
        tracker = BoundTracker(ours, theirs)
        self.steps_together(models, tracker, n, check)
        return models[0], tracker

    def steps_together(
        self,
        models: list[torch.nn.Module],
        tracker: BoundTracker,
        n: int,
        check: Callable[[BoundTracker], None] | None = None,
    ) -> None:
        """n steps of ours' and theirs' models, check(tracker) after each.

        Each model computes its own gradients, as a separate run would, so differences
        feed back through the loss; the tracker measures them each step. Checking every
        step, not only the last, keeps two trainings that converge to the same weights
        from hiding an early mistake.
        """
        dtype = next(models[0].parameters()).dtype
        x, y = self.x.to(dtype), self.y.to(dtype)
        for _ in range(n):
            for model, optimizer in zip(models, (tracker.ours, tracker.theirs), strict=True):
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
            tracker.step()
            if check is not None:
                check(tracker)

    def run_resumed(
        self, make: Callable[[Any], torch.optim.Optimizer], k: int, n: int
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """k steps, a checkpoint as torch.save bytes, a fresh model and optimizer, n - k steps."""
        model, optimizer = self.run(make, k)
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
        del model, optimizer
        checkpoint = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
        model = self.model()
        for p in model.parameters():  # a fresh model must not start from the old weights
            p.data.add_(1.0)
        model.load_state_dict(checkpoint["model"])
        optimizer = make(model.parameters())
        optimizer.load_state_dict(checkpoint["optimizer"])
        self.steps(model, optimizer, n - k)
        return model, optimizer


@pytest.fixture(scope="session")
def training() -> Training:
    return Training()


def state_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every weight and every optimizer state tensor, in a fixed order."""
    out = [p.detach() for p in model.parameters()]
    for p in model.parameters():
        for key in sorted(optimizer.state[p]):
            out.append(torch.as_tensor(optimizer.state[p][key]))
    return out


class ErrorReport:
    """The largest error / bound ratio seen per kernel and dtype, printed at session end."""

    def __init__(self) -> None:
        self.worst: dict[tuple[str, str], kernels.Comparison] = {}
        self.counts: dict[tuple[str, str], int] = {}

    def record(self, kernel: str, dtype: torch.dtype, comparison: kernels.Comparison) -> None:
        key = (kernel, str(dtype).removeprefix("torch."))
        self.counts[key] = self.counts.get(key, 0) + 1
        if key not in self.worst or comparison.worst_ratio > self.worst[key].worst_ratio:
            self.worst[key] = comparison

    def lines(self) -> list[str]:
        out = [f"{'kernel':<62}{'dtype':<8}{'n':>4}{'error/bound':>12}{'error':>8}"
               f"{'bound':>8}  (ulps of the reference's value, at the worst ratio)"]
        for (kernel, dtype), c in sorted(self.worst.items()):
            out.append(f"{kernel:<62}{dtype:<8}{self.counts[kernel, dtype]:>4}"
                       f"{c.worst_ratio:>12.4f}{c.error_ulps:>8.1f}{c.bound_ulps:>8.1f}")
        return out


@pytest.fixture(scope="session")
def error_report() -> Iterator[ErrorReport]:
    report = ErrorReport()
    yield report
    if report.worst:
        print("\n\nLargest error / bound of the error model, per kernel comparison:")
        print("\n".join(report.lines()))


WithinBound = Callable[..., kernels.Comparison]


@pytest.fixture
def within_bound(error_report: ErrorReport) -> WithinBound:
    """check(got, want, bound, kernel=..., inputs=None): fail unless got is within bound."""

    def check(
        got: torch.Tensor,
        want: torch.Tensor,
        bound: torch.Tensor,
        *,
        kernel: str,
        inputs: Mapping[str, torch.Tensor] | None = None,
    ) -> kernels.Comparison:
        comparison = kernels.compare_by_bound(got, want, bound)
        error_report.record(kernel, want.dtype, comparison)
        if not comparison.ok:
            flat = {"got": got, "want": want, "bound": torch.broadcast_to(bound, want.shape)}
            flat |= dict(inputs or {})
            detail = [
                {"i": i} | {k: v.reshape(-1)[i].item() for k, v in flat.items()}
                for i in comparison.first_mismatches
            ]
            pytest.fail(
                f"{kernel}: {comparison.mismatches} of {comparison.elements} elements "
                f"beyond the error model's bound, e.g. {detail}"
            )
        return comparison

    return check


@pytest.fixture
def assert_follows(within_bound: WithinBound) -> Callable[[BoundTracker, str], None]:
    """check(tracker, kernel): every parameter and state tensor of the tracker's two
    optimizers within its bound, compared as one flat tensor per state name and dtype."""

    def check(tracker: BoundTracker, kernel: str) -> None:
        parts: dict[tuple[str, torch.dtype], list[tuple[torch.Tensor, ...]]] = {}
        for _, name, ours, theirs, bound in tracker.tensors():
            flat = (ours.reshape(-1), theirs.reshape(-1),
                    torch.broadcast_to(bound, theirs.shape).reshape(-1))
            parts.setdefault((name, theirs.dtype), []).append(flat)
        for (name, _), tensors in parts.items():
            ours, theirs, bound = (torch.cat(column) for column in zip(*tensors, strict=True))
            within_bound(ours, theirs, bound, kernel=kernel, inputs={name: theirs})

    return check


@pytest.fixture(scope="session")
def snapshot() -> Callable[[torch.nn.Module, torch.optim.Optimizer], list[torch.Tensor]]:
    return state_tensors
