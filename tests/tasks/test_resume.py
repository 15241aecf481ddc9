"""Everything stops at once (workers, the command, Redis's queues): the study still completes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tasks._broker import _client

pytestmark = pytest.mark.integration


def _tune(home: Path, redis_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HOPTUNE_BROKER_URL": redis_url, "HOPTUNE_STALL_SECONDS": "20"}
    return subprocess.Popen([sys.executable, "-m", "tasks.cli", "tune", "north", "--no-progress"],
                            cwd=home, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait(condition, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_study_survives_killing_workers_command_and_redis(make_config, rt, cluster, home,
                                                          redis_url) -> None:
    make_config(shards=2, epochs=3, trials=6, parallel=2, rows=6000, batch_size=16)
    workers = cluster({"north": 2}, workers=2)
    command = _tune(home, redis_url)

    def mid_study() -> bool:
        studies = rt.db.studies()
        return bool(studies) and rt.db.hops_done(studies[0]["id"]) >= 5
    _wait(mid_study, 120, "the study to get going")
    (study,) = rt.db.studies()
    assert study["state"] == "running"

    # everything dies at once, and the broker forgets every message
    for p in [*workers.processes, command]:
        os.killpg(p.pid, signal.SIGKILL)
    for p in [*workers.processes, command]:
        p.wait()
    workers.processes = []
    _client(redis_url, 5.0).flushdb()
    before = {t["id"]: t for t in rt.db.trials(study["id"])}
    assert any(t["state"] == "running" for t in before.values())  # work was in flight

    cluster({"north": 2}, workers=2)
    resumed = _tune(home, redis_url)
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, output
    assert f"resuming study {study['id']}" in output

    record = rt.db.study(study["id"])
    assert record["state"] == "done"
    assert len(rt.db.studies()) == 1
    trials = rt.db.trials(study["id"])
    assert [t["number"] for t in trials] == list(range(6))  # budget spent, none lost
    assert len({tuple(sorted(t["params"].items())) for t in trials}) == 6  # none twice
    assert set(before) <= {t["id"] for t in trials}
    for t in trials:
        assert t["state"] in ("done", "pruned"), t
        epochs = rt.db.epochs(t["id"])
        assert [e["epoch"] for e in epochs] == list(range(t["epochs_done"]))
        assert all(e["metric"] is not None for e in epochs)
        if t["state"] == "done":
            assert t["epochs_done"] == 3
        hops = rt.db.hops(t["id"])
        assert all(h["state"] == "done" for h in hops)
        per_epoch = Counter(h["epoch"] for h in hops)
        assert all(per_epoch[e["epoch"]] == 2 for e in epochs)
        for e in epochs:
            assert sorted(h["shard"] for h in hops if h["epoch"] == e["epoch"]) == [0, 1]


def test_resuming_leaves_alone_the_trials_a_live_worker_is_running(make_config, rt, cluster,
                                                                   redis_url) -> None:
    from regions import Store, ingest, load_config
    from tasks import app, create_study
    from tasks._driver import start_studies
    from tasks._sweeper import busy_trials, sweep

    region = load_config(make_config(shards=2, epochs=6, trials=1, parallel=1, rows=8000,
                                     batch_size=4)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    cluster({"north": 2}, workers=2)
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.01}])
    start_studies(app, [study])
    _wait(lambda: any(h["state"] == "running" for h in rt.db.hops(study_id=study)), 60,
          "a hop to start")
    (trial,) = rt.db.trials(study)
    busy = busy_trials(app)
    assert trial["id"] in busy
    assert sweep(rt, 0.0, study, busy) == []  # nothing re-sent behind a live worker's back
    # without asking the workers, the same sweep would have sent the trial's hop again
    assert [d.kwargs["trial"] for d in sweep(rt, 0.0, study)] == [trial["id"]]
    assert rt.db.trial(trial["id"])["state"] == "running"
