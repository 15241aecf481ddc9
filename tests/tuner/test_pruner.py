"""ASHA: rungs, decisions with few values, and a synthetic study."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hoptune.core import ConfigError
from hoptune.tuner import AshaPruner


@pytest.mark.parametrize(
    ("kwargs", "rungs"),
    [
        ({"max_epochs": 10}, (1, 3, 9)),
        ({"max_epochs": 9}, (1, 3)),
        ({"max_epochs": 2}, (1,)),
        ({"reduction_factor": 2, "min_epochs": 2, "max_epochs": 16}, (2, 4, 8)),
        ({"reduction_factor": 4, "min_epochs": 3, "max_epochs": 100}, (3, 12, 48)),
        ({"min_epochs": 5, "max_epochs": 5}, ()),
        ({"max_epochs": 1}, ()),
    ],
)
def test_rungs(kwargs: dict, rungs: tuple[int, ...]) -> None:
    assert AshaPruner(**kwargs).rungs() == rungs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_epochs": 10, "reduction_factor": 1}, "reduction_factor (1) must be an integer >= 2"),
        (
            {"max_epochs": 10, "reduction_factor": 2.5},
            "reduction_factor (2.5) must be an integer >= 2",
        ),
        ({"max_epochs": 10, "min_epochs": 0}, "min_epochs (0) must be an integer >= 1"),
        ({"max_epochs": 0}, "max_epochs (0) must be an integer >= 1"),
        ({"max_epochs": True}, "max_epochs (True) must be an integer >= 1"),
        ({"max_epochs": "10"}, "max_epochs ('10') must be an integer >= 1"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        AshaPruner(where="regions.toml: regions.eu.pruner", **kwargs)
    assert str(info.value) == f"regions.toml: regions.eu.pruner: {message}"


def test_max_epochs_is_required() -> None:
    with pytest.raises(TypeError):
        AshaPruner()  # type: ignore[call-arg]


def test_few_values_keep_only_the_best_so_far() -> None:
    pruner = AshaPruner(max_epochs=9)
    assert not pruner.should_prune(1, 0.5, [0.5])  # the first trial always goes on
    assert pruner.should_prune(1, 0.6, [0.5, 0.6])
    assert not pruner.should_prune(1, 0.4, [0.5, 0.6, 0.4])
    assert not pruner.should_prune(1, 0.5, [0.5, 0.5])  # ties go on
    assert not pruner.should_prune(1, 0.6, [0.5, 0.6], minimize=False)


def test_top_third_goes_on() -> None:
    pruner = AshaPruner(max_epochs=9)
    values = [float(v) for v in range(9)]  # 9 values: the best 3 go on
    assert [pruner.should_prune(3, v, values) for v in values] == [False] * 3 + [True] * 6
    maximised = [pruner.should_prune(3, v, values, minimize=False) for v in values]
    assert maximised == [True] * 6 + [False] * 3


def test_only_rungs_decide() -> None:
    pruner = AshaPruner(max_epochs=9)
    assert not pruner.should_prune(2, 100.0, [0.0, 0.0, 0.0, 100.0])
    assert not pruner.should_prune(9, 100.0, [0.0, 0.0, 0.0, 100.0])
    short = AshaPruner(max_epochs=1)
    assert not short.should_prune(1, 100.0, [0.0, 0.0, 0.0, 100.0])


def test_diverged_trials_stop_and_do_not_count() -> None:
    pruner = AshaPruner(max_epochs=9)
    assert pruner.should_prune(2, math.nan, [math.nan])
    assert pruner.should_prune(1, math.inf, [math.inf])
    assert not pruner.should_prune(1, 0.9, [math.nan, math.nan, 0.9])


def test_bad_calls() -> None:
    pruner = AshaPruner(max_epochs=9)
    with pytest.raises(ValueError, match="outside 1..9"):
        pruner.should_prune(10, 0.5, [0.5])
    with pytest.raises(ValueError, match="must include this trial's value"):
        pruner.should_prune(1, 0.5, [0.4])


def simulate(pruner: AshaPruner, quality: np.ndarray, order: np.ndarray) -> dict[int, int]:
    """Run trials one after another (fully asynchronous); return epochs trained per trial."""
    recorded: dict[int, list[float]] = {}
    trained = {}
    for trial in order:
        for epoch in range(1, pruner.max_epochs + 1):
            value = quality[trial] + 1.0 / epoch  # every curve falls; the order never changes
            recorded.setdefault(epoch, []).append(value)
            if pruner.should_prune(epoch, value, recorded[epoch]):
                break
        trained[int(trial)] = epoch
    return trained


def test_synthetic_study_stops_the_worst_at_the_rungs_and_keeps_the_best() -> None:
    pruner = AshaPruner(max_epochs=27)  # rungs 1, 3, 9
    rng = np.random.default_rng(0)
    quality = rng.random(81)
    order = rng.permutation(81)
    trained = simulate(pruner, quality, order)
    epochs = np.array([trained[t] for t in range(81)])
    rank = np.argsort(np.argsort(quality))  # 0 is the best trial
    # Only the first arrivals are judged against few values (and may go on while weak).
    late = np.zeros(81, dtype=bool)
    late[order[pruner.reduction_factor :]] = True
    # Pruned trials stop exactly at a rung; the best trial trains to the end.
    assert set(epochs) <= {1, 3, 9, 27}
    assert epochs[rank == 0] == 27
    # Each rung lets fewer through, and the worse a trial, the sooner it stops.
    survivors = [int(np.sum(epochs > rung)) for rung in pruner.rungs()]
    assert survivors == sorted(survivors, reverse=True)
    assert survivors[0] < 81 / 2
    assert np.all(epochs[late & (rank >= 54)] == 1)  # the worst third stops at the first rung
    assert np.all(rank[late & (epochs == 27)] < 81 / 5)  # late finishers are all in the top fifth
    assert epochs.sum() < 0.25 * 81 * 27


def test_arrivals_from_worst_to_best_are_never_pruned() -> None:
    pruner = AshaPruner(max_epochs=9)
    quality = np.linspace(1.0, 0.0, 12)
    trained = simulate(pruner, quality, np.arange(12))
    assert set(trained.values()) == {9}


def test_arrivals_from_best_to_worst_leave_one_survivor() -> None:
    pruner = AshaPruner(max_epochs=9)
    quality = np.linspace(0.0, 1.0, 12)
    trained = simulate(pruner, quality, np.arange(12))
    assert trained == {0: 9, **{t: 1 for t in range(1, 12)}}
