"""A worker's in-memory copy of a trial's latest checkpoint: used only while it is stored."""

from __future__ import annotations

import pytest
import torch

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import checkpoint_key, create_study, load_checkpoint, replay_trial
from hoptune.tasks.study._inline import run_inline
from hoptune.tasks.study._workflow import tune_step
from hoptune.tasks.worker._checkpoint import Checkpoint, LatestCheckpoints, save_checkpoint


def _checkpoint(value: float) -> Checkpoint:
    return Checkpoint(model={"w": torch.full((3,), value)}, optimizer={}, samples=3, loss=value)


def test_a_kept_checkpoint_is_taken_once_while_the_store_holds_the_same(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest = LatestCheckpoints(limit=2)
    first = _checkpoint(1.0)
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", first), first)
    assert latest.take(store, 7, "b.pt") is None  # another hop's checkpoint: not this one
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", first), first)
    assert latest.take(store, 7, "a.pt") is first
    assert latest.take(store, 7, "a.pt") is None  # handed out once: its tensors train on
    assert (latest.hits, latest.misses) == (1, 2)


def test_a_copy_the_store_no_longer_holds_is_never_used(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest = LatestCheckpoints(limit=2)
    mine = _checkpoint(1.0)
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", mine), mine)
    save_checkpoint(store, "a.pt", _checkpoint(2.0))  # the hop ran again elsewhere
    assert latest.take(store, 7, "a.pt") is None
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", mine), mine)
    store.delete("a.pt")  # set aside as unreadable
    assert latest.take(store, 7, "a.pt") is None


def test_the_memory_is_bounded_and_can_be_off(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest = LatestCheckpoints(limit=1)
    for trial in (1, 2):
        c = _checkpoint(float(trial))
        latest.keep(trial, f"{trial}.pt", save_checkpoint(store, f"{trial}.pt", c), c)
    assert latest.take(store, 1, "1.pt") is None and latest.take(store, 2, "2.pt") is not None
    off = LatestCheckpoints(limit=0)
    c = _checkpoint(1.0)
    off.keep(1, "1.pt", save_checkpoint(store, "1.pt", c), c)
    assert off.take(store, 1, "1.pt") is None


@pytest.mark.integration
def test_hops_from_memory_give_bitwise_the_weights_of_hops_from_the_store(make_config,
                                                                          rt) -> None:
    region = load_config(make_config(shards=2, epochs=2)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    torch.set_num_threads(1)
    finals = []
    for limit in (16, 0):
        rt.latest = LatestCheckpoints(limit=limit)
        study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
        run_inline(rt, tune_step(rt, study))
        (trial,) = rt.db.trials(study)
        assert trial.state == "done"
        # one process: every hop but the first found its input in memory, or none did
        assert rt.latest.hits == (3 if limit else 0)
        finals.append(load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1)).model)
        replayed = replay_trial(rt, trial.id)
        for name, tensor in finals[-1].items():
            assert torch.equal(tensor, replayed[name]), name
    for name in finals[0]:
        assert torch.equal(finals[0][name], finals[1][name]), name
