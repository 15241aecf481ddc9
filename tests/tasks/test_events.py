"""Every hop sends a ``task-progress`` event that a Celery event receiver (Flower's kind) sees.

A real ``celery.events.Receiver`` on the test Redis listens while real workers
train a small study; each hop's event carries its region, study, trial, epoch,
shard, loss and samples, and agrees with what the study database recorded.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import app, create_study
from hoptune.tasks.cli._follow import follow, start_studies
from hoptune.tuner import HopRecords

pytestmark = pytest.mark.integration


class EventLog:
    """A real event receiver in a thread: every event it gets, in order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._connection = app.connection_for_read()
        self._receiver = app.events.Receiver(self._connection,
                                             handlers={"*": self.events.append})
        self._thread = threading.Thread(target=self._capture, daemon=True)

    def _capture(self) -> None:
        self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["type"] == kind]

    def start(self) -> EventLog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._receiver.should_stop = True
        self._thread.join(10)
        self._connection.release()


def _wait(condition, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_every_hop_sends_a_progress_event_with_its_fields(make_config, rt, cluster) -> None:
    region = load_config(make_config(shards=2, epochs=2, trials=2, parallel=2)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    workers = cluster({"north": 2}, workers=2)
    log = EventLog().start()
    try:
        # the receiver's queue is bound once it hears the workers' heartbeats
        _wait(lambda: {e.get("hostname") for e in log.of_type("worker-heartbeat")}
              >= set(workers.names), 30, "the receiver to hear every worker")
        study = create_study(rt, region, manifest=manifest,
                             configs=[{"lr": 0.02}, {"lr": 0.05}])
        start_studies(app, [study])
        follow(rt, app, [study], progress=False, timeout=180)
        hops = HopRecords(rt.db).all(study_id=study)
        assert len(hops) == 2 * 2 * 2
        _wait(lambda: len(log.of_type("task-progress")) >= len(hops), 30,
              "a progress event per hop")
    finally:
        log.stop()

    progress = log.of_type("task-progress")
    assert len(progress) == len(hops)
    seen = {(e["trial"], e["epoch"], e["shard"]): e for e in progress}
    for hop in hops:
        event = seen[(hop.trial_id, hop.epoch, hop.shard)]
        assert (event["region"], event["study"]) == ("north", study)
        assert event["hostname"] == hop.worker
        assert event["samples"] == hop.samples > 0
        assert event["loss"] == pytest.approx(hop.loss)
        assert event["samples_per_s"] > 0
