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
        ({"max_epochs": 10, "reduction_factor": 3}, (1, 3, 9)),
        ({"max_epochs": 9, "reduction_factor": 3}, (1, 3)),
        ({"max_epochs": 8}, (1, 2, 4)),  # the default reduction factor, 2
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
        ({"max_epochs": 10, "brackets": 0}, "brackets (0) must be an integer >= 1"),
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
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)
    assert not pruner.should_prune(1, 0.5, [0.5])  # the first trial always goes on
    assert pruner.should_prune(1, 0.6, [0.5, 0.6])
    assert not pruner.should_prune(1, 0.4, [0.5, 0.6, 0.4])
    assert not pruner.should_prune(1, 0.5, [0.5, 0.5])  # ties go on
    assert not pruner.should_prune(1, 0.6, [0.5, 0.6], minimize=False)


def test_top_third_goes_on() -> None:
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)
    values = [float(v) for v in range(9)]  # 9 values: the best 3 go on
    assert [pruner.should_prune(3, v, values) for v in values] == [False] * 3 + [True] * 6
    maximised = [pruner.should_prune(3, v, values, minimize=False) for v in values]
    assert maximised == [True] * 6 + [False] * 3


def test_only_rungs_decide() -> None:
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)
    assert not pruner.should_prune(2, 100.0, [0.0, 0.0, 0.0, 100.0])
    assert not pruner.should_prune(9, 100.0, [0.0, 0.0, 0.0, 100.0])
    short = AshaPruner(max_epochs=1)
    assert not short.should_prune(1, 100.0, [0.0, 0.0, 0.0, 100.0])


def test_diverged_trials_stop_and_do_not_count() -> None:
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)
    assert pruner.should_prune(2, math.nan, [math.nan])
    assert pruner.should_prune(1, math.inf, [math.inf])
    assert not pruner.should_prune(1, 0.9, [math.nan, math.nan, 0.9])


def test_bad_calls() -> None:
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)
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
    pruner = AshaPruner(max_epochs=27, reduction_factor=3)  # rungs 1, 3, 9
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
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)
    quality = np.linspace(1.0, 0.0, 12)
    trained = simulate(pruner, quality, np.arange(12))
    assert set(trained.values()) == {9}


def test_arrivals_from_best_to_worst_leave_one_survivor() -> None:
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)
    quality = np.linspace(0.0, 1.0, 12)
    trained = simulate(pruner, quality, np.arange(12))
    assert trained == {0: 9, **{t: 1 for t in range(1, 12)}}


def interleaved(pruner: AshaPruner, curves: list[list[float]], starts: list[int]) -> list[int]:
    """Trials that start at the given steps and each end one epoch per step (asynchronous,
    overlapping, as a study of several parallel trials runs); epochs each trained."""
    recorded: dict[int, list[float]] = {}
    trained = [0] * len(curves)
    stopped = [False] * len(curves)
    for step in range(max(starts) + pruner.max_epochs):
        for trial, curve in enumerate(curves):
            epoch = step - starts[trial] + 1
            if stopped[trial] or not 1 <= epoch <= pruner.max_epochs:
                continue
            recorded.setdefault(epoch, []).append(curve[epoch - 1])
            trained[trial] = epoch
            rungs = {r: recorded.get(r, []) for r in pruner.rungs() if r <= epoch}
            if epoch < pruner.max_epochs and pruner.should_stop(epoch, curve[:epoch], rungs,
                                                                number=trial):
                stopped[trial] = True
    return trained


def test_a_bad_first_trial_stops_once_better_ones_reach_its_rung_and_the_good_go_on() -> None:
    """The study the rule was made for: the first trial is the worst, and alone at the rung."""
    bad = [1.82 - 0.01 * e for e in range(8)]
    later = [[0.90 + 0.01 * i - 0.02 * e for e in range(8)] for i in range(7)]  # best first
    curves, starts = [bad, *later], [0] + [1] * 7
    rechecked = interleaved(AshaPruner(max_epochs=8, reduction_factor=4), curves, starts)
    # alone at rung 1 after epoch 1, it went on; the others reached rung 1 while it trained
    # epoch 2, so it stopped at its first epoch end after that: epoch 3 of 8
    assert rechecked[0] == 3
    assert rechecked[1] == 8  # the best trains to the end
    # past rung 1 went only the top quarter of the 8 values recorded there
    assert {t for t, epochs in enumerate(rechecked) if epochs > 1} <= {0, 1, 2}
    before = interleaved(AshaPruner(max_epochs=8, reduction_factor=4, recheck=False), curves,
                         starts)
    assert before[0] == 8  # the rule before: the first arrival trained every epoch
    assert before[1] == 8


def test_judged_again_at_every_rung_passed_by_the_same_rule() -> None:
    pruner = AshaPruner(max_epochs=9, reduction_factor=3)  # rungs 1, 3
    # at epoch 3: top third of rung 3 (kept), but rung 1 now holds 3 values better than its 0.9
    assert pruner.should_stop(3, [0.9, 0.8, 0.5], {1: [0.9, 0.2, 0.3, 0.4], 3: [0.5]})
    assert not pruner.should_stop(3, [0.2, 0.2, 0.1], {1: [0.2, 0.3, 0.4, 0.9], 3: [0.1]})
    # between rungs only the passed rungs judge; without recheck nothing does
    assert pruner.should_stop(2, [0.9, 0.8], {1: [0.9, 0.2, 0.3, 0.4]})
    assert not AshaPruner(max_epochs=9, reduction_factor=3, recheck=False).should_stop(
        2, [0.9, 0.8], {1: [0.9, 0.2, 0.3, 0.4]})
    assert pruner.should_stop(2, [0.9, math.nan], {1: [0.9]})  # a diverged trial stops
    with pytest.raises(ValueError, match="history holds 1 values"):
        pruner.should_stop(2, [0.9], {1: [0.9]})
    with pytest.raises(ConfigError, match="recheck"):
        AshaPruner(max_epochs=9, recheck="yes")  # type: ignore[arg-type]


def test_brackets_take_turns_over_the_first_rungs() -> None:
    pruner = AshaPruner(max_epochs=8, brackets=3)  # rungs 1, 2, 4
    assert [pruner.first_rung(n) for n in range(7)] == [1, 2, 4, 1, 2, 4, 1]
    assert [pruner.judged_at(n) for n in range(3)] == [(1, 2, 4), (2, 4), (4,)]
    # a bracket past the last rung trains its trials to the end; one bracket is plain ASHA
    assert AshaPruner(max_epochs=8, brackets=4).judged_at(3) == ()
    assert AshaPruner(max_epochs=8).judged_at(5) == (1, 2, 4)
    # below its first rung a trial is not judged, whatever the rung holds, recheck or not
    worse = {1: [0.1, 0.2, 0.3, 0.9], 2: [0.1, 0.2, 0.3, 0.8]}
    assert pruner.should_stop(1, [0.9], worse, number=0)
    assert not pruner.should_stop(1, [0.9], worse, number=1)
    assert not pruner.should_stop(2, [0.9, 0.8], worse, number=2)
    assert pruner.should_stop(2, [0.9, 0.8], worse, number=1)
    assert pruner.should_stop(1, [math.nan], worse, number=2)  # diverged: stops in any bracket


def test_judged_again_a_trial_stands_with_the_better_of_its_value_there_and_now() -> None:
    pruner = AshaPruner(max_epochs=4, reduction_factor=3)  # rung 1
    # the demo's study: last of two at rung 1, then the study's best after epoch 2: it goes on
    # (judged by its value at the rung alone, 0.725, it stopped holding 0.486)
    assert not pruner.should_stop(2, [0.725, 0.486], {1: [0.725, 0.630]})
    # better now, but not better than the rung's kept place: it stops
    assert pruner.should_stop(2, [0.725, 0.650], {1: [0.725, 0.630]})
    # a value that dips after the rung does not stop a trial the rung keeps
    assert not pruner.should_stop(2, [0.50, 0.70], {1: [0.50, 0.55, 0.60, 0.65]})
    # its value at the rung is replaced, not added: each trial counts once (0.635 added beside
    # its 0.725, rung 1's 4 values would keep 2 places, one of them its own)
    halving = AshaPruner(max_epochs=4, reduction_factor=2)  # rungs 1, 2
    assert halving.should_stop(2, [0.725, 0.635], {1: [0.725, 0.630, 0.64], 2: [0.635]})
    # accuracy: larger is better
    assert not pruner.should_stop(2, [0.60, 0.95], {1: [0.60, 0.90]}, minimize=False)
    assert pruner.should_stop(2, [0.60, 0.62], {1: [0.60, 0.90]}, minimize=False)


def test_brackets_keep_slow_starters_that_end_best() -> None:
    """The pattern of MovieLens 100k: fast learners lead after one epoch and then overfit,
    slow learners are last after one epoch and end best. With one bracket every slow learner
    stops at the first rung; with three, those whose turn starts at the rung after 4 epochs
    train to the end, and the study's best value is a slow learner's."""
    def fast(i: int) -> list[float]:
        return [0.93 + 0.01 * i + 0.01 * (e - 1) for e in range(1, 9)]

    def slow(i: int) -> list[float]:
        return [0.88 + 0.005 * i + 0.16 / e for e in range(1, 9)]

    curves = [fast(n // 2) if n % 2 == 0 else slow(n // 2) for n in range(9)]
    starts = [n // 2 for n in range(9)]  # two at a time, as a study of 2 parallel trials
    best_fast = min(min(curves[n]) for n in range(0, 9, 2))
    plain = interleaved(AshaPruner(max_epochs=8), curves, starts)
    assert all(plain[n] <= 2 for n in range(1, 9, 2))  # no slow learner past rung 2
    assert min(min(c[:plain[n]]) for n, c in enumerate(curves)) == best_fast
    turns = interleaved(AshaPruner(max_epochs=8, brackets=3), curves, starts)
    assert turns[5] == 8  # slow, bracket 2: first judged after epoch 4, where it leads
    assert min(min(c[:turns[n]]) for n, c in enumerate(curves)) < best_fast
    # the best fast learner still passes rungs 1 and 2, until the slow learner, better at
    # rung 4, takes the one place kept there
    assert plain[0] == 8 and 4 <= turns[0] < 8
    # the slow learner of bracket 0 still stops at the first rung
    assert turns[3] == 1
