"""A hop whose next shard this worker owns runs that hop next (``go_on_here``), without Celery.

The same plain functions the hop task calls; what it would send is collected instead.
"""

from __future__ import annotations

import time

import pytest
import torch

from hoptune.core import ConfigError, Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import create_study, run_hop
from hoptune.tasks.study import go_on_here
from hoptune.tasks.study._chain import owned_here
from hoptune.tasks.study._workflow import tune_step
from hoptune.tasks.worker import RETRY_SECONDS, chain_seconds, hop_dispatch, tune_step_dispatch
from hoptune.tuner import HopRecords


def _first_hop(make_config, rt, **kw):  # noqa: ANN001, ANN202
    torch.set_num_threads(1)
    region = load_config(make_config(**kw)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
    (first,) = tune_step(rt, study)
    k = first.kwargs
    return study, run_hop(rt, k["trial"], k["epoch"], k["position"])


class Sent(list):
    def __call__(self, dispatches, countdown=None) -> None:  # noqa: ANN001
        self.extend((d, countdown) for d in dispatches)


def test_a_worker_owning_every_shard_runs_the_whole_trial_here(make_config, rt,
                                                               monkeypatch) -> None:
    monkeypatch.setenv("HOPTUNE_WORKER_SHARDS", "north:0,north:1")
    study, report = _first_hop(make_config, rt, shards=2, epochs=2)
    sent = Sent()
    here = go_on_here(rt, report, sent, started=time.monotonic(), seconds=600)
    # the other 3 hops of 2 epochs over 2 shards ran here; only the trial's end was sent
    assert [(r.epoch, r.position, r.trained) for r in here] == [
        (0, 1, True), (1, 0, True), (1, 1, True)]
    assert sent == [(tune_step_dispatch(study), None)]
    (trial,) = rt.db.trials(study)
    assert trial.state == "done" and trial.epochs_done == 2
    assert all(h.state == "done" and h.worker == "test" for h in HopRecords(rt.db).all(trial.id))


def _second(rt, study):  # noqa: ANN001, ANN202
    """The trial's second hop's message, and the shard of its first."""
    (trial,) = rt.db.trials(study)
    order = rt.db.epoch(trial.id, 0).visit_order
    return trial, hop_dispatch("north", study, trial.id, 0, 1, order[1]), order[0]


def test_a_hop_on_a_shard_another_worker_owns_is_sent(make_config, rt, monkeypatch) -> None:
    study, report = _first_hop(make_config, rt, shards=2, epochs=2)
    trial, second, first_shard = _second(rt, study)
    monkeypatch.setenv("HOPTUNE_WORKER_SHARDS", f"north:{first_shard}")
    sent = Sent()
    assert go_on_here(rt, report, sent, started=time.monotonic(), seconds=600) == []
    assert sent == [(second, None)]
    assert HopRecords(rt.db).get(trial.id, 0, 1).state == "queued"


def test_a_chain_past_its_seconds_sends_the_next_hop(make_config, rt, monkeypatch) -> None:
    monkeypatch.setenv("HOPTUNE_WORKER_SHARDS", "north:0,north:1")
    study, report = _first_hop(make_config, rt, shards=2, epochs=2)
    sent = Sent()
    monkeypatch.setenv("HOPTUNE_CHAIN_SECONDS", "0")  # chaining off
    assert go_on_here(rt, report, sent, started=time.monotonic()) == []
    assert sent == [(_second(rt, study)[1], None)]


def test_a_hop_run_here_that_fails_once_is_sent_to_try_again_after_the_pause(
        make_config, rt, monkeypatch) -> None:
    from hoptune.tasks.study import _chain

    monkeypatch.setenv("HOPTUNE_WORKER_SHARDS", "north:0,north:1")
    study, report = _first_hop(make_config, rt, shards=2, epochs=2)
    real = _chain.run_hop

    def failing_once(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        monkeypatch.setattr(_chain, "run_hop", real)
        out = real(*args, **kwargs)
        out.retry = True
        return out

    monkeypatch.setattr(_chain, "run_hop", failing_once)
    sent = Sent()
    here = go_on_here(rt, report, sent, started=time.monotonic(), seconds=600)
    assert [(r.epoch, r.position) for r in here] == [(0, 1)]
    assert sent == [(_second(rt, study)[1], RETRY_SECONDS)]


def test_owned_here_follows_the_worker_shards(monkeypatch) -> None:
    hop = hop_dispatch("north", 1, 2, 0, 1, 1)
    monkeypatch.delenv("HOPTUNE_WORKER_SHARDS", raising=False)
    assert owned_here(hop)  # a worker started without shards owns every one
    monkeypatch.setenv("HOPTUNE_WORKER_SHARDS", "north:0,south:1")
    assert not owned_here(hop)
    assert owned_here(hop_dispatch("south", 1, 2, 0, 1, 1))
    assert not owned_here(tune_step_dispatch(1))


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_chain_seconds_refuses_what_is_not_seconds(monkeypatch, value) -> None:
    monkeypatch.setenv("HOPTUNE_CHAIN_SECONDS", value)
    with pytest.raises(ConfigError, match="HOPTUNE_CHAIN_SECONDS"):
        chain_seconds()


def test_chain_seconds_default(monkeypatch) -> None:
    monkeypatch.delenv("HOPTUNE_CHAIN_SECONDS", raising=False)
    assert chain_seconds() == 1.0
