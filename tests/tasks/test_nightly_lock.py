"""The nightly lock runs out when its holder stops making progress, and progress renews it.

On both study databases: SQLite, and PostgreSQL where its ``SELECT … FOR UPDATE``
branch runs. The messages a nightly run starts are run in this process (or
dropped, for a driver that died). The locks read a clock the tests move by
hand, so how long a hop really takes on a loaded host decides nothing. Runs
started at once leave one going and the rest refused, and ``hoptune nightly
--local-workers`` refused starts no worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from hoptune.core import Settings, StudyError
from hoptune.regions import Config, load_config
from hoptune.tasks import Runtime, run_inline
from hoptune.tasks.dashboard import Dashboard
from hoptune.tasks.study._nightly import start_nightly
from hoptune.tasks.study._nightly_lock import NIGHTLY_LOCK, holder
from hoptune.tuner import Locks, NightlyRecords, WorkerRecords


def test_a_nightly_run_that_stops_making_progress_loses_its_lock(make_config, backend, lock_clock,
                                                                  monkeypatch) -> None:
    monkeypatch.setenv("HOPTUNE_NIGHTLY_LOCK_SECONDS", "1")
    rt = Runtime(Settings.from_env(), worker="test")
    config = load_config(make_config(("north",), epochs=1, trials=1, parallel=1))
    first, _dropped = start_nightly(rt, config)  # its driver dies: nothing is sent
    with pytest.raises(StudyError, match="a nightly run is already going"):
        start_nightly(rt, config)
    lock_clock.advance(1.3)
    second, _ = start_nightly(rt, config)
    records = NightlyRecords(rt.db)
    assert [(r["id"], r["state"]) for r in records.runs()] == [
        (first, "abandoned"), (first + 1, "refused"), (second, "done")]
    # the abandoned run's study still runs, so the new run could not start north again
    assert records.regions(second)[0]["state"] == "failed"
    rt.db.dispose()


def test_progress_renews_the_nightly_lock_past_its_timeout(make_config, backend, lock_clock,
                                                           monkeypatch) -> None:
    monkeypatch.setenv("HOPTUNE_NIGHTLY_LOCK_SECONDS", "3")
    rt = Runtime(Settings.from_env(), worker="test")
    # one shard: every hop ends an epoch, and each epoch's end is progress that renews
    config = load_config(make_config(("north",), shards=1, epochs=9, trials=1, parallel=1,
                                     rows=600))
    run_id, dispatches = start_nightly(rt, config)
    started = lock_clock()
    held_for: list[float] = []

    def slow_hop(_report: object) -> None:
        lock_clock.advance(1.0)  # a hop that takes a while, a third of the lock's time
        held = Locks(rt.db).acquire(NIGHTLY_LOCK, "intruder", 60)
        elapsed = (lock_clock() - started).total_seconds()
        assert held is not None and held["holder"] == holder(run_id), (
            f"the run lost its lock after {elapsed:.1f} s")
        held_for.append(elapsed)

    run_inline(rt, dispatches, on_hop=slow_hop)
    assert max(held_for) > 6.0, "the run never outlived twice its lock's timeout"
    assert NightlyRecords(rt.db).run(run_id)["state"] == "done"
    # the finished run released the lock
    assert Locks(rt.db).acquire(NIGHTLY_LOCK, "next-night", 60) is None
    rt.db.dispose()



def _start_at_once(rt: Runtime, config: Config, n: int) -> list[StudyError]:
    """``n`` nightly runs started in threads at the same moment; the refusals."""
    barrier = threading.Barrier(n)
    refused: list[StudyError] = []

    def start() -> None:
        barrier.wait()
        try:
            start_nightly(rt, config)
        except StudyError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=start) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return refused


def test_nightly_runs_started_at_once_are_one_running_and_the_rest_refused(make_config, backend
                                                                             ) -> None:
    """A run refused the lock is recorded "refused", never "abandoned": the run that takes the
    lock marks the other runs it finds going abandoned, and a run between its record and its
    try for the lock was one of them (``hoptune nightly`` twice at once, seen in CI)."""
    config = load_config(make_config(("north",), epochs=1, trials=1, parallel=1))
    # first the lock's row is missing (the inserts race), then it is free (the updates race)
    for _ in range(3):
        rt = Runtime(Settings.from_env(), worker="test")
        refused = _start_at_once(rt, config, 6)
        records = NightlyRecords(rt.db)
        last = records.runs()[-6:]
        assert sorted(r["state"] for r in last) == ["refused"] * 5 + ["running"]
        assert len(refused) == 5
        # the next round: the winner's study ended, its run finished, its lock freed
        winner = next(r["id"] for r in last if r["state"] == "running")
        for study in rt.db.studies():
            if study.state == "running":
                rt.db.finish_study(study.id, "failed")
        records.finish_run(winner, "done")
        Locks(rt.db).release(NIGHTLY_LOCK, holder(winner))
        rt.db.dispose()


def test_a_refused_nightly_run_starts_no_local_workers(make_config, home) -> None:
    """``hoptune nightly --local-workers 2`` while a run is going is refused before it starts
    a worker: the going run's workers share its broker, and the refused run's would take
    their hops until stopped."""
    config = load_config(make_config(("north",), epochs=1, trials=1, parallel=1))
    rt = Runtime(Settings.from_env(), worker="test")
    going, _sent_elsewhere = start_nightly(rt, config)
    env = {k: v for k, v in os.environ.items() if k != "HOPTUNE_BROKER_URL"}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "nightly",
                           "--local-workers", "2", "--no-progress"], cwd=home, env=env,
                          text=True, capture_output=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"hoptune: error: a nightly run is already going ({holder(going)}")
    assert not (home / "logs").exists()  # no worker started: none wrote its log
    assert WorkerRecords(rt.db).all() == []
    # the dashboard's night page shows the run that is going, not the one refused
    board = Dashboard(Settings.from_env())
    assert board.night()["nightly"]["id"] == going
    assert board.night()["nightly"]["state"] == "running"
    board.db.dispose()
    # the going run ends (its study failed: its driver sent nothing); the next one, with its
    # local workers started after its studies were, runs to its end
    for study in rt.db.studies():
        rt.db.finish_study(study.id, "failed")
    NightlyRecords(rt.db).finish_run(going, "done")
    Locks(rt.db).release(NIGHTLY_LOCK, holder(going))
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "nightly",
                           "--local-workers", "2", "--no-progress"], cwd=home, env=env,
                          text=True, capture_output=True, timeout=240)
    assert done.returncode == 0, done.stderr
    runs = NightlyRecords(rt.db).runs()
    assert [r["state"] for r in runs] == ["done", "refused", "done"]
    assert [r["state"] for r in NightlyRecords(rt.db).regions(runs[-1]["id"])] == ["promoted"]
    rt.db.dispose()


def test_a_nightly_run_whose_local_workers_cannot_start_frees_the_lock(make_config, home) -> None:
    """A bad worker setting stops ``hoptune nightly --local-workers`` after it took the lock:
    the run is recorded failed with no region started, and the lock is free for the next."""
    make_config(("north",), epochs=1, trials=1, parallel=1)
    env = {k: v for k, v in os.environ.items() if k != "HOPTUNE_BROKER_URL"}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "nightly",
                           "--local-workers", "2", "--no-progress"], cwd=home,
                          env={**env, "HOPTUNE_CHAIN_SECONDS": "soon"}, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith("hoptune: error: HOPTUNE_CHAIN_SECONDS")
    rt = Runtime(Settings.from_env(), worker="test")
    (run,) = NightlyRecords(rt.db).runs()
    assert run["state"] == "failed" and NightlyRecords(rt.db).regions(run["id"]) == []
    assert rt.db.studies() == []
    assert Locks(rt.db).acquire(NIGHTLY_LOCK, "next-night", 60) is None
    rt.db.dispose()
