"""RabbitMQ as the broker, without workers: its queues, their lengths, its dead letters.

Against a virtual host of the machine's RabbitMQ of the test's own (``broker``),
skipped where none answers. The fault scenarios that run on both brokers are
parametrised in test_scenarios, test_duplicates and test_bad_messages.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from hoptune.core import Settings
from hoptune.tasks.monitor._status import _dead_letters
from hoptune.tasks.study import queue_lengths
from hoptune.tasks.worker._dead_letter import read_dead_letters, record_dead_letter
from hoptune.tasks.worker._messages import hop_dispatch, tune_step_dispatch

pytestmark = [pytest.mark.integration,
              pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)]


def _queues(vhost: str) -> dict[str, dict]:
    out = subprocess.run(["rabbitmqctl", "--quiet", "list_queues", "-p", vhost, "name",
                          "arguments", "durable", "--formatter", "json"],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    return {q["name"]: q for q in json.loads(out)}


def test_queues_are_quorum_queues_that_dead_letter_to_hoptunes_exchange(broker) -> None:
    from hoptune.tasks import send

    app = broker.app()
    send([hop_dispatch("north", 1, 2, 0, 0, 0) for _ in range(3)] + [tune_step_dispatch(1)],
         app)
    length = queue_lengths(app)  # what `hoptune metrics` and the sweeper read: no plugin
    assert length("hop.north.0") == 3
    assert length("hoptune.control") == 1
    assert length("hop.north.9") == 0  # no such queue: empty
    queues = _queues(broker.name)
    for name in ("hop.north.0", "hoptune.control"):
        assert queues[name]["durable"] is True
        assert {k: v for k, _, v in queues[name]["arguments"]} == {"x-queue-type": "quorum",
                                             "x-dead-letter-exchange": "hoptune.dead"}, name


def test_set_aside_and_rejected_messages_reach_the_dead_letter_queue(
        broker, monkeypatch: pytest.MonkeyPatch) -> None:
    from hoptune.tasks import send

    send([hop_dispatch("north", 1, 2, 0, 0, 0)], broker.app())
    with broker.connection() as conn:
        record_dead_letter(conn, "hop.north.0", "hop fields: unknown ['x'], missing []", "{}")
        # one that RabbitMQ dead-letters itself: a hop rejected without a requeue
        channel = conn.channel()
        message = channel.basic_get("hop.north.0", no_ack=False)
        channel.basic_reject(message.delivery_tag, requeue=False)
        channel.close()
        entries: list = []
        for _ in range(100):
            total, entries = read_dead_letters(conn, 10)
            if total == 2:
                break
        assert sorted(e["reason"] for e in entries) == [
            "dead-lettered by RabbitMQ: rejected", "hop fields: unknown ['x'], missing []"]
        assert {e["queue"] for e in entries} == {"hop.north.0"}
    # `hoptune status` counts them from the dead-letter queue (its "dead letters" section)
    monkeypatch.setenv("HOPTUNE_BROKER_URL", broker.url)
    assert _dead_letters(Settings.from_env()) == 2
