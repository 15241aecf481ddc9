"""Model hopping end to end: real Redis, real `celery worker` processes, real store."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from hoptune.core import Store
from hoptune.regions import RegionConfig, ingest, load_config
from hoptune.tasks import (
    app,
    checkpoint_key,
    create_study,
    load_checkpoint,
    replay_trial,
    run_hop,
)
from hoptune.tasks.cli._cluster import LocalCluster
from hoptune.tasks.cli._follow import follow, start_studies
from hoptune.tasks.study._inline import run_inline
from hoptune.tasks.study._workflow import tune_step
from hoptune.tasks.worker import Runtime
from hoptune.tuner import HopRecords
from tests.tasks.configs import CONFIG, FAST_LIVENESS, REGION

# one test process runs them all: the module's shared cluster starts once (--dist loadgroup)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("hopping")]


def _setup(make_config, rt, **kw):  # noqa: ANN001, ANN202
    region = load_config(make_config(**kw)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    return region, manifest


class Shared(NamedTuple):
    """One home, its runtime, and two real workers for the tests of this module that only
    read what workers do (none kills or restarts one): north of 3 shards and 2 epochs, east
    of 2 shards and 1 epoch, each test a study of its own region."""

    rt: Runtime
    workers: LocalCluster
    regions: dict[str, tuple[RegionConfig, dict]]


@pytest.fixture(scope="module")
def shared() -> Iterator[Shared]:
    from hoptune.core import Settings
    from hoptune.regions import write_ratings
    from hoptune.tasks.worker._broker import redis_client

    folder = Path(tempfile.mkdtemp(prefix="hthop-"))
    text = CONFIG.format(shards=3, epochs=2, trials=2, parallel=2, batch_size=128)
    for i, name in enumerate(("north", "east")):
        write_ratings(folder / "data" / f"{name}.csv", n_users=100, n_items=80, n_rows=3000,
                      rank=3, noise=0.3, seed=10 + i)
        text += REGION.format(name=name)
    (folder / "hoptune.toml").write_text(text + "shards = 2\nepochs = 1\n")  # east's own
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOPTUNE_HOME", str(folder))
        mp.chdir(folder)
        broker = os.environ["HOPTUNE_BROKER_URL"]
        redis_client(broker, 5.0).flushdb()
        rt = Runtime(Settings.from_env(), worker="test")
        config = load_config(folder / "hoptune.toml")
        regions = {}
        for name in ("north", "east"):
            region = config.region(name)
            regions[name] = (region, ingest(region, rt.store).manifest)
        # no sweeper resends: each hop execution counted here is one a test sent (on a loaded
        # host a queued hop may wait past a short resend bound, and its resend would count)
        workers = LocalCluster({"north": 3, "east": 2}, 2, log_dir=folder / "logs",
                               loglevel="INFO", env={
                                   "HOPTUNE_BROKER_URL": broker, **FAST_LIVENESS,
                                   "HOPTUNE_RESEND_SECONDS": "600",
                                   "HOPTUNE_TAKEOVER_SECONDS": "600"})
        try:
            workers.start()
            workers.wait_ready(app)
            yield Shared(rt, workers, regions)
        finally:
            workers.stop()
            rt.db.dispose()
            shutil.rmtree(folder, ignore_errors=True)


def test_trials_hop_across_workers_that_own_their_shards(shared: Shared) -> None:
    rt, workers = shared.rt, shared.workers
    region, manifest = shared.regions["north"]
    owner = {name: {k for _, k in owned}
             for name, owned in zip(workers.names, workers.assignment, strict=True)}
    study = create_study(rt, region, manifest=manifest,
                         configs=[{"lr": 0.02}, {"lr": 0.05, "embedding_dim": 4}])
    start_studies(app, [study])
    follow(rt, app, [study], progress=False, timeout=240)

    assert rt.db.study(study).state == "done"
    trials = rt.db.trials(study)
    assert [t.state for t in trials] == ["done", "done"]
    for trial in trials:
        hops = HopRecords(rt.db).all(trial.id)
        assert len(hops) == 2 * 3
        by_epoch = defaultdict(list)
        for hop in hops:
            assert hop.state == "done"
            assert hop.shard in owner[hop.worker], hop  # ran on an owner of its shard
            by_epoch[hop.epoch].append(hop)
        for epoch, record in enumerate(rt.db.epochs(trial.id)):
            assert record.metric is not None
            visited = [h.shard for h in sorted(by_epoch[epoch], key=lambda h: h.position)]
            assert visited == record.visit_order
            assert sorted(visited) == [0, 1, 2]  # every shard exactly once
        # the two workers each trained some of this trial's hops: the model moved
        assert len({h.worker for h in hops}) == 2

        # replaying the recorded visit orders in this process gives bitwise the same weights
        torch.set_num_threads(1)
        replayed = replay_trial(rt, trial.id)
        final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 2)).model
        assert replayed.keys() == final.keys()
        for name in final:
            assert torch.equal(replayed[name], final[name]), name


def test_a_redelivered_hop_does_no_training(make_config, rt) -> None:
    region, manifest = _setup(make_config, rt, shards=2, epochs=2)
    torch.set_num_threads(1)

    def train(duplicate: bool) -> dict[str, torch.Tensor]:
        study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
        (first,) = tune_step(rt, study)
        report = run_hop(rt, first.kwargs["trial"], 0, 0)
        assert report.trained and len(report.dispatch) == 1
        copies = []
        if duplicate:
            again = run_hop(rt, first.kwargs["trial"], 0, 0)
            assert not again.trained
            assert again.skipped == "output checkpoint exists"
            # its successor still waits, and the first hand-on may have been lost: the copy
            # hands on again, and the successor is claimed once whichever arrives first
            assert again.dispatch == report.dispatch
            copies = again.dispatch
        run_inline(rt, report.dispatch + copies)
        trial = rt.db.trial(first.kwargs["trial"])
        assert trial.state == "done"
        hops = HopRecords(rt.db).all(trial.id)
        # each copy hands on to a successor that still waits, once each: (0, 1), then,
        # being the epoch's last, the next epoch's first hop (1, 0); none trains twice
        assert [h.deliveries for h in hops] == ([2, 2, 2, 1] if duplicate else [1, 1, 1, 1])
        assert all(h.interrupted == 0 for h in hops)
        return load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1)).model

    once, twice = train(False), train(True)
    for name in once:
        assert torch.equal(once[name], twice[name]), name


def _hops_run(workers: list[str]) -> int:
    stats = app.control.inspect(destination=workers, timeout=2.0).stats() or {}
    return sum(s.get("total", {}).get("hoptune.hop", 0) for s in stats.values())


def test_a_duplicate_message_to_a_real_worker_changes_nothing(shared: Shared) -> None:
    import time

    rt, workers = shared.rt, shared.workers
    region, manifest = shared.regions["east"]
    earlier = _hops_run(workers.names)  # the hops of this module's other tests
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
    start_studies(app, [study])
    follow(rt, app, [study], progress=False, timeout=180)
    (trial,) = rt.db.trials(study)
    key = checkpoint_key(study, trial.id, 0, 1)
    before = rt.store.read_bytes(key)
    hops_before = HopRecords(rt.db).all(trial.id)
    ran = _hops_run(workers.names)
    assert ran == earlier + 2
    last = hops_before[1]
    app.send_task("hoptune.hop", queue=f"hop.east.{last.shard}", kwargs={
        "region": "east", "study": study, "trial": trial.id, "epoch": 0, "position": 1,
        "shard": last.shard})
    deadline = time.monotonic() + 60
    while _hops_run(workers.names) == ran and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _hops_run(workers.names) == ran + 1  # the worker ran the duplicate, and it
    assert rt.store.read_bytes(key) == before  # wrote nothing,
    assert HopRecords(rt.db).all(trial.id) == hops_before  # recorded nothing,
    assert rt.db.trial(trial.id).state == "done"  # and started no further epoch
    assert len(rt.db.epochs(trial.id)) == 1
