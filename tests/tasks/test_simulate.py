"""The simulator on hand-built inputs with exact answers, running the cluster's own policies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hoptune import tuner
from hoptune.tasks.hop import _visit_order
from hoptune.tasks.plan._simulate import (
    SimStudy,
    assign_shards,
    hop_seconds_from,
    simulate,
    worker_shards,
)
from hoptune.tasks.study import _workflow
from hoptune.tuner import AshaPruner, CostKey, HopCost


def one_second(rows: int) -> float:
    return rows / 100  # every test shard has 100 rows: a hop is one second


def test_one_worker_and_one_shard_is_a_sum() -> None:
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=3, parallel=2, epochs=2)
    result = simulate([study], 1, validation=0.5)
    # 3 trials x 2 epochs x 1 shard hops of 1 s, each the epoch's last (a validation)
    assert result.hops == 6
    assert result.wall_seconds == 6 * 1.0 + 6 * 0.5
    assert result.busy_share == {"w0": 1.0}
    assert result.trials == {"north": {"done": 3}}


def test_one_trial_at_a_time_waits_for_every_message() -> None:
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=3, parallel=1, epochs=2)
    result = simulate([study], 1, validation=0.5, dispatch=0.25)
    # 6 hops, each a message, a second and a validation; each trial's end a tune_step
    # message (that starts the next trial, or, the last, records the study's end)
    assert result.wall_seconds == 6 * (0.25 + 1.0 + 0.5) + 3 * 0.25
    assert result.dispatch_seconds == (6 + 3) * 0.25
    assert result.busy_share["w0"] == 9.0 / 11.25


def test_a_trial_ending_on_a_spent_budget_while_another_runs_sends_no_tune_step() -> None:
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=2, parallel=2, epochs=1)
    result = simulate([study], 1, dispatch=0.25)
    # 2 hops, each a message; the first trial to end leaves the other running with the
    # budget spent, so only the last one's end sends a tune_step (``tune_step_after_end``)
    assert result.dispatch_seconds == (2 + 1) * 0.25
    assert result.trials == {"north": {"done": 2}}


def test_two_shards_on_two_workers_with_equal_hops_take_half() -> None:
    study = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=4, parallel=2,
                     epochs=3)
    alone = simulate([study], 1)
    pair = simulate([study], 2)
    assert alone.hops == pair.hops == 4 * 3 * 2
    assert alone.wall_seconds == 24.0
    assert pair.wall_seconds == alone.wall_seconds / 2
    assert pair.busy_share == {"w0": 1.0, "w1": 1.0}
    assert pair.longest_backlog == 1


def test_a_pruned_trial_stops_at_its_rung() -> None:
    pruner = AshaPruner(reduction_factor=2, min_epochs=1, max_epochs=3)  # rungs after 1 and 2
    assert pruner.rungs() == (1, 2)
    study = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=2, parallel=1,
                     epochs=3, pruner=pruner, metric=lambda trial, epoch: float(trial))
    result = simulate([study], 1)
    # trial 0 (the better) trains 3 epochs; trial 1 is worse at rung 1 and stops after epoch 1
    assert result.trials == {"north": {"done": 1, "pruned": 1}}
    assert result.hops == (3 + 1) * 2
    assert result.wall_seconds == 8.0
    unpruned = simulate([SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=2,
                                  parallel=1, epochs=3, metric=lambda t, e: float(t))], 1)
    assert unpruned.hops == 2 * 3 * 2


def test_a_trial_is_judged_from_its_brackets_first_rung_as_the_workflow_judges_it() -> None:
    # the same worse trial 1, in bracket 1 of 2: first judged after epoch 2, where it is worse
    pruner = AshaPruner(reduction_factor=2, min_epochs=1, max_epochs=3, brackets=2)
    study = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=2, parallel=1,
                     epochs=3, pruner=pruner, metric=lambda trial, epoch: float(trial))
    result = simulate([study], 1)
    assert result.trials == {"north": {"done": 1, "pruned": 1}}
    assert result.hops == (3 + 2) * 2
    # in bracket 2 (first rung after epoch 4, past the last), it trains to the end
    three = simulate([replace(study, pruner=replace(pruner, brackets=3), budget=3)], 1)
    assert three.trials == {"north": {"done": 2, "pruned": 1}}
    assert three.hops == (3 + 2 + 3) * 2


def test_shards_are_owned_round_robin_and_spare_workers_replicate() -> None:
    # a region of one shard (task parallelism) is held by every worker, not by the first
    assert assign_shards({"a": 2, "b": 1}, 2) == {("a", 0): ["w0"], ("a", 1): ["w1"],
                                                  ("b", 0): ["w0", "w1"]}
    assert assign_shards({"a": 2}, 3) == {("a", 0): ["w0", "w2"], ("a", 1): ["w1"]}
    assert assign_shards({"a": 3}, 2) == {("a", 0): ["w0"], ("a", 1): ["w1"], ("a", 2): ["w0"]}
    # local clusters place shards by the same rule, per worker
    assert worker_shards({"a": 2, "b": 1}, 2) == [[("a", 0), ("b", 0)], [("a", 1), ("b", 0)]]


def test_hops_last_as_the_fitted_cost_says() -> None:
    cost = HopCost(CostKey("rating_mf", "cpu", "x"), overhead=0.5, per_row=0.01,
                   per_row_batch=0.0, per_row_param=0.0, hops=2, outliers=0, error=0.0,
                   spread=0.0)
    seconds = hop_seconds_from(cost, batch_size=64, parameters=10)
    study = SimStudy("north", rows=[100, 300], hop_seconds=seconds, budget=1, parallel=1,
                     epochs=1)
    assert simulate([study], 1).wall_seconds == (0.5 + 1.0) + (0.5 + 3.0)


def test_the_simulator_runs_the_clusters_own_policies(monkeypatch) -> None:
    # the functions spied on are the very ones the cluster's workflow and database call
    from hoptune.tasks import hop
    from hoptune.tuner import _hop_records

    assert _workflow.choose_visit_order is _visit_order.choose_visit_order \
        is hop.choose_visit_order
    assert _workflow.first_shards is tuner.first_shards
    assert _hop_records.next_shard is tuner.next_shard
    assert _hop_records.placed_order is tuner.placed_order
    calls: dict[str, int] = {}

    def spy(name: str, original):  # noqa: ANN001, ANN202
        def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[name] = calls.get(name, 0) + 1
            return original(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(hop, "choose_visit_order", spy("visit", hop.choose_visit_order))
    for name in ("first_shards", "next_shard", "placed_order"):
        monkeypatch.setattr(tuner, name, spy(name, getattr(tuner, name)))
    monkeypatch.setattr(AshaPruner, "should_stop", spy("prune", AshaPruner.should_stop))
    pruner = AshaPruner(reduction_factor=2, min_epochs=1, max_epochs=3)
    study = SimStudy("north", rows=[100, 100, 100], hop_seconds=one_second, budget=4,
                     parallel=2, epochs=3, pruner=pruner)
    result = simulate([study], 2)
    epochs = result.hops // 3  # every epoch starts with a visit order and ends in a decision
    assert calls["visit"] == calls["first_shards"] == epochs
    assert calls["next_shard"] == epochs  # one choice per epoch: its second of three shards
    assert calls["placed_order"] == 2 * epochs
    # the last epoch ends "done" without asking the pruner
    assert calls["prune"] == epochs - result.trials["north"].get("done", 0)


def test_a_study_under_way_goes_on_from_where_its_trials_stand() -> None:
    # one worker, two shards of 1 s hops, 2 epochs: a trial is 4 hops from its start
    fresh = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=3, parallel=2,
                     epochs=2)
    assert simulate([fresh], 1).wall_seconds == 12.0
    # trial 0 has done its first epoch and one hop of its second: 1 hop left; trial 1 has
    # done one hop: 3 left; one trial is still to start: 4 hops
    under_way = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=3,
                         parallel=2, epochs=2, in_flight=[(1, 1), (0, 1)])
    result = simulate([under_way], 1)
    assert result.hops == 1 + 3 + 4
    assert result.wall_seconds == 8.0
    assert result.trials == {"north": {"done": 3}}


def test_a_trial_in_flight_past_a_rung_is_judged_again_there_with_its_own_value() -> None:
    # rungs after epochs 1 and 2; trial 0 is in flight at epoch 2 (it passed rung 1 before the
    # plan), trial 1 in flight at epoch 1: judged again at rung 1 with recheck, each needs the
    # values the trials in flight left there, its own included (a plan once failed here)
    pruner = AshaPruner(reduction_factor=2, min_epochs=1, max_epochs=4, recheck=True)
    assert pruner.rungs() == (1, 2)
    under_way = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=4,
                         parallel=2, epochs=4, pruner=pruner, in_flight=[(2, 0), (1, 1)],
                         metric=lambda trial, epoch: float(trial))
    result = simulate([under_way], 1)
    # trial 0 (the best) finishes; the worse ones stop at a rung
    assert result.trials["north"]["done"] >= 1
    assert sum(result.trials["north"].values()) == 4


def test_trials_in_flight_must_fit_the_study() -> None:
    import pytest

    for in_flight, message in [([(2, 0)], "outside 2 epochs"), ([(0, 2)], "outside 2 epochs"),
                               ([(0, 0)] * 4, "more than the budget")]:
        study = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=3,
                         parallel=2, epochs=2, in_flight=in_flight)
        with pytest.raises(ValueError, match=message):
            simulate([study], 1)


def test_a_later_trial_starts_start_seconds_after_its_slot_frees() -> None:
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=3, parallel=1, epochs=1)
    result = simulate([study], 1, dispatch=0.25, start=0.5)
    # the first trial waits for no slot (head 0); the two others' first hops arrive 0.5 s
    # after a slot frees (the tune_step's message, no work left to it, the hop's message);
    # the last trial's end sends the tune_step that ends the study
    assert result.wall_seconds == (0.25 + 1.0) + 2 * (0.5 + 1.0) + 0.25
    slow = simulate([study], 1, dispatch=0.25, start=1.5)  # the tune_step works 1 s
    assert slow.wall_seconds == (0.25 + 1.0) + 2 * (1.5 + 1.0) + 0.25


def test_a_trial_the_optimizers_model_proposes_starts_start_model_seconds_after() -> None:
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=3, parallel=1,
                     epochs=1, design_left=1)
    result = simulate([study], 1, dispatch=0.25, start=0.5, start_model=1.5)
    # one trial ended, the model proposes both later trials: its tune_steps work 1 s each
    assert result.wall_seconds == (0.25 + 1.0) + 2 * (1.5 + 1.0) + 0.25
    later = simulate([replace(study, design_left=2)], 1, dispatch=0.25, start=0.5,
                     start_model=1.5)
    # trial 1 is the initial design's (one result known of two needed), trial 2 the model's
    assert later.wall_seconds == (0.25 + 1.0) + (0.5 + 1.0) + (1.5 + 1.0) + 0.25
    # no space, no model; and without start_model, a model's proposal costs ``start``
    for fixed in (simulate([replace(study, design_left=None)], 1, dispatch=0.25, start=0.5,
                           start_model=1.5), simulate([study], 1, dispatch=0.25, start=0.5)):
        assert fixed.wall_seconds == (0.25 + 1.0) + 2 * (0.5 + 1.0) + 0.25


def test_a_worker_turns_around_after_each_hop_before_its_next_task() -> None:
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=2, parallel=2,
                     epochs=1)
    assert simulate([study], 1).wall_seconds == 2.0
    # trial 1's hop waits from 0 s; the worker takes it half a second after trial 0's hop,
    # then both tune_steps (with no slot left to fill) after trial 1's
    result = simulate([study], 1, turnaround=0.5)
    assert result.wall_seconds == 1.0 + 0.5 + 1.0 + 0.5
    assert result.busy_share == {"w0": 2.0 / 3.0}  # hops only


def test_a_study_s_first_trials_wait_for_its_first_tune_step() -> None:
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=3, parallel=2, epochs=1)
    result = simulate([study], 1, start=0.5, head=2.0)
    # trials 0 and 1 arrive at 2 s and run one after the other; trial 0's tune_step (sent at
    # 3 s) waits for trial 1's hop, then holds the one worker 0.5 s: trial 2 runs from 4.5 s
    # (trial 1's tune_step, with no slot left to fill, takes no time)
    assert result.wall_seconds == 2.0 + 2 * 1.0 + 0.5 + 1.0
    late = simulate([SimStudy("north", rows=[100], hop_seconds=one_second, budget=3,
                              parallel=1, epochs=1)], 1, start=0.5, head=2.0)
    assert late.wall_seconds == 2.0 + 1.0 + 2 * (0.5 + 1.0)


def test_trials_better_and_better_are_never_pruned() -> None:
    pruner = AshaPruner(reduction_factor=2, min_epochs=1, max_epochs=3)

    def study(improving: float) -> SimStudy:
        return SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=8,
                        parallel=1, epochs=3, pruner=pruner, improving=improving)

    assert simulate([study(1.0)], 1).trials == {"north": {"done": 8}}
    assert simulate([study(0.0)], 1).trials["north"].get("pruned", 0) > 0


def test_which_trials_a_rung_keeps_depends_on_the_draw_and_a_plan_averages_draws() -> None:
    from hoptune.tasks.plan._synthetic import ORDERS, mean_result

    pruner = AshaPruner(reduction_factor=2, min_epochs=1, max_epochs=3)
    study = SimStudy("north", rows=[100, 100], hop_seconds=one_second, budget=16, parallel=2,
                     epochs=3, pruner=pruner)
    runs = [simulate([replace(study, draw=d)], 2) for d in range(ORDERS)]
    assert len({r.hops for r in runs}) > 1  # one order of the metrics is one outcome of many
    assert simulate([study], 2) == runs[0]  # draw 0 is the seed's own order
    mean = mean_result(runs)
    assert mean.hops == round(sum(r.hops for r in runs) / ORDERS)
    assert mean.wall_seconds == pytest.approx(sum(r.wall_seconds for r in runs) / ORDERS)
    assert min(r.wall_seconds for r in runs) < mean.wall_seconds < max(r.wall_seconds
                                                                       for r in runs)
    assert mean.longest_backlog == max(r.longest_backlog for r in runs)


def test_the_metrics_trend_is_fitted_on_the_recorded_studies_own_shapes() -> None:
    from hoptune.tasks.plan._history import Shape
    from hoptune.tasks.plan._synthetic import PRIOR_TREND, _epochs_per_trial, _trend

    eight, sixteen = Shape(8, 2, 3, 2, 2, 1), Shape(16, 2, 3, 2, 2, 1)
    # nothing recorded: an optimizer that learns, not metrics in random order
    assert _trend([]) == PRIOR_TREND > 0.0
    # in random order 16 trials train fewer epochs each than 8 (the first at a rung is kept)
    assert _epochs_per_trial(sixteen, 0.0) < _epochs_per_trial(eight, 0.0)
    # later trials better: fewer pruned, more epochs, up to every trial's 3
    assert _epochs_per_trial(sixteen, 0.0) < _epochs_per_trial(sixteen, 0.5) <= 3.0
    each = _epochs_per_trial(eight, 0.0)
    # 8-trial studies that trained as metrics in random order would: a trend that trains as
    # many (small trends barely reorder 8 ranks); 16-trial ones that trained as much: a
    # stronger one, later trials were better
    weak = _trend([(eight, 80, round(each * 80))])
    assert abs(_epochs_per_trial(eight, weak) * 80 - round(each * 80)) <= 1
    assert _epochs_per_trial(eight, weak) < _epochs_per_trial(eight, 0.5)
    assert _trend([(sixteen, 160, round(each * 160))]) > weak
    # a trend recorded is found again, also over studies of both shapes
    record = [(s, n, round(_epochs_per_trial(s, 0.5) * n)) for s, n in ((eight, 80),
                                                                        (sixteen, 160))]
    found = _trend(record)
    assert found == pytest.approx(0.5, abs=0.05)
    assert abs(sum(_epochs_per_trial(s, found) * n - e for s, n, e in record)) <= 2


def test_a_tune_step_proposes_for_the_slots_free_when_it_starts_and_again_if_overtaken() -> None:
    """As ``tune_step`` does: a step records as many trials as slots were free when it read
    the study (a slot freed meanwhile waits for its own step), and a step that another
    overtook while it proposed reads and proposes again, holding its worker twice."""
    study = SimStudy("north", rows=[100], hop_seconds=one_second, budget=4, parallel=2,
                     epochs=1, in_flight=[(0, 0)], design_left=0)  # every step: the model's
    # trial 0 [0, 1]; trial 1 starts after `start` [0.25, 1.25]. Step A (trial 0's end, on w0
    # from 1 to 2) read one free slot and records trial 2 [2, 3]; step B (trial 1's end, on
    # w1 from 1.25) read two, is overtaken at 2.25 and proposes again until 3.25: trial 3
    # [3.25, 4.25]. Step C (trial 2's end, on w0 from 3) is overtaken too and finds none left.
    result = simulate([study], {("north", 0): ["w0", "w1"]}, start=0.25, start_model=1.0)
    assert result.hops == 4
    assert result.wall_seconds == 4.25  # A filling both slots at 2 would end at 3.25
    assert result.trials == {"north": {"done": 4}}
