"""Duplicated messages cost nothing: claimed once, ended once, a region's study made once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hoptune.tuner import HopRecords
from tests.faults.conftest import BROKERS

pytestmark = pytest.mark.integration


class Duplicator:
    """Sends a copy of every hop message, as a broker that delivers twice would.

    Every queued hop is sent again as soon as it is seen, and every finished
    hop once more ``late`` seconds after it finished (a redelivery that
    arrives after the original's work is done). With ``once``, every hop is
    sent once more when it is first seen, queued, running or done: each hop
    message twice in all.
    """

    def __init__(self, scenario, study: int, *, late: float = 0.0,
                 last_only: bool = False, once: bool = False) -> None:
        self.scenario, self.study, self.late, self.last_only = scenario, study, late, last_only
        self.once = once
        self.sent: set[tuple] = set()
        self.copies = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Duplicator:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from hoptune.tasks import send
        from hoptune.tasks.worker._messages import hop_dispatch
        from hoptune.tuner import utcnow

        db = self.scenario.runtime().db
        while not self._stop.wait(0.02):
            out = []
            now = utcnow()
            for hop in HopRecords(db).all(study_id=self.study):
                order = db.epoch(hop.trial_id, hop.epoch).visit_order
                last = hop.position == len(order) - 1
                if self.last_only and not last:
                    continue
                key = (hop.trial_id, hop.epoch, hop.position,
                       not self.once and hop.state == "done")
                due = self.once or hop.state == "queued" or (
                    hop.state == "done"
                    and (now - hop.finished_at).total_seconds() >= self.late)
                if key in self.sent or not due:
                    continue
                self.sent.add(key)
                out.append(hop_dispatch("north", self.study, hop.trial_id, hop.epoch,
                                        hop.position, hop.shard))
            send(out, self.scenario.app)
            self.copies += len(out)


@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_every_hop_delivered_twice_to_two_replicas_trains_once(scenario, workers) -> None:
    # nobody dies here: a liveness bound of 4 s would let a loaded host's stall pass for a
    # death, and the hop of a holder taken for dead is rightly trained again
    workers.env["HOPTUNE_LIVENESS_SECONDS"] = "15"
    for name, shards in (("a0", "north:0"), ("b0", "north:0"), ("a1", "north:1"),
                         ("b1", "north:1")):
        workers.start(name, shards)
    workers.wait_ready()
    study = scenario.start(epochs=2)
    with Duplicator(scenario, study) as copies:
        scenario.settle(study)
    assert copies.copies >= 16  # 4 trials x 2 epochs x 2 shards, each queued and done
    scenario.check(study)  # each (trial, epoch, position) trained exactly once
    hops = HopRecords(scenario.runtime().db).all(study_id=study)
    assert sum(h.interrupted for h in hops) == 0, "a copy is not an interruption"
    # both replicas of each shard took deliveries, so copies raced for each claim; which
    # replica wins a hop is the broker's timing (one once trained none of its shard's 8)
    for name in ("a0", "b0", "a1", "b1"):
        assert re.search(r"Task hoptune\.hop\[[^\]]+\] received", workers.log(name)), name


def test_every_hop_sent_twice_costs_two_deliveries_whatever_the_trial_length(
        scenario, workers) -> None:
    """A copy of a hop that is done hands on nothing: it does not follow the trial down its
    chain (deliveries per position once grew 2, 3, 4, ... along each trial)."""
    # no sweeper resends: on a loaded host a hop may wait past a short bound, and its
    # resend would be a third delivery that this test does not inject
    workers.env["HOPTUNE_RESEND_SECONDS"] = "600"
    workers.env["HOPTUNE_LIVENESS_SECONDS"] = "15"  # nobody dies here either
    workers.start("w0", "north:0")
    workers.start("w1", "north:1")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}, {"lr": 0.02}], epochs=8)
    db = scenario.runtime().db
    with Duplicator(scenario, study, once=True) as copies:
        scenario.settle(study)
        scenario.wait_until(lambda: copies.copies == 2 * 8 * 2, 10, "a copy of every hop")
    scenario.check(study)  # each hop trained once, weights bitwise their replay's
    hops = HopRecords(db).all(study_id=study)
    assert len(hops) == 2 * 8 * 2
    per_position: dict[int, list[int]] = {}
    for hop in hops:
        per_position.setdefault(hop.epoch * 2 + hop.position, []).append(hop.deliveries)
    assert max(max(d) for d in per_position.values()) <= 2, per_position
    assert sum(h.deliveries for h in hops) <= 2 * len(hops)
    assert sum(h.interrupted for h in hops) == 0


def _pruned_run(scenario, workers, duplicate: bool) -> dict:
    from hoptune.tasks.cli._follow import settled

    workers.start("w0", "north:0")
    workers.start("w1", "north:1")
    workers.wait_ready()
    configs = [{"lr": 0.002}, {"lr": 0.05}, {"lr": 0.01}, {"lr": 0.2}]
    # one trial at a time: what each sees at its rungs does not depend on timing
    study = scenario.start(configs=configs, epochs=3, parallel=1,
                           space={"lr": {"type": "real", "low": 0.001, "high": 0.3,
                                         "prior": "log"}})
    if duplicate:
        with Duplicator(scenario, study, late=2.0, last_only=True):
            scenario.settle(study)
            time.sleep(3.0)  # the last copies arrive after the study ended
    scenario.wait_until(lambda: settled(scenario.runtime().db.study(study)), 120, "the end")
    db = scenario.runtime().db
    record = db.study(study)
    best = db.trial(record.best_trial_id)
    workers.stop_all()
    return {"states": [t.state for t in db.trials(study)], "best": best.number,
            "metric": best.last_metric, "promotion": record.promotion["promoted"]}


def test_duplicated_epoch_ends_leave_the_result_of_a_run_without_them(
        scenario, workers, home: Path, redis_server) -> None:
    """A copy of each epoch's last hop, arriving late, never prunes a trial that went on."""
    plain = _pruned_run(scenario, workers, duplicate=False)
    # the same study again, from a clean home, with every epoch's end delivered twice
    scenario.runtime().db.dispose()
    scenario.rt = None
    for item in list(home.iterdir()):
        if item.name != "logs":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    redis_server.client().flushall()
    copied = _pruned_run(scenario, workers, duplicate=True)
    assert "pruned" in plain["states"]
    assert copied == plain


@pytest.mark.timeout(900)  # forty CLI processes start here: minutes on a loaded 2-core host
def test_two_tunes_of_one_region_at_once_make_one_study(write_config, fault_env,
                                                        home: Path) -> None:
    """Twenty pairs of concurrent `hoptune tune --detach`, each pair on its own region."""
    path = write_config(trials=2, tuned=True)
    text = path.read_text()
    region = text[text.index("[regions.north]"):]
    path.write_text(text + "".join(region.replace("[regions.north]", f"[regions.r{i}]")
                                   for i in range(20)))
    env = {**os.environ, **fault_env}
    for i in range(20):
        pair = [subprocess.Popen(["hoptune", "tune", f"r{i}", "--detach"], cwd=home, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in pair]
        assert [p.returncode for p in pair] == [0, 0], outs
    from hoptune.core import Settings
    from hoptune.tuner import StudyDB

    db = StudyDB(Settings.from_env().database_url)
    counts = {f"r{i}": len(db.studies(f"r{i}")) for i in range(20)}
    db.dispose()
    assert counts == {f"r{i}": 1 for i in range(20)}


def test_two_nightly_runs_at_once_one_runs_and_one_refuses(scenario, workers, fault_env,
                                                           home: Path) -> None:
    scenario.write_config(trials=4, epochs=2, tuned=True)
    env = {**os.environ, **fault_env}

    def nightly() -> subprocess.Popen:
        return subprocess.Popen(["hoptune", "nightly", "--no-progress"], cwd=home, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = nightly()  # no worker yet: it holds the nightly lock and waits for its study
    db = scenario.runtime().db
    scenario.wait_until(lambda: bool(db.studies("north")), 120, "the first run's study")
    second = nightly()
    code, _, err = second.wait(120), *second.communicate()
    assert code == 2 and err.startswith("hoptune: error: a nightly run is already going"), err
    workers.start("w0", "north:0,north:1")
    assert first.wait(240) == 0, first.communicate()
    (study,) = db.studies("north")
    scenario.check(study.id)
