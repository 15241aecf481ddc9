"""Fault scenarios on real workers and a real Redis: each fault costs at most the hop in flight.

Every scenario ends with ``Scenario.check``: the study spent its budget and
decided its promotion with nobody's help, every epoch visited each shard once,
no hop trained twice, and every trial's weights are bitwise a fault-free
replay's. Liveness bounds are seconds here (``fault_env``); the recovery time
of each scenario (kill to the re-sent hop's start) is printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hoptune.tuner import HopRecords
from tests.faults.conftest import BROKERS

pytestmark = pytest.mark.integration


def _report(name: str, seconds: float) -> None:
    print(f"\n{name}: recovered in {seconds:.1f} s")


def _one_owner_per_shard(workers) -> None:  # noqa: ANN001 - the Workers fixture
    workers.start("w0", "north:0")
    workers.start("w1", "north:1")
    workers.wait_ready()


@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_a_worker_killed_mid_hop_costs_only_that_hop(scenario, workers) -> None:
    _one_owner_per_shard(workers)
    study = scenario.start()
    hop = scenario.running_hop("w1")
    killed = time.time()
    workers.kill("w1")
    workers.start("w1", "north:1")
    scenario.settle(study)
    scenario.check(study, trained_twice_allowed=1)  # the hop in flight, at most
    _report("one worker killed", scenario.recovery_seconds(hop, killed))


def _hooked(workers, home: Path, source: str, marker: str) -> Path:  # noqa: ANN001
    """The scenario's workers started from now on run ``source`` at start-up, armed by the
    ``marker`` file (which the hook removes when it fires): the hook's folder."""
    hook = home / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(source)
    (hook / marker).touch()
    workers.env["PYTHONPATH"] = str(hook)
    return hook


#: A start-up hook of the scenario's workers (``sitecustomize`` on their PYTHONPATH): the
#: first checkpoint written behind a hand-on for an epoch's first hop hangs in the writer
#: thread, while the hop records itself and hands on, so the test can kill its worker then.
HANG_ONCE = '''
import time
from pathlib import Path


def _hang_once(name):
    """Hang this thread for good the first time it comes here with the marker file there."""
    try:
        Path(__file__).with_name(name).unlink()
    except FileNotFoundError:
        return
    time.sleep(600)
'''

HANG_ONE_WRITE = HANG_ONCE + '''
from hoptune.tasks.worker import _checkpoint

_write = _checkpoint.write_encoded


def _hanging(store, key, data):
    if key.endswith("e0000-p0000.pt"):
        _hang_once("hang-once")
    _write(store, key, data)


_checkpoint.write_encoded = _hanging
'''


def test_a_hop_killed_before_its_checkpoint_written_behind_landed_costs_only_that_hop(
        scenario, workers, home: Path) -> None:
    """A hop hands on before its checkpoint is written (the write runs behind, in the writer
    thread). Its worker killed before the write lands: the next hop waits for the file while
    its writer could be alive, finds it missing, and runs that one hop again."""
    from hoptune.tasks.worker._checkpoint import checkpoint_key

    hook = _hooked(workers, home, HANG_ONE_WRITE, "hang-once")
    _one_owner_per_shard(workers)
    study = scenario.start(configs=[{"lr": 0.01}], epochs=2)
    rt = scenario.runtime()
    (trial,) = rt.db.trials(study)
    records = HopRecords(rt.db)

    def handed_on() -> bool:
        first = records.get(trial.id, 0, 0)
        return first is not None and first.state == "done" \
            and not (hook / "hang-once").exists()

    scenario.wait_until(handed_on, 120, "the first hop recorded done and handed on")
    first = records.get(trial.id, 0, 0)
    time.sleep(0.5)  # the hanging write would have landed long since
    assert not rt.store.exists(checkpoint_key(study, trial.id, 0, 0))
    name = first.worker.split("@")[0]
    workers.kill(name)
    workers.start(name, workers.specs[name])
    scenario.settle(study)
    scenario.check(study, trained_twice_allowed=1)
    assert scenario.trainings()[(trial.id, 0, 0)] == 2  # that hop, and no other, ran again
    (again,) = [h for h in records.all(trial.id) if (h.epoch, h.position) == (0, 0)]
    assert "does not exist" in (again.error or ""), again


#: The same hook, the write taking three liveness bounds of the scenario (4 s) instead of
#: hanging: a large checkpoint on a slow store, while its worker lives.
SLOW_ONE_WRITE = HANG_ONE_WRITE.replace("time.sleep(600)", "time.sleep(12)")


def test_a_checkpoint_written_behind_for_longer_than_the_liveness_bound_costs_nothing(
        scenario, workers, home: Path) -> None:
    """A hop's checkpoint takes three liveness bounds to write behind its hand-on while its
    worker lives. The next hop waits for it as long as its writer is alive (not for one
    bound, after which it once took the checkpoint for lost and rewound to the hop that
    wrote it, a rewind counted toward ``max_redeliveries``), and no hop runs twice."""
    hook = _hooked(workers, home, SLOW_ONE_WRITE, "hang-once")
    _one_owner_per_shard(workers)
    study = scenario.start(configs=[{"lr": 0.01}], epochs=2)
    scenario.settle(study)
    assert not (hook / "hang-once").exists()  # the slow write happened
    scenario.check(study)  # each (trial, epoch, position) trained exactly once
    hops = HopRecords(scenario.runtime().db).all(study_id=study)
    assert all(h.errors == 0 and h.interrupted == 0 for h in hops), hops


#: A start-up hook of the scenario's workers: the first hop a worker runs next by itself,
#: without its message (``tasks.study._chain``), hangs once it holds the hop, before training.
HANG_ONE_CHAINED_HOP = HANG_ONCE + '''
from hoptune.tasks.hop import _hop
from hoptune.tasks.study import _chain

_run_hop, _train_alone = _chain.run_hop, _hop.train_alone
chained = []


def _chained_run_hop(*args, **kwargs):
    chained.append(True)
    try:
        return _run_hop(*args, **kwargs)
    finally:
        chained.pop()


def _hanging_train_alone(*args, **kwargs):
    if chained:
        _hang_once("hang-chained")
    return _train_alone(*args, **kwargs)


_chain.run_hop = _chained_run_hop
_hop.train_alone = _hanging_train_alone
'''


def test_a_worker_killed_in_a_hop_it_ran_without_its_message_costs_only_that_hop(
        scenario, workers, home: Path) -> None:
    """A worker owning both shards runs each next hop itself, sending no message for it
    (``HOPTUNE_CHAIN_SECONDS``). Killed while it holds such a hop, it leaves a hop recorded
    queued and then held, with no message anywhere: the sweeper sends it again once the
    worker is dead, and the study finishes with only that hop run twice."""
    from hoptune.tasks.worker._checkpoint import checkpoint_key

    hook = _hooked(workers, home, HANG_ONE_CHAINED_HOP, "hang-chained")
    workers.env["HOPTUNE_CHAIN_SECONDS"] = "600"
    workers.start("w0", "north:0,north:1")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}], epochs=2, parallel=1)
    scenario.wait_until(lambda: not (hook / "hang-chained").exists(), 120,
                        "a hop run without its message to hang")
    rt = scenario.runtime()
    held = [h for h in HopRecords(rt.db).all(study_id=study) if h.state == "running"]
    assert len(held) == 1 and (held[0].epoch, held[0].position) != (0, 0), held
    hop = held[0]
    log = (workers.log_dir / "w0.log").read_text()
    assert (f"trial {hop.trial_id} epoch {hop.epoch} position {hop.position} runs here next"
            in log), log[-2000:]
    # the hop before it hands its weights on from memory and writes them behind: killed
    # before that write lands, it would be that hop that runs again (the scenario above)
    before = max((h for h in HopRecords(rt.db).all(study_id=study) if h.state == "done"),
                 key=lambda h: (h.epoch, h.position))
    scenario.wait_until(lambda: rt.store.exists(checkpoint_key(
        study, before.trial_id, before.epoch, before.position)), 30,
        "the checkpoint of the hop before it written")
    killed = time.time()
    workers.kill("w0")
    workers.start("w0", "north:0,north:1")
    scenario.settle(study)
    scenario.check(study, trained_twice_allowed=1)
    again = HopRecords(rt.db).get(hop.trial_id, hop.epoch, hop.position)
    assert again.state == "done" and again.interrupted >= 1, again
    _report("a worker killed in a hop it ran here", scenario.recovery_seconds(hop, killed))


def test_every_worker_killed_mid_hop_and_restarted(scenario, workers) -> None:
    _one_owner_per_shard(workers)
    study = scenario.start()
    hop = scenario.running_hop()
    killed = time.time()
    workers.kill("w0")
    workers.kill("w1")
    workers.start("w0", "north:0")
    workers.start("w1", "north:1")
    scenario.settle(study)
    scenario.check(study, trained_twice_allowed=2)
    _report("every worker killed", scenario.recovery_seconds(hop, killed))


def test_a_dead_sole_owner_of_a_shard_is_replaced(scenario, workers) -> None:
    """The only worker of shard 1 dies for good: a live worker takes its queue over."""
    _one_owner_per_shard(workers)
    study = scenario.start()
    hop = scenario.running_hop("w1")
    killed = time.time()
    workers.kill("w1")  # never restarted
    scenario.settle(study)
    scenario.check(study, trained_twice_allowed=1)
    from hoptune.tuner import WorkerRecords

    takeovers = WorkerRecords(scenario.runtime().db).takeovers()
    assert [(t["queue"], t["worker"]) for t in takeovers] == [("hop.north.1", "w0@faults")]
    _report("sole owner killed (takeover)", scenario.recovery_seconds(hop, killed))


def test_a_cluster_with_fewer_workers_than_shards_still_finishes(scenario, workers) -> None:
    workers.start("w0", "north:0")  # nobody was started for shard 1
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}, {"lr": 0.02}])
    scenario.settle(study)
    scenario.check(study)


@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_the_broker_restarted(scenario, workers, broker) -> None:
    """Redis is killed and started again on its port with no persistence: every queued message
    is gone, and the sweeper sends the recorded work again. RabbitMQ's server is the machine's
    own: every connection of the test's virtual host is closed (``RabbitVhost.restart``), and
    its durable quorum queues keep what was queued, the unacknowledged hop returned."""
    _one_owner_per_shard(workers)
    study = scenario.start()
    hop = scenario.running_hop()
    killed = time.time()
    broker.restart()
    scenario.settle(study, timeout=240)
    assert any("Connection to broker lost" in workers.log(n) for n in ("w0", "w1"))
    scenario.check(study, trained_twice_allowed=2)
    _report(f"{broker.kind} restarted", scenario.recovery_seconds(hop, killed))


def test_the_driver_killed_the_workers_finish_alone(scenario, workers, home: Path,
                                                    fault_env) -> None:
    """``hoptune tune`` dies and nobody restarts it: workers and their sweeper finish alone."""
    _one_owner_per_shard(workers)
    scenario.write_config(trials=3, epochs=2, tuned=True)
    tune = subprocess.Popen(["hoptune", "tune", "north", "--no-progress"], cwd=home,
                            env={**os.environ, **fault_env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    scenario.running_hop()
    os.killpg(tune.pid, signal.SIGKILL)
    tune.wait()
    (study,) = scenario.runtime().db.studies("north")
    scenario.settle(study.id)
    scenario.check(study.id)


def test_a_hop_that_fails_once_is_retried_and_one_that_always_fails_fails_its_trial(
        scenario, workers, home: Path) -> None:
    (home / "raise-once").touch()
    scenario.use_factory()
    workers.start("w0", "north:0,north:1")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}], factory=True)
    scenario.settle(study)
    scenario.check(study)
    hops = HopRecords(scenario.runtime().db).all(study_id=study)
    assert sum(h.errors for h in hops) == 1
    assert [h.error for h in hops if h.errors] == [
        "RuntimeError: injected: fails on this delivery only"]

    (home / "raise-always").touch()
    second = scenario.start(configs=[{"lr": 0.01}, {"lr": 0.02}], factory=True)
    record = scenario.settle(second)
    trials = scenario.runtime().db.trials(second)
    assert [t.state for t in trials] == ["failed", "failed"]
    assert all(t.failure.endswith("failed twice on w0@faults: RuntimeError: injected: "
                                     "fails on every delivery") for t in trials)
    assert record.state == "failed"
    assert record.promotion["promoted"] is False


def test_a_factory_that_raises_fails_its_trial_within_one_hop(scenario, workers, home: Path,
                                                              fault_env) -> None:
    (home / "factory-raises").touch()
    scenario.use_factory()
    workers.start("w0", "north:0,north:1")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}, {"lr": 0.02}], factory=True)
    scenario.settle(study)
    db = scenario.runtime().db
    for trial in db.trials(study):
        assert trial.state == "failed"
        assert trial.failure == ("model could not be built: ValueError: injected: the "
                                    "factory cannot build this model")
        assert [h.deliveries for h in HopRecords(db).all(trial.id)] == [1]
    status = subprocess.run(["hoptune", "status"], cwd=home, capture_output=True, text=True,
                            env={**os.environ, **fault_env}, timeout=60)
    assert "injected: the factory cannot build this model" in status.stdout


def test_a_truncated_checkpoint_is_set_aside_and_its_hop_runs_again(scenario, workers,
                                                                    home: Path) -> None:
    from hoptune.tasks.worker._checkpoint import checkpoint_key

    _one_owner_per_shard(workers)
    study = scenario.start(configs=[{"lr": 0.01}], epochs=3)
    db = scenario.runtime().db
    trial = db.trials(study)[0].id
    records = HopRecords(db)
    scenario.wait_until(lambda: sum(h.state == "done" for h in records.all(trial)) >= 2, 120,
                        "two hops done")
    workers.kill("w0")
    workers.kill("w1")
    # The newest checkpoint on disk, not the newest recorded hop: a worker killed between
    # saving its hop's checkpoint and recording the hop leaves one more file than the
    # database knows of, and the next delivery reads that file (its own output) first.
    # Either way the damaged file is read again and must be set aside.
    folder = Path(scenario.runtime().store.path(checkpoint_key(study, trial, 0, 0))).parent
    path = max(folder.glob("e*-p*.pt"))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    workers.start("w0", "north:0")
    workers.start("w1", "north:1")
    scenario.settle(study)
    scenario.check(study, trained_twice_allowed=2)
    assert list(path.parent.glob(f"{path.name}.unreadable-*")), "set aside for a look"


#: A start-up hook of the scenario's workers: every first hop's checkpoint lands cut short,
#: as a disk that lost its tail would leave it.
TRUNCATE_FIRST_HOPS = '''
from hoptune.tasks.worker import _checkpoint

_write = _checkpoint.write_encoded


def _truncated(store, key, data):
    _write(store, key, data[:50] if key.endswith("e0000-p0000.pt") else data)


_checkpoint.write_encoded = _truncated
'''


def test_a_checkpoint_unreadable_every_time_fails_its_trial_naming_the_file(
        scenario, workers, home: Path, fault_env) -> None:
    """Past max_redeliveries rewinds the trial fails, and the driver's last line names the file.

    The worker owns both shards, so it runs the second hop itself right after the first
    (``HOPTUNE_CHAIN_SECONDS``): the file is cut short as it is written, not after, or
    the next hop could read it whole first."""
    hook = home / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(TRUNCATE_FIRST_HOPS)
    workers.env["PYTHONPATH"] = str(hook)
    workers.start("w0", "north:0,north:1")
    workers.wait_ready()
    scenario.write_config(trials=1, parallel=1, epochs=2, tuned=True)
    done = subprocess.run(["hoptune", "tune", "north", "--no-progress"], cwd=home,
                          capture_output=True, text=True, env={**os.environ, **fault_env},
                          timeout=180)
    (study,) = scenario.runtime().db.studies("north")
    (trial,) = scenario.runtime().db.trials(study.id)
    key = f"checkpoints/study-{study.id}/trial-{trial.id}/e0000-p0000.pt"
    assert trial.state == "failed"
    assert trial.failure.startswith(f"checkpoint {key} is unreadable")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"hoptune: trial 0 failed: checkpoint {key} is unreadable")
