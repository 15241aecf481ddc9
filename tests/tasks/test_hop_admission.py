"""A hop message is checked against the study database and the worker's shards before its
claim; a copy of a done hop hands on only if its message came before.

In one process, through ``run_hop`` as the hop task calls it (the real-worker side
is tests/faults/test_bad_messages.py and test_duplicates.py).
"""

from __future__ import annotations

import pytest

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import create_study, run_hop
from hoptune.tasks.study._workflow import hand_on, tune_step
from hoptune.tasks.worker import HopMessage
from hoptune.tuner import HopRecords, WorkerRecords


def _first_hop(make_config, rt, regions=("north",)):  # noqa: ANN001, ANN202
    """One trial of ``regions[0]`` (2 shards, 2 epochs) started; its first hop's message."""
    config = load_config(make_config(regions, shards=2, epochs=2, trials=1, parallel=1))
    first = None
    for name in regions:
        region = config.region(name)
        manifest = ingest(region, Store(rt.settings.store_url)).manifest
        study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
        (dispatch,) = tune_step(rt, study)
        first = first or HopMessage(**dispatch.kwargs)
    return first


def _run(rt, m: HopMessage, **kw):  # noqa: ANN001, ANN202
    return run_hop(rt, m.trial, m.epoch, m.position, message=m, **kw)


def test_a_hop_message_the_study_database_does_not_record_so_trains_nothing(make_config,
                                                                          rt) -> None:
    m = _first_hop(make_config, rt, ("north", "east"))
    east = rt.db.studies("east")[0].id
    other = 1 - m.shard
    name = f"hop of trial {m.trial} epoch {m.epoch} position {m.position}"
    refused = {
        (m.region, 999, m.trial, 0, 0, m.shard): f"{name}: no study 999",
        ("east", m.study, m.trial, 0, 0, m.shard):
            f"{name}: study {m.study} is of region north, not east",
        ("east", east, m.trial, 0, 0, m.shard):
            f"{name}: trial {m.trial} is of study {m.study}, not {east}",
        (m.region, m.study, 99999, 0, 0, m.shard):
            "hop of trial 99999 epoch 0 position 0: no trial 99999",
        (m.region, m.study, m.trial, 5, 0, m.shard):
            f"hop of trial {m.trial} epoch 5 position 0: trial {m.trial} has no epoch 5",
        (m.region, m.study, m.trial, 0, 7, m.shard):
            f"hop of trial {m.trial} epoch 0 position 7: an epoch of study {m.study} has "
            f"2 positions",
        (m.region, m.study, m.trial, 0, 1, other):  # recorded in the order, not yet queued
            f"hop of trial {m.trial} epoch 0 position 1: never queued",
        (m.region, m.study, m.trial, 0, 0, other): f"{name}: placed on shard {m.shard}, "
                                                   f"not {other}",
    }
    for fields, reason in refused.items():
        report = _run(rt, HopMessage(*fields))
        assert (report.set_aside, report.trained, report.dispatch) == (reason, False, [])
    assert [h.deliveries for h in HopRecords(rt.db).all(m.trial)] == [0]  # none claimed it
    report = _run(rt, m)
    assert report.trained and report.set_aside is None


def test_a_worker_trains_the_shards_it_owns_and_those_it_was_told_to_take_over(
        make_config, rt, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _first_hop(make_config, rt)
    monkeypatch.setenv("HOPTUNE_WORKER_SHARDS", f"north:{1 - m.shard},east:{m.shard}")
    report = _run(rt, m)
    assert report.set_aside == (
        f"hop of trial {m.trial} epoch 0 position 0: worker {rt.worker} does not own shard "
        f"north:{m.shard} and was not told to take hop.north.{m.shard} over")
    WorkerRecords(rt.db).add_takeover(f"hop.north.{m.shard}", "another@host", "test")
    assert _run(rt, m).set_aside is not None  # another worker's takeover is not this one's
    WorkerRecords(rt.db).add_takeover(f"hop.north.{m.shard}", rt.worker, "test")
    assert _run(rt, m).trained
    monkeypatch.setenv("HOPTUNE_WORKER_SHARDS", f"north:{m.shard}")
    assert _run(rt, m).skipped == "output checkpoint exists"


def test_a_copy_of_a_done_hop_hands_on_only_if_its_message_came_before(make_config,
                                                                       rt) -> None:
    """A fresh copy costs its own delivery; a redelivery (its first delivery may have died
    before sending) sends the successor again while it waits, also across an epoch's end."""
    m = _first_hop(make_config, rt)
    first = _run(rt, m, again=False)
    assert first.trained and len(first.dispatch) == 1
    copy = _run(rt, m, again=False)
    assert (copy.skipped, copy.dispatch) == ("output checkpoint exists", [])
    assert _run(rt, m, again=True).dispatch == first.dispatch

    last = HopMessage(**first.dispatch[0].kwargs)
    ended = _run(rt, last, again=False)
    following = hand_on(rt, ended)  # the epoch's end decides: the next epoch's first hop
    assert [(d.kwargs["epoch"], d.kwargs["position"]) for d in following] == [(1, 0)]
    copy = _run(rt, last, again=False)
    assert (copy.dispatch, copy.epoch_end) == ([], None)
    again = _run(rt, last, again=True)
    assert (again.dispatch, again.epoch_end) == (following, None)
    assert [h.deliveries for h in HopRecords(rt.db).all(m.trial)] == [3, 3, 0]
