"""On a GPU, a pass that replays a captured forward and backward trains bit for bit as the
eager pass does, for a single trial and for a cohort (tasks.hop._steps).

A replay runs the kernels of the capture on the same addresses, the optimizer's
step after a replay is the planned step's launch with its scalars read from
the device (a graph of its own, for a single trial and for a cohort), and
deterministic algorithms are on (as in every process that
trains on a GPU): so the error bound between the
two is zero, and weights, optimizer states and losses must be equal. Run with
``python -m pytest -m gpu tests`` (GPU.md); skipped without a CUDA device.
"""

from __future__ import annotations

import copy

import pytest
import torch

from hoptune.tasks.hop import _steps
from hoptune.tasks.hop._cohort_pass import Member, train_cohort_pass
from hoptune.tasks.hop._training import build_trial_model, make_trial_optimizer, train_pass
from hoptune.tasks.worker._device import train_deterministically
from tests.tasks.test_cohort import META, SEEDS, TRIALS, _rating_shards, _region

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

CUDA = torch.device("cuda", 0)


@pytest.fixture
def deterministic():  # noqa: ANN201
    train_deterministically(CUDA)
    yield
    torch.use_deterministic_algorithms(False)  # as the other tests of this process expect


def _recorded(monkeypatch, name: str) -> list[object]:  # noqa: ANN001
    """What each call of ``_steps.<name>`` returned in the test, in order."""
    made: list[object] = []
    real = getattr(_steps, name)

    def recording(*args):  # noqa: ANN002, ANN202
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(_steps, name, recording)
    return made


@pytest.fixture
def captures(monkeypatch) -> list[object]:
    """What each capture of the test made: a graph, or why it failed."""
    return _recorded(monkeypatch, "_capture")


@pytest.fixture
def optimizer_steps(monkeypatch) -> list[object]:
    """What each pass prepared for its optimizer's steps after its first replay: the
    steps (recorded in a graph of their own, or launched from Python), or None."""
    return _recorded(monkeypatch, "_prepare_steps")


def _members(region, count: int) -> list[Member]:  # noqa: ANN001
    out = []
    for seed, params in zip(SEEDS[:count], TRIALS[:count], strict=True):
        model = build_trial_model(region, params, seed, META, CUDA)
        out.append(Member(seed, params, model, make_trial_optimizer(region, params, model)))
    return out


def _assert_same(a: Member, b: Member) -> None:
    for (name, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values(),
                            strict=True):
        assert torch.equal(x, y), name
    for x, y in zip(a.optimizer.state.values(), b.optimizer.state.values(), strict=True):
        for key in x:
            assert torch.equal(torch.as_tensor(x[key]), torch.as_tensor(y[key])), key


def _shards() -> list[dict[str, torch.Tensor]]:
    return [{k: v.to(CUDA) for k, v in shard.items()} for shard in _rating_shards()]


def test_a_captured_pass_trains_bitwise_as_the_eager_pass(deterministic, captures,
                                                          optimizer_steps, monkeypatch) -> None:
    region = _region()
    shards = _shards()
    (base,) = _members(region, 1)
    runs = {}
    for mode in ("off", "auto"):
        monkeypatch.setenv("HOPTUNE_CUDA_GRAPHS", mode)
        m = copy.deepcopy(base)
        losses = [train_pass(region, m.model, m.optimizer, shards[s], seed=m.seed, epoch=e,
                             shard=s, position=p, params=m.params).loss
                  for e, order in enumerate([[0, 1], [1, 0]]) for p, s in enumerate(order)]
        runs[mode] = (m, losses)
    assert len(captures) == 4 and all(isinstance(c, _steps._Graph) for c in captures), captures
    # each pass's clipping and optimizer steps after its first replay: one graph of their own
    assert len(optimizer_steps) == 4, optimizer_steps
    assert all(s is not None and s.graph is not None for s in optimizer_steps), optimizer_steps
    assert runs["auto"][1] == runs["off"][1]
    _assert_same(runs["auto"][0], runs["off"][0])


def test_a_captured_cohort_pass_trains_bitwise_as_the_eager_cohort_pass(
        deterministic, captures, optimizer_steps, monkeypatch) -> None:
    region = _region()
    shards = _shards()
    base = _members(region, 3)
    runs = {}
    for mode in ("off", "auto"):
        monkeypatch.setenv("HOPTUNE_CUDA_GRAPHS", mode)
        members = copy.deepcopy(base)
        losses = [[done.loss for done in train_cohort_pass(
                      region, members, shards[s], epoch=e, shard=s, position=p, meta=META)]
                  for e, order in enumerate([[0, 1], [1, 0]]) for p, s in enumerate(order)]
        runs[mode] = (members, losses)
    assert len(captures) == 4 and all(isinstance(c, _steps._Graph) for c in captures), captures
    assert len(optimizer_steps) == 4, optimizer_steps
    assert all(s is not None and s.graph is not None for s in optimizer_steps), optimizer_steps
    assert runs["auto"][1] == runs["off"][1]
    for a, b in zip(runs["auto"][0], runs["off"][0], strict=True):
        _assert_same(a, b)


def test_a_captured_pass_with_dropout_draws_as_the_eager_pass(deterministic, captures,
                                                             monkeypatch) -> None:
    """A model that draws random numbers in its forward (dropout) draws them, replayed, from
    CUDA's graph-safe generator: the weights must come out as the eager pass's, or a trial
    trained captured would not replay where a capture fails."""
    from tests.tasks.test_cohort import _tabular_shard

    region = _region("mlp")
    meta = {"n_features": 3, "label_mean": 0.0}
    shard = {k: v.to(CUDA) for k, v in _tabular_shard(rows=300).items()}
    params = {"lr": 0.01, "hidden": 16, "dropout": 0.3}
    runs = {}
    for mode in ("off", "auto"):
        monkeypatch.setenv("HOPTUNE_CUDA_GRAPHS", mode)
        model = build_trial_model(region, params, 21, meta, CUDA)
        optimizer = make_trial_optimizer(region, params, model)
        losses = [train_pass(region, model, optimizer, shard, seed=21, epoch=e, shard=0,
                             position=0, params=params).loss for e in range(2)]
        runs[mode] = (model, losses)
    assert len(captures) == 2 and all(isinstance(c, _steps._Graph) for c in captures), captures
    assert runs["auto"][1] == runs["off"][1]
    for (name, x), y in zip(runs["auto"][0].state_dict().items(),
                            runs["off"][0].state_dict().values(), strict=True):
        assert torch.equal(x, y), name
