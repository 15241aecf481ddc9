"""``hoptune metrics`` scraped with prometheus_client's own parser while a study runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hoptune.tasks.worker._messages import hop_queue
from hoptune.tuner import HopRow
from tests.faults.cluster import free_port
from tests.rows import hop_row

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at the endpoint, by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def queue_sample(samples: dict, name: str, region: str, shard: int) -> float:
    labels = (("queue", hop_queue(region, shard)), ("region", region), ("shard", str(shard)))
    return samples[name, labels]


@pytest.fixture
def metrics_port(fault_env: dict[str, str], home: Path, write_config) -> Iterator[int]:  # noqa: ANN001
    write_config()  # the regions' queues are reported from the config before any study
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "hoptune.tasks.cli", "metrics", "--port", str(port),
         "--addr", "127.0.0.1", "--forecast-every", "0.2"], cwd=home,
        env={**os.environ, **fault_env, "HOPTUNE_NIGHTLY_DEADLINE": "1h"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            scrape(port)
            break
        except OSError:
            assert process.poll() is None, process.stdout.read()
            assert time.monotonic() < deadline, "the metrics endpoint never answered"
            time.sleep(0.1)
    yield port
    process.terminate()
    process.wait(20)


def test_queue_depths_move_while_a_study_runs(scenario, workers, metrics_port: int) -> None:
    before = scrape(metrics_port)
    assert queue_sample(before, "hoptune_queue_depth", "north", 1) == 0
    assert before["hoptune_studies_running", ()] == 0

    workers.env["HOPTUNE_TAKEOVER_SECONDS"] = "600"  # shard 1's hops wait for its owner
    workers.start("w0", "north:0")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}, {"lr": 0.02}, {"lr": 0.03}, {"lr": 0.04}],
                           parallel=4)
    waiting: dict = {}

    def shard_1_waits() -> bool:
        waiting.update(scrape(metrics_port))
        return queue_sample(waiting, "hoptune_queue_depth", "north", 1) > 0

    scenario.wait_until(shard_1_waits, 60, "hops waiting in shard 1's queue")
    # the gauge is the broker's own list, the one a KEDA redis trigger reads (deploy/)
    assert workers.redis.client().llen(hop_queue("north", 1)) > 0
    assert waiting["hoptune_studies_running", ()] == 1
    assert waiting["hoptune_worker_up", (("device", "cpu"), ("worker", "w0@faults"))] == 1

    def aged() -> bool:
        waiting.update(scrape(metrics_port))
        return queue_sample(waiting, "hoptune_queue_oldest_seconds", "north", 1) > 0.5

    scenario.wait_until(aged, 60, "shard 1's oldest hop to age")

    # shard 0's hops are recorded: the simulator forecasts what is left of the study
    def forecast() -> bool:
        waiting.update(scrape(metrics_port))
        return waiting.get(("hoptune_predicted_seconds_to_finish", ()), 0) > 0

    scenario.wait_until(forecast, 60, "a forecast of the study's remaining work")
    # an hour is far more than a few small hops need: one worker, owning both shards
    assert waiting["hoptune_workers_wanted", ()] == 1
    for shard in (0, 1):
        assert queue_sample(waiting, "hoptune_shard_workers_wanted", "north", shard) == 1

    workers.start("w1", "north:1")
    scenario.settle(study)
    after: dict = {}

    def nothing_left() -> bool:
        after.clear()
        after.update(scrape(metrics_port))
        return after.get(("hoptune_predicted_seconds_to_finish", ()), -1) == 0

    scenario.wait_until(nothing_left, 60, "the forecast of a finished study")
    assert after["hoptune_workers_wanted", ()] == 0
    assert not [key for key in after if key[0] == "hoptune_shard_workers_wanted"]
    assert queue_sample(after, "hoptune_queue_depth", "north", 1) == 0
    assert queue_sample(after, "hoptune_queue_oldest_seconds", "north", 1) == 0
    assert after["hoptune_studies_running", ()] == 0
    finished = sum(after["hoptune_trials", (("region", "north"), ("state", state))]
                   for state in ("done", "pruned"))
    assert finished == 4
    # both workers held hops within the window, and the shares are shares
    shares = {dict(labels)["worker"]: value for (name, labels), value in after.items()
              if name == "hoptune_worker_busy_share"}
    assert set(shares) == {"w0@faults", "w1@faults"}
    assert all(0 < share <= 1 for share in shares.values())


def test_busy_shares_count_overlaps_once_and_only_inside_the_window() -> None:
    from hoptune.tasks.monitor._metrics import busy_shares
    from hoptune.tuner import utcnow

    now = utcnow()

    def hop(worker: str, start: float, end: float | None) -> HopRow:
        return hop_row(worker=worker, state="running" if end is None else "done",
                       started_at=now - timedelta(seconds=start),
                       finished_at=None if end is None else now - timedelta(seconds=end))

    shares = busy_shares([hop("a", 50, 40), hop("a", 45, 30),  # overlap: 50..30 is 20 s
                          hop("b", 200, 90),  # starts before the window: 100..90 is 10 s
                          hop("c", 10, None),  # running: 10 s so far
                          hop("d", 300, 150)], now, window=100)
    assert shares == {"a": 0.2, "b": 0.1, "c": 0.1}
