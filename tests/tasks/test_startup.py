"""Seconds to the first hop: what starting a study imports, and where it proposes.

``hoptune tune`` records a study and sends its first message without importing
torch, torchmetrics or scikit-optimize (seconds of import each on a small host);
a cold start proposes its first trials in the command while its own workers
import, and counting GPUs on a host without the NVIDIA driver imports nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hoptune.core import StoreError
from hoptune.tasks.worker._device import _nvidia_driver
from hoptune.tasks.worker._messages import hop_queue, tune_step_dispatch

HEAVY = ("torch", "torchmetrics", "skopt", "sklearn", "scipy", "matplotlib")

# The driver's whole path for a new study, as `hoptune tune REGION --detach` runs it
# with workers already up: configuration, checks, ingest, the study, its first message.
DRIVER = """
import json, sys
from hoptune.core import Settings
from hoptune.regions import load_config
from hoptune.tasks._app import app, send
from hoptune.tasks.worker._runtime import Runtime
from hoptune.tasks.cli._tune import first_step, open_study
from hoptune.tasks.study._validate import check_region
import hoptune.tasks.cli._cluster, hoptune.tasks.cli._follow, hoptune.tasks.cli

config = load_config(sys.argv[1])
region = config.region("north")
check_region(config, region, tuned=True)
rt = Runtime(Settings.from_env(), worker="cli")
study_id, resumed = open_study(rt, config, region)
send(first_step(rt, study_id, workers_starting=False), app)
print(json.dumps({"study": study_id, "resumed": resumed,
                  "imported": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_starting_a_study_imports_neither_torch_nor_the_optimizer(make_config, redis_url,
                                                                 home: Path) -> None:
    config = make_config()
    done = subprocess.run([sys.executable, "-c", DRIVER, str(config)], capture_output=True,
                          text=True, env={**os.environ, "HOPTUNE_BROKER_URL": redis_url},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["resumed"] is False
    assert not set(HEAVY) & set(out["imported"]), out["imported"]


def test_a_cold_start_proposes_in_the_command_and_a_warm_one_sends_a_tune_step(
        make_config, rt) -> None:
    from hoptune.regions import ingest, load_config
    from hoptune.tasks import create_study
    from hoptune.tasks.cli._tune import first_step

    config = load_config(make_config(("north", "south"), trials=4, parallel=2))
    warm_region, region = config.region("south"), config.region("north")
    warm = create_study(rt, warm_region, manifest=ingest(warm_region, rt.store).manifest)
    assert first_step(rt, warm, workers_starting=False) == [tune_step_dispatch(warm)]
    assert rt.db.trials(warm) == []  # the workers propose

    cold = create_study(rt, region, manifest=ingest(region, rt.store).manifest)
    sent = first_step(rt, cold, workers_starting=True)
    trials = rt.db.trials(cold)
    assert [t.state for t in trials] == ["running", "running"]  # the parallel limit
    assert sorted(d.kwargs["trial"] for d in sent) == sorted(t.id for t in trials)
    assert {d.task for d in sent} == {"hoptune.hop"}
    for d in sent:  # each trial's first hop goes to the queue of its first shard
        order = rt.db.epoch(d.kwargs["trial"], 0).visit_order
        assert d.queue == hop_queue("north", order[0])


def test_without_the_nvidia_driver_a_host_has_no_gpu(tmp_path: Path) -> None:
    assert not _nvidia_driver(tmp_path)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").touch()  # the control node alone is not a GPU
    assert not _nvidia_driver(tmp_path)
    (tmp_path / "dev" / "nvidia0").touch()
    assert _nvidia_driver(tmp_path)
    (tmp_path / "dev" / "nvidia0").unlink()
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    assert _nvidia_driver(tmp_path)


def test_counting_gpus_on_this_host_agrees_with_torch() -> None:
    script = ("import sys; from hoptune.tasks.worker._device import visible_gpus; "
              "n = visible_gpus(); "
              "imported = 'torch' in sys.modules; import torch; "
              "print(n, torch.cuda.device_count(), imported)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    counted, by_torch, imported = done.stdout.split()
    assert int(counted) == int(by_torch)
    if not _nvidia_driver():  # counted without importing torch
        assert imported == "False"


def test_a_local_cluster_waits_until_its_workers_have_warmed_up(cluster, rt) -> None:
    from hoptune.tuner import WorkerRecords

    records = WorkerRecords(rt.db)
    # an earlier process of the same name, warm: not this cluster's
    records.register("w0@earlier", name=f"w0@{socket.gethostname()}", host="h", pid=1,
                     shards=[], info={"warm": True})
    workers = cluster({"north": 2}, 1)
    workers.wait_warm(rt.db, timeout=60)
    (row,) = [r for r in records.all() if r["started_at"] >= workers.started]
    assert row["info"]["warm"] is True and row["name"] == workers.names[0]
    assert row["pid"] != 1 and row["id"] != "w0@earlier"


def test_waiting_for_a_worker_that_exited_says_so(cluster, rt) -> None:
    workers = cluster({"north": 2}, 1)
    for p in workers.processes:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    with pytest.raises(StoreError, match="a worker exited with status"):
        workers.wait_warm(rt.db, timeout=60)


WARM_UP = """
import sys
from hoptune.tasks import _app

before = {m for m in sys.modules if m.split(".")[0] in ("torchmetrics", "skopt")}
_app._warm_up(None, [])
print(sorted(before), "torchmetrics.functional" in sys.modules, "skopt" in sys.modules)
"""


def test_a_workers_warm_up_loads_what_its_first_tune_step_and_validation_import() -> None:
    # the first validation of a fresh worker used to import torchmetrics (half a second on
    # this host) while it held the worker and the trial's epoch end
    out = subprocess.run([sys.executable, "-c", WARM_UP], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == ["[]", "True", "True"]


def test_status_says_which_live_workers_are_still_warming_up(rt) -> None:
    from hoptune.tasks.monitor._status import health_sections
    from hoptune.tuner import WorkerRecords

    records = WorkerRecords(rt.db)
    for name, info in (("cold", {"warm": False}), ("warm", {"warm": True}), ("old", {})):
        records.register(f"{name}@h/1/x", name=f"{name}@h", host="h", pid=1, shards=[],
                         info=info)
    (section,) = [s for s in health_sections(rt.db, rt.settings, []) if "heartbeat" in s[0]]
    assert {w["worker"]: w["state"] for w in section[1]} == {
        "cold@h": "warming up", "warm@h": "live", "old@h": "live"}
    records.beat("cold@h/1/x", {"warm": True})
    (section,) = [s for s in health_sections(rt.db, rt.settings, []) if "heartbeat" in s[0]]
    assert {w["worker"]: w["state"] for w in section[1]}["cold@h"] == "live"
