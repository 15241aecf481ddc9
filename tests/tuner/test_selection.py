"""Which epoch counts, and what pruned trials tell the optimizer."""

from __future__ import annotations

from hoptune.tuner import TrialRow, selected_epoch, told
from tests.rows import epoch_row, trial_row


def _trial(state: str, lr: float, last: float, best: float) -> TrialRow:
    return trial_row(state=state, params={"lr": lr, "seed": 1}, last_metric=last,
                     best_metric=best)


def test_the_selected_epoch_is_the_first_best_or_the_last() -> None:
    epochs = [epoch_row(epoch=e, metric=m) for e, m in
              [(0, 3.0), (1, 1.0), (2, 1.0), (3, 2.0), (4, None)]]
    assert selected_epoch(epochs, True, "best") == (1, 1.0)
    assert selected_epoch(epochs, False, "best") == (0, 3.0)
    assert selected_epoch(epochs, True, "last") == (3, 2.0)
    assert selected_epoch([epoch_row(epoch=0, metric=float("nan"))], True, "best") is None


def test_a_pruned_trial_is_told_no_better_than_the_worst_finished_one() -> None:
    trials = [_trial("done", 0.1, 1.2, 1.0), _trial("done", 0.2, 1.5, 1.4),
              _trial("pruned", 0.3, 0.9, 0.9),  # early metric better than finished ones
              _trial("pruned", 0.4, 2.0, 2.0), _trial("running", 0.5, 0.1, 0.1),
              _trial("failed", 0.6, 0.1, 0.1)]
    values = told(trials, ["lr"], minimize=True, select="best")
    assert values == [({"lr": 0.1}, 1.0), ({"lr": 0.2}, 1.4), ({"lr": 0.3}, 1.4),
                      ({"lr": 0.4}, 2.0)]
    # maximised: the worst is the smallest; select="last" reads the last metric
    values = told(trials, ["lr"], minimize=False, select="last")
    assert values == [({"lr": 0.1}, 1.2), ({"lr": 0.2}, 1.5), ({"lr": 0.3}, 0.9),
                      ({"lr": 0.4}, 1.2)]


def test_before_any_trial_finished_pruned_ones_tell_their_own_metrics_in_their_order() -> None:
    trials = [_trial("pruned", 0.1, 0.5, 0.5), _trial("pruned", 0.2, 0.8, 0.8),
              _trial("running", 0.3, 0.1, 0.1)]
    assert [v for _, v in told(trials, ["lr"], minimize=True, select="best")] == [0.5, 0.8]
    assert [v for _, v in told(trials, ["lr"], minimize=False, select="last")] == [0.5, 0.8]


def test_running_trials_tell_what_they_reached_so_far_only_when_asked() -> None:
    trials = [_trial("done", 0.1, 1.2, 1.0), _trial("pruned", 0.3, 0.9, 0.9),
              _trial("running", 0.5, 0.8, 0.7), _trial("pending", 0.6, None, None),
              _trial("running", 0.7, None, None)]  # no epoch ended yet: nothing to tell
    assert ({"lr": 0.5}, 0.7) not in told(trials, ["lr"], minimize=True, select="best")
    values = told(trials, ["lr"], minimize=True, select="best", running=True)
    # the running trial tells its own best epoch so far, not the pruned trials' penalty
    assert values == [({"lr": 0.1}, 1.0), ({"lr": 0.3}, 1.0), ({"lr": 0.5}, 0.7)]
    assert told(trials, ["lr"], minimize=True, select="last", running=True)[2] == (
        {"lr": 0.5}, 0.8)


def test_told_with_epochs_tells_each_result_unpenalised_with_the_epochs_it_took() -> None:
    from hoptune.tuner import told_with_epochs

    trials = [trial_row(state=s, params={"lr": lr, "seed": 1}, last_metric=last,
                        best_metric=best, epochs_done=e)
              for s, lr, last, best, e in [("done", 0.1, 1.2, 1.0, 8), ("pruned", 0.3, 0.9, 0.9, 1),
                                           ("running", 0.5, 0.8, 0.7, 3),
                                           ("pending", 0.6, None, None, 0)]]
    # the pruned trial's 0.9 stands as it is, beside the epoch it was reached in
    assert told_with_epochs(trials, ["lr"], select="best") == [({"lr": 0.1}, 1.0, 8),
                                                                ({"lr": 0.3}, 0.9, 1)]
    assert told_with_epochs(trials, ["lr"], select="last", running=True) == [
        ({"lr": 0.1}, 1.2, 8), ({"lr": 0.3}, 0.9, 1), ({"lr": 0.5}, 0.8, 3)]
