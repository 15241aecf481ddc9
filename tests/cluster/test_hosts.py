"""Three hosts that share nothing but the network: a password-protected Redis, a PostgreSQL
database and an S3 API. The worked example of ``examples/several_hosts/`` runs on them as
written there; one host dies mid-hop and never comes back.

The promises: a nightly run of three regions promotes every champion with nobody's help;
every hop of every trial is done once and no hop is trained twice; the dead host's shards
are taken over by a live host, which reads them from the store; the champion is served
from a home that never trained; checkpoint retention and ``hoptune gc`` work on S3.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from hoptune.core import Store
from hoptune.tuner import HopRecords, NightlyRecords, StudyDB, WorkerRecords, champion_version
from tests.cluster.hosts import Host, clean_env
from tests.faults.cluster import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("cluster")]

EXAMPLE = Path(__file__).parents[2] / "examples" / "several_hosts"
REGIONS = ("north", "south", "east")
#: host name -> the shards its worker owns (the example's three hosts)
SHARDS = {"a": "north:0,south:0", "b": "north:1,south:1", "c": "east:0,east:1"}
#: Liveness bounds of seconds, so a dead host is noticed within the test.
FAST = {"HOPTUNE_HEARTBEAT_SECONDS": "0.5", "HOPTUNE_LIVENESS_SECONDS": "3",
        "HOPTUNE_SWEEP_SECONDS": "1", "HOPTUNE_RESEND_SECONDS": "3",
        "HOPTUNE_TAKEOVER_SECONDS": "3"}
TRAINED = re.compile(r"trained hop: trial (\d+) epoch (\d+) position (\d+)")


@pytest.fixture
def shared(tmp_path: Path, s3_env: dict[str, str], postgres_database: str
           ) -> Iterator[dict[str, str]]:
    """The three URLs every host is given (and the store's credentials and endpoint)."""
    redis = RedisServer(tmp_path / "redis", password="hosts-share-this-secret").start()
    yield {"HOPTUNE_BROKER_URL": redis.url, "HOPTUNE_DATABASE_URL": postgres_database,
           **s3_env, **FAST}
    redis.kill()


@pytest.fixture
def hosts(tmp_path: Path, shared: dict[str, str]) -> Iterator[dict[str, Host]]:
    started = {name: Host(name, tmp_path / f"host-{name}", shared) for name in SHARDS}
    yield started
    for host in started.values():
        host.stop()


def wait_ready(hosts: list[Host], broker_url: str, timeout: float = 90) -> None:
    from celery import Celery

    app = Celery("hosts", broker=broker_url, set_as_current=False)
    expected = {h.worker for h in hosts}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for host in hosts:
            assert host.alive(), f"worker {host.name} exited:\n{host.read_log()}"
        if expected <= {n for reply in app.control.ping(timeout=0.5) for n in reply}:
            return
    raise AssertionError(f"workers {sorted(expected)} did not answer within {timeout} s")


def test_a_night_on_three_hosts_survives_one_that_dies_mid_hop(
        tmp_path: Path, shared: dict[str, str], hosts: dict[str, Host]) -> None:
    from hoptune.regions import write_ratings

    # the driver: a host of its own, with the configuration and the data
    driver = Host("driver", tmp_path / "driver", shared)
    shutil.copy(EXAMPLE / "hoptune.toml", driver.work / "hoptune.toml")
    for i, region in enumerate(REGIONS):
        write_ratings(driver.work / "data" / f"{region}.csv", n_users=60, n_items=50,
                      n_rows=1500, rank=2, noise=0.3, seed=40 + i)
    for name, shards in SHARDS.items():
        hosts[name].start_worker(shards)
    # ingest from the driver while the workers start
    ingested = driver.hoptune("ingest", "--config", "hoptune.toml")
    assert ingested.returncode == 0, ingested.stderr
    wait_ready(list(hosts.values()), shared["HOPTUNE_BROKER_URL"])

    db = StudyDB(shared["HOPTUNE_DATABASE_URL"])
    try:
        night = subprocess.Popen(
            [sys.executable, "-P", "-m", "hoptune.tasks.cli", "nightly", "--config",
             "hoptune.toml", "--no-progress"], cwd=driver.work, env=driver.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # host c dies in the middle of its first hop, and stays dead
        deadline = time.monotonic() + 90
        while not [h for h in HopRecords(db).all()
                   if h.state == "running" and h.worker == hosts["c"].worker]:
            assert time.monotonic() < deadline and night.poll() is None, \
                "no hop ran on host c\n" + hosts["c"].read_log()[-3000:]
            time.sleep(0.02)
        hosts["c"].kill()
        out, _ = night.communicate(timeout=180)
        assert night.returncode == 0, out + "".join(h.read_log()[-3000:] for h in hosts.values())

        # every champion promoted, with nobody's help
        (run,) = NightlyRecords(db).runs()
        assert run["state"] == "done"
        rows = {r["region"]: r for r in NightlyRecords(db).regions(run["id"])}
        assert {r: rows[r]["state"] for r in REGIONS} == {r: "promoted" for r in REGIONS}
        store = Store(shared["HOPTUNE_STORE_URL"])
        champions = {r: champion_version(store, r) for r in REGIONS}
        assert champions == {r: "v0001" for r in REGIONS}

        # every hop of every trial done once, each epoch visiting every shard once
        hops = HopRecords(db).all()
        for region in REGIONS:
            study = db.study(rows[region]["study_id"])
            for trial in db.trials(study.id):
                assert trial.state in ("done", "pruned"), (region, trial.state, trial.failure)
                for record in db.epochs(trial.id)[: trial.epochs_done]:
                    epoch = [h for h in hops if h.trial_id == trial.id
                             and h.epoch == record.epoch]
                    assert sorted(h.shard for h in epoch) == [0, 1]
                    assert all(h.state == "done" for h in epoch)
        done = {(h.trial_id, h.epoch, h.position) for h in hops if h.state == "done"}
        trained: Counter = Counter()
        for host in hosts.values():
            trained.update(tuple(int(g) for g in m.groups())
                           for m in TRAINED.finditer(host.read_log()))
        assert set(trained) == done
        assert {k: n for k, n in trained.items() if n > 1} == {}  # no hop trained twice

        # host c's shards taken over by live hosts, which read them from the store
        takeovers = WorkerRecords(db).takeovers()
        taken = {t["queue"]: t["worker"] for t in takeovers}
        assert set(taken) <= {"hop.east.0", "hop.east.1"} and taken, takeovers
        assert set(taken.values()) <= {hosts["a"].worker, hosts["b"].worker}
        east = {t.id for t in db.trials(rows["east"]["study_id"])}
        for queue, worker in taken.items():
            host = hosts[worker.split("@")[0]]
            shard = int(queue.rsplit(".", 1)[1])
            assert any(h.worker == worker for h in hops if h.shard == shard
                       and h.trial_id in east)
            cached = [p for p in (host.home / "cache").rglob("*") if p.is_file()]
            assert any("east" in str(p) for p in cached), cached
        assert not (hosts["c"].home / "store").exists()  # nobody wrote a local store
        assert not any((h.home / "store").exists() for h in [driver, *hosts.values()])

        # checkpoint retention on S3: what finished trials keep, and gc of the rest
        assert store.list("checkpoints")
        kept = driver.hoptune("gc", "--dry-run")
        assert kept.returncode == 0 and kept.stdout.startswith("would remove 0 checkpoints"), \
            kept.stdout + kept.stderr
        gone = driver.hoptune("gc", "--older-than", "0")
        assert gone.returncode == 0 and gone.stdout.startswith("removed "), gone.stderr
        assert store.list("checkpoints") == []
    finally:
        db.dispose()

    # the champion served from a home that never trained: it has the store's URL only
    server = tmp_path / "server"
    env = clean_env({k: v for k, v in shared.items()
                     if k.startswith("AWS_") or k == "HOPTUNE_STORE_URL"},
                    server / "home", server / "work")
    served = subprocess.run([sys.executable, "-P", str(EXAMPLE / "serve_champion.py"), "north",
                             "u1", "i2", "u3", "i4"], cwd=server / "work", env=env, text=True,
                            capture_output=True, timeout=120)
    assert served.returncode == 0, served.stderr
    answer = json.loads(served.stdout.splitlines()[-1])
    assert answer["version"] == champions["north"]
    assert len(answer["predictions"]) == 2
    assert all(1.0 <= p <= 5.0 for p in answer["predictions"])
    assert list((server / "home").iterdir()) == []  # nothing trained or cached there
