"""What the planner reads from recorded studies besides hop costs: hand-built histories."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

import hoptune.tasks.plan._history
from hoptune.regions import load_config
from hoptune.tasks.plan._history import Shape, design_left, median_gaps, pruning_record
from hoptune.tuner import EpochRow, HopRow, StudyRow, TrialRow, parse_space
from tests.rows import epoch_row, hop_row, study_row, trial_row

T0 = datetime(2026, 11, 24, 1, 0, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class History:
    """The reads ``median_gaps`` makes of a study database and its hop records, over rows
    built by hand (``hop_records`` stands in for ``HopRecords``)."""

    def __init__(self) -> None:
        self.studies: dict[int, StudyRow] = {}
        self.trial_rows: dict[int, list[TrialRow]] = {}
        self.hop_rows: dict[int, list[HopRow]] = {}
        self.validation = True  # an epoch's validation ends with its last hop

    def trials(self, study_id: int) -> list[TrialRow]:
        return self.trial_rows[study_id]

    def all(self, *, study_id: int) -> list[HopRow]:
        return self.hop_rows[study_id]

    def epoch(self, trial_id: int, epoch: int) -> EpochRow:
        (hop,) = [h for hops in self.hop_rows.values() for h in hops
                  if h.trial_id == trial_id and h.epoch == epoch and h.position == 0]
        return epoch_row(trial_id=trial_id, epoch=epoch,
                         finished_at=hop.finished_at if self.validation else None)

    def add(self, region: dict[str, Any], space: dict[str, Any], parent: int | None,
            gaps: list[float], proposed: list[float | None] | None = None) -> StudyRow:
        """A study of one shard, one epoch, one trial at a time on one worker: trial 0 at
        once, trial i's first hop ``gaps[i - 1]`` seconds after trial i - 1 ended (its
        ``tune_step`` created it right at that end, having worked ``proposed[i]`` seconds,
        None: not recorded); each hop lasts a second."""
        sid = len(self.studies) + 1
        study = study_row(id=sid, space=space, parent_id=parent, minimize=True,
                          region_config=region, created_at=at(0))
        trials, hops, now = [], [], 0.0
        for i in range(len(gaps) + 1):
            created = now
            now += gaps[i - 1] if i else 0.0
            tid = sid * 100 + i
            hops.append(hop_row(trial_id=tid, epoch=0, position=0, worker="w0", state="done",
                                queued_at=at(now), started_at=at(now),
                                finished_at=at(now + 1.0)))
            now += 1.0
            trials.append(trial_row(id=tid, study_id=sid, state="done", created_at=at(created),
                                    proposal_seconds=proposed[i] if proposed else None,
                                    finished_at=at(now),
                                    params={"lr": 0.01 + i / 1000, "embedding_dim": 8},
                                    best_metric=1.0 - i / 100, last_metric=1.0 - i / 100))
        self.studies[sid], self.trial_rows[sid], self.hop_rows[sid] = study, trials, hops
        return study


@pytest.fixture(autouse=True)
def _hop_records_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HopRecords(db)`` over a ``History`` is the history itself."""
    monkeypatch.setattr(hoptune.tasks.plan._history, "HopRecords", lambda db: db)


@pytest.fixture
def region(make_config) -> dict[str, Any]:  # noqa: ANN001 - the configuration fixture
    return load_config(make_config()).region("north").model_dump(mode="json")


def test_a_trial_start_is_a_design_points_until_the_optimizer_has_its_initial_results(
        region) -> None:
    space = parse_space(region["space"], "space")
    assert space.initial_points == 6  # two dimensions
    db = History()
    # trials 1 to 5 are proposed with 1 to 5 results known: points of the initial design;
    # trials 6 and 7 with 6 and 7: from the model
    study = db.add(region, space.to_json(), None, [0.01, 0.02, 0.01, 0.03, 0.01, 0.2, 0.4])
    gaps = median_gaps(db, [study])
    assert (gaps.start, gaps.start_model) == (0.01, pytest.approx(0.3))
    assert gaps.turnaround == 0.0  # every hop's message came after its worker's last hop
    assert design_left(db, space, None, minimize=True, select="best") == 6
    assert design_left(db, space, None, minimize=True, select="best", told=4) == 2

    # warm-started from it: its parent's 8 results count, so every proposal is the model's
    child = db.add(region, space.to_json(), study.id, [0.2, 0.1, 0.3])
    assert design_left(db, space, study.id, minimize=True, select="best") == 0
    gaps = median_gaps(db, [child])
    assert gaps.start_model == pytest.approx(0.2)
    assert gaps.start == 0.0  # none recorded

    # with no model proposal recorded, a model's start is taken to cost a design point's
    gaps = median_gaps(db, [db.add(region, space.to_json(), None, [0.05, 0.07])])
    assert gaps.start == gaps.start_model == pytest.approx(0.06)

    # a fixed configuration (no space) proposes nothing
    assert design_left(db, None, None, minimize=True, select="best") is None


def test_a_trial_start_is_its_tune_steps_recorded_work_between_two_messages(region) -> None:
    """Where the tune_steps recorded their work, a start is that work (one figure per step,
    the study's first step aside) and two messages, whatever the hops' gaps say: a step
    that ran on another worker than the first hop hid its work from them."""
    space = parse_space(region["space"], "space")
    db = History()
    # trials 1 to 5 from the initial design, 6 to 9 from the model; 6 and 7 one step's
    study = db.add(region, space.to_json(), None, [0.01] * 9,
                   proposed=[9.0, 0.01, 0.02, 0.01, 0.03, 0.01, 0.15, 0.15, 0.45, 0.5])
    trials = db.trial_rows[study.id]
    trials[7] = replace(trials[7], created_at=trials[6].created_at)
    gaps = median_gaps(db, [study])
    assert gaps.dispatch == 0.0  # one shard: no hand-on between hops
    assert (gaps.start, gaps.start_model) == (0.01, pytest.approx(0.45))  # not 0.3: 4 steps
    # two shards: each start adds its tune_step's message and its first hop's
    hops = db.hop_rows[study.id]
    for trial in trials:
        first = next(h for h in hops if h.trial_id == trial.id)
        hops.append(replace(first, position=1, worker="w1", queued_at=first.finished_at,
                            started_at=first.finished_at + timedelta(seconds=0.004),
                            finished_at=first.finished_at + timedelta(seconds=0.5)))
    study = replace(study, region_config={**region, "shards": 2})
    db.validation = False
    gaps = median_gaps(db, [study])
    assert gaps.dispatch == pytest.approx(0.004)
    assert gaps.start == pytest.approx(0.018) and gaps.start_model == pytest.approx(0.458)


def test_a_workers_turnaround_is_counted_where_its_next_hops_message_waited(region) -> None:
    space = parse_space(region["space"], "space")
    db = History()
    study = db.add(region, space.to_json(), None, [0.01, 0.01, 0.01])
    hops = db.hop_rows[study.id]
    # the messages of hops 2 and 3 were waiting while hops 1 and 2 ran: their gaps count
    hops[2] = replace(hops[2], queued_at=hops[1].started_at)
    hops[3] = replace(hops[3], queued_at=hops[1].finished_at)
    assert median_gaps(db, [study]).turnaround == pytest.approx(0.01)
    hops[3] = replace(hops[3], started_at=hops[3].started_at + timedelta(seconds=0.02),
                      finished_at=hops[3].finished_at + timedelta(seconds=0.02))  # 0.03 s
    assert median_gaps(db, [study]).turnaround == pytest.approx(0.02)


def test_a_gap_counts_from_when_its_worker_was_free_of_other_regions_hops_too(region) -> None:
    """A region planned alone after a night of several: between two hops of one of its
    trials, the worker ran another region's hop; that was work, not the hand-on's gap."""
    space = parse_space(region["space"], "space")
    db = History()
    db.validation = False
    north = replace(db.add(region, space.to_json(), None, []),
                    region_config={**region, "shards": 2}, finished_at=at(2.5))
    south = replace(db.add({**region, "name": "south"}, space.to_json(), None, []),
                    finished_at=at(3.0))
    first = db.hop_rows[north.id][0]  # 0 to 1 s on w0
    # south's hop held w0 from 1.0 to 1.5 s; north's second hop waited for it, 0.01 s more
    db.hop_rows[south.id] = [replace(db.hop_rows[south.id][0], queued_at=at(0.5),
                                     started_at=at(1.0), finished_at=at(1.5))]
    db.hop_rows[north.id].append(replace(first, position=1, queued_at=at(1.0),
                                         started_at=at(1.51), finished_at=at(2.5)))
    assert median_gaps(db, [north]).dispatch == pytest.approx(0.51)  # south unseen
    assert median_gaps(db, [north], beside=[north, south]).dispatch == pytest.approx(0.01)
    # south's hops tell when w0 was free, and are not sampled: its turnaround is not north's
    assert median_gaps(db, [north], beside=[south]).turnaround == pytest.approx(0.01)
    # a study that ran at another time does not hold the worker
    later = replace(south, created_at=at(100.0), finished_at=at(101.0))
    assert median_gaps(db, [north], beside=[later]).dispatch == pytest.approx(0.51)


def test_a_pruning_record_counts_the_epochs_its_finished_trials_trained(region) -> None:
    """Two studies that pruned as many trials train different epochs when one was pruned
    later (judged again at a rung it had passed): the record holds what they trained, and
    the trend fitted on it is what the plan's hops follow."""
    from hoptune.tasks.plan._synthetic import _epochs_per_trial, _trend

    space = parse_space(region["space"], "space").to_json()
    region = {**region, "pruner": {"reduction_factor": 2, "min_epochs": 1, "recheck": True}}
    db = History()

    def study(sid: int, epochs_done: list[int], **fields: Any) -> StudyRow:
        row = study_row(**{"id": sid, "space": space, "region_config": region, "budget": 4,
                           "parallel": 2, "epochs": 3, "manifest": {"rows": [10, 10]},
                           **fields})
        states = ["done" if e == 3 else "pruned" for e in epochs_done]
        db.studies[sid] = row
        db.trial_rows[sid] = [trial_row(id=sid * 100 + i, study_id=sid, state=s, epochs_done=e)
                              for i, (s, e) in enumerate(zip(states, epochs_done, strict=True))]
        return row

    early = study(1, [3, 1, 1, 3])
    late = study(2, [3, 2, 2, 3])
    running = study(3, [3, 1, 3, 3])  # its last trial is still running: only 3 count
    db.trial_rows[3][-1] = replace(db.trial_rows[3][-1], state="running", epochs_done=1)
    untuned = study(4, [3, 3], space=None)  # a fixed configuration has no rungs to learn from
    calibration = study(5, [1, 1], kind="calibration")
    shape = Shape(4, 2, 3, 2, 2, 1, True)
    assert pruning_record(db, [early, late, running, untuned, calibration]) == [
        (shape, 4, 8), (shape, 4, 10), (shape, 3, 7)]
    # recorded before the pruner judged trials again (no such field): it did not, then
    older = study(6, [3, 1, 1, 3], region_config={
        **region, "pruner": {"reduction_factor": 2, "min_epochs": 1}})
    assert pruning_record(db, [older]) == [(Shape(4, 2, 3, 2, 2, 1, False), 4, 8)]
    # as many pruned, later: a stronger trend, and its simulated epochs the nearer to 10
    slow, fast = _trend([(shape, 4, 8)]), _trend([(shape, 4, 10)])
    assert slow < fast
    assert abs(_epochs_per_trial(shape, fast) * 4 - 10) <= abs(
        _epochs_per_trial(shape, slow) * 4 - 10)
