"""A hop trains where its worker's device is: model, optimizer state, batches, cached data.

The same test runs on the CPU here and on a GPU where there is one (marked
``gpu``): the hops go through the real ``run_hop`` of a Runtime configured
with the device, and spies record where every tensor lived while training.
"""

from __future__ import annotations

import os

import pytest
import torch

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import (
    Runtime,
    checkpoint_key,
    create_study,
    load_checkpoint,
    replay_trial,
)
from hoptune.tasks.hop import _hop, _training
from hoptune.tasks.study._inline import run_inline
from hoptune.tasks.study._workflow import tune_step

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda:0", id="cuda", marks=[pytest.mark.gpu, CUDA])]


class Spy:
    """Where the tensors of every training pass lived: batches, weights, optimizer state."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.devices: dict[str, set[str]] = {"batch": set(), "model": set(), "optimizer": set(),
                                             "shard": set()}
        self.passes = 0
        real_gather, real_pass = _training.gather, _hop.train_pass

        def gather(data: dict[str, torch.Tensor], chosen: torch.Tensor) -> dict:
            batch = real_gather(data, chosen)
            self.devices["batch"].update(str(t.device) for t in (chosen, *batch.values()))
            return batch

        def train_pass(region, model, optimizer, data, **kwargs):  # noqa: ANN001, ANN202
            self.devices["shard"].update(str(t.device) for t in data.values())
            done = real_pass(region, model, optimizer, data, **kwargs)
            self.passes += 1
            self.devices["model"].update(str(t.device) for t in model.state_dict().values())
            for state in optimizer.state.values():
                self.devices["optimizer"].update(str(t.device) for k, t in state.items()
                                                 if isinstance(t, torch.Tensor) and k != "step")
            return done

        monkeypatch.setattr(_training, "gather", gather)
        monkeypatch.setattr(_hop, "train_pass", train_pass)


@pytest.mark.parametrize("device", DEVICES)
def test_a_hop_trains_on_the_workers_device(device: str, make_config, home, monkeypatch) -> None:
    torch.set_num_threads(1)
    region = load_config(make_config(shards=2, epochs=2, rows=1200)).region("north")
    rt = Runtime(worker="test", device=torch.device(device))
    try:
        manifest = ingest(region, Store(rt.settings.store_url)).manifest
        spy = Spy(monkeypatch)
        study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.02}])
        run_inline(rt, tune_step(rt, study))
        (trial,) = rt.db.trials(study)
        assert trial.state == "done" and trial.last_metric is not None
        assert spy.passes == 4  # 2 epochs x 2 shards, the later ones from a checkpoint
        expected = str(torch.device(device))
        assert spy.devices == {name: {expected} for name in spy.devices}
        # the shards and the validation set stay cached on the device
        for cached in rt._cache.values():
            assert {str(t.device) for t in cached.values()} == {expected}
        assert {part for _, _, part in rt.cached()} == {"0", "1", "validation"}
        # replaying the recorded hops in one process on the same device is bitwise the same
        replayed = replay_trial(rt, trial.id)
        final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1),
                                rt.device).model
        for name in final:
            assert torch.equal(replayed[name], final[name]), name
    finally:
        rt.db.dispose()
        torch.use_deterministic_algorithms(False)  # as the other tests of this process expect


def test_a_runtime_on_a_gpu_trains_deterministically(home, monkeypatch) -> None:
    """A process that trains on a GPU without being a worker (an inline study, a replay in a
    notebook) sets up what a worker does, through the same function: without deterministic
    algorithms its trials would not replay bitwise (seen on an H200: an inline trial and its
    replay in one process differed)."""
    made_current = []
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        rt = Runtime(worker="test", device=torch.device("cuda", 0))
        assert torch.are_deterministic_algorithms_enabled()
        assert made_current == [torch.device("cuda", 0)]
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")
        rt.db.dispose()
        torch.use_deterministic_algorithms(False)
        rt = Runtime(worker="test", device=torch.device("cpu"))  # nothing changes on the CPU
        assert not torch.are_deterministic_algorithms_enabled()
        rt.db.dispose()
    finally:
        torch.use_deterministic_algorithms(False)


def test_the_data_cache_keeps_only_what_running_studies_use(make_config, home) -> None:
    region = load_config(make_config(shards=2, epochs=1, rows=600)).region("north")
    rt = Runtime(worker="test")
    try:
        store = Store(rt.settings.store_url)
        old = ingest(region, store).manifest
        study = create_study(rt, region, manifest=old, configs=[{"lr": 0.02}])
        rt.shard(old, 0)
        from hoptune.regions import write_ratings

        write_ratings(region.data, n_users=100, n_items=80, n_rows=700, rank=3, noise=0.3,
                      seed=99)
        new = ingest(region, store).manifest
        assert new["hash"] != old["hash"]
        rt.shard(new, 0)  # a running study still uses the old data: both stay
        assert {h for _, h, _ in rt.cached()} == {old["hash"], new["hash"]}
        rt.db.finish_study(study, "failed", failure="test")
        rt.validation(new)  # the next load drops what no running study uses
        assert {(h, part) for _, h, part in rt.cached()} == {(new["hash"], "0"),
                                                              (new["hash"], "validation")}
        rt.shard(new, 0)  # a hit loads nothing, and drops nothing
        assert len(rt.cached()) == 2
    finally:
        rt.db.dispose()
