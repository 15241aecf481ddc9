"""Everything stops at once (workers, the command, the Redis server): the study still completes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from celery import Celery

from hoptune.tasks.cli._cluster import LocalCluster
from hoptune.tasks.worker._broker import EmbeddedRedis, redis_client
from hoptune.tuner import HopRecords

pytestmark = pytest.mark.integration


def _tune(home: Path, redis_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url, "HOPTUNE_LIVENESS_SECONDS": "4",
           "HOPTUNE_RESEND_SECONDS": "3"}
    return subprocess.Popen([sys.executable, "-m", "hoptune.tasks.cli", "tune", "north",
                             "--no-progress"], cwd=home, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait(condition, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@contextmanager
def own_broker(folder: Path) -> Iterator[list[EmbeddedRedis]]:
    """A Redis server of this test alone (it gets killed); the list holds the live one."""
    servers = [EmbeddedRedis(folder).start()]
    try:
        yield servers
    finally:
        servers[-1].stop()


def _workers(server: EmbeddedRedis, home: Path) -> LocalCluster:
    """Two workers on ``server``, once they answer."""
    workers = LocalCluster({"north": 2}, 2, env={"HOPTUNE_BROKER_URL": server.url},
                           log_dir=home / "logs", loglevel="INFO")
    workers.start()
    # kombu pools connections by URL and options across apps: one pool per server process,
    # so no connection to a killed server is reused
    options = {"hoptune_test_server": server.process.pid}
    workers.wait_ready(Celery("probe", broker=server.url, broker_transport_options=options))
    return workers


def test_study_survives_killing_workers_command_and_redis(make_config, rt, home) -> None:
    """Workers, the command and the Redis server SIGKILLed at once; Redis restarts empty."""
    make_config(shards=2, epochs=3, trials=6, parallel=2, rows=6000, batch_size=16)
    with own_broker(home / "broker") as servers:
        url = servers[0].url
        workers = _workers(servers[0], home)
        try:
            command = _tune(home, url)

            def mid_study() -> bool:
                studies = rt.db.studies()
                return bool(studies) and HopRecords(rt.db).done_count(studies[0].id) >= 5
            _wait(mid_study, 120, "the study to get going")
            (study,) = rt.db.studies()
            assert study.state == "running"

            # everything dies at once; the broker comes back without a single message
            redis_pid = servers[0].process.pid
            for pid in [p.pid for p in workers.processes] + [command.pid, redis_pid]:
                os.killpg(pid, signal.SIGKILL)
            for process in [*workers.processes, command, servers[0].process]:
                process.wait()
            workers.processes = []
            for data in (home / "broker").glob("appendonly*"):  # a file, or a folder (Redis 7)
                if data.is_dir():
                    shutil.rmtree(data)
                else:
                    data.unlink()
            servers.append(EmbeddedRedis(home / "broker").start())
            assert servers[-1].process.pid != redis_pid
            assert redis_client(url, 5.0).dbsize() == 0
        finally:
            workers.stop()
        before = {t.id: t for t in rt.db.trials(study.id)}
        assert any(t.state == "running" for t in before.values())  # work was in flight

        workers = _workers(servers[-1], home)
        try:
            resumed = _tune(home, url)
            output, _ = resumed.communicate(timeout=300)
        finally:
            workers.stop()
        assert resumed.returncode == 0, output
        assert f"resuming study {study.id}" in output

        record = rt.db.study(study.id)
        assert record.state == "done"
        assert len(rt.db.studies()) == 1
        trials = rt.db.trials(study.id)
        assert [t.number for t in trials] == list(range(6))  # budget spent, none lost
        assert len({tuple(sorted(t.params.items())) for t in trials}) == 6  # none twice
        assert set(before) <= {t.id for t in trials}
        for t in trials:
            assert t.state in ("done", "pruned"), t
            epochs = rt.db.epochs(t.id)
            assert [e.epoch for e in epochs] == list(range(t.epochs_done))
            assert all(e.metric is not None for e in epochs)
            if t.state == "done":
                assert t.epochs_done == 3
            hops = HopRecords(rt.db).all(t.id)
            assert all(h.state == "done" for h in hops)
            per_epoch = Counter(h.epoch for h in hops)
            assert all(per_epoch[e.epoch] == 2 for e in epochs)
            for e in epochs:
                assert sorted(h.shard for h in hops if h.epoch == e.epoch) == [0, 1]


def test_resuming_leaves_alone_the_trials_a_live_worker_is_running(make_config, rt, cluster,
                                                                   redis_url) -> None:
    from hoptune.core import Store
    from hoptune.regions import ingest, load_config
    from hoptune.tasks import app, create_study
    from hoptune.tasks.cli._follow import start_studies
    from hoptune.tasks.study._sweeper import sweep

    region = load_config(make_config(shards=2, epochs=6, trials=1, parallel=1, rows=8000,
                                     batch_size=4)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    cluster({"north": 2}, workers=2)
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.01}])
    start_studies(app, [study])
    _wait(lambda: any(h.state == "running" for h in HopRecords(rt.db).all(study_id=study)), 60,
          "a hop to start")
    (trial,) = rt.db.trials(study)
    # the hop's holder beats: a resuming sweep sends nothing behind a live worker's back
    running = [h for h in HopRecords(rt.db).all(study_id=study) if h.state == "running"]
    sent = {(d.kwargs["epoch"], d.kwargs["position"])
            for d in sweep(rt, app, study, resend_after=0.0) if d.task == "hoptune.hop"}
    assert running and all((h.epoch, h.position) not in sent for h in running
                           if HopRecords(rt.db).get(trial.id, h.epoch, h.position).state
                           == "running")
    assert all(h.holder is not None and h.interrupted == 0 for h in running)
    assert rt.db.trial(trial.id).state == "running"
