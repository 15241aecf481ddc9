"""Messages that cannot hurt a worker: each is set aside, logged once, and nothing trains.

Pushed by hand onto a hop queue the way an operator or a buggy producer would:
raw bytes, a pickle envelope, an envelope with no task header, an unknown
task, a hop with a mistyped, missing or unknown field, a hop routed to the
wrong shard's queue. The worker stays up throughout and still answers.
"""

from __future__ import annotations

import base64
import json
import pickle
import time
import uuid

from hoptune.tasks.worker._dead_letter import read_dead_letters

QUEUE = "hop.north.0"
HOP = {"region": "north", "study": 1, "trial": 2, "epoch": 0, "position": 0, "shard": 0}


def _envelope(body: bytes, content_type: str, headers: dict) -> str:
    """A kombu message as its Redis transport stores it in a queue."""
    tag = str(uuid.uuid4())
    return json.dumps({
        "body": base64.b64encode(body).decode(), "content-encoding": "binary"
        if content_type != "application/json" else "utf-8", "content-type": content_type,
        "headers": headers, "properties": {"body_encoding": "base64", "delivery_tag": tag,
                                           "delivery_info": {"exchange": "",
                                                             "routing_key": QUEUE},
                                           "delivery_mode": 2, "priority": 0}})


def _task_headers(task: str) -> dict:
    return {"lang": "py", "task": task, "id": str(uuid.uuid4()), "retries": 0,
            "root_id": None, "parent_id": None, "group": None, "argsrepr": "()",
            "kwargsrepr": "{}", "origin": "faults"}


def _wait_dead_letters(client, count: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        total, entries = read_dead_letters(client, 100)
        if total >= count:
            return entries
        time.sleep(0.1)
    total, entries = read_dead_letters(client, 100)
    raise AssertionError(f"{total} of {count} messages set aside: {entries}")


def test_a_worker_survives_every_bad_message_and_sets_each_aside(workers, redis_server) -> None:
    worker = workers.start("w0", "north:0,north:1")
    workers.wait_ready("w0")
    client = redis_server.client()
    app = redis_server.app()
    json_body = json.dumps([[], HOP, {}]).encode()
    client.lpush(QUEUE, b"not json")
    client.lpush(QUEUE, b"[1, 2")
    client.lpush(QUEUE, _envelope(pickle.dumps(((), HOP, {})), "application/x-python-serialize",
                                  _task_headers("hoptune.hop")))
    client.lpush(QUEUE, _envelope(json_body, "application/json", {}))
    client.lpush(QUEUE, _envelope(json_body, "application/json", _task_headers("evil.task")))
    client.lpush(QUEUE, json.dumps({"hello": "world"}))
    app.send_task("hoptune.hop", kwargs={**HOP, "trial": "2"}, queue=QUEUE)
    app.send_task("hoptune.hop", kwargs={**HOP, "epoch": True}, queue=QUEUE)
    app.send_task("hoptune.hop", kwargs={k: v for k, v in HOP.items() if k != "shard"},
                  queue=QUEUE)
    app.send_task("hoptune.hop", kwargs={**HOP, "extra": 1}, queue=QUEUE)
    app.send_task("hoptune.hop", kwargs={**HOP, "shard": 1}, queue=QUEUE)  # misrouted
    app.send_task("hoptune.hop", kwargs={**HOP, "region": "south"}, queue=QUEUE)
    app.send_task("hoptune.hop", args=[1], kwargs=HOP, queue=QUEUE)

    entries = _wait_dead_letters(client, 13)
    reasons = [e["reason"] for e in reversed(entries)]
    assert all(e["queue"] == QUEUE for e in entries)
    assert reasons[0].startswith("not JSON: Expecting value")
    assert reasons[1].startswith("not JSON: Expecting ',' delimiter")
    assert reasons[2] == ("content type 'application/x-python-serialize' refused: "
                          "hoptune accepts JSON only")
    assert reasons[3] == "no task header"
    assert reasons[4] == "unknown task 'evil.task'"
    assert reasons[5].startswith("not a kombu envelope")
    assert reasons[6] == "hop field 'trial': expected int, got str '2'"
    assert reasons[7] == "hop field 'epoch': expected int, got bool True"
    assert reasons[8] == "hop fields: unknown [], missing ['shard']"
    assert reasons[9] == "hop fields: unknown ['extra'], missing []"
    assert reasons[10] == "hop of hop.north.1 received on queue hop.north.0"
    assert reasons[11] == "hop of hop.south.0 received on queue hop.north.0"
    assert reasons[12] == "hop takes keyword arguments only, got 1 positional"
    assert "not json" in entries[-1]["body"]

    assert worker.poll() is None
    assert {n for r in app.control.ping(timeout=2) for n in r} == {"w0@faults"}
    log = workers.log("w0")
    assert log.count(f"message on queue {QUEUE} set aside") == 13
    assert "Unrecoverable error" not in log
    assert "Training" not in log


def test_a_worker_that_gives_up_exits_non_zero(workers, redis_server) -> None:
    """A supervisor that restarts failed processes must see a worker that stopped on an error."""
    workers.env["HOPTUNE_BROKER_RETRIES"] = "1"
    worker = workers.start("w0", "north:0")
    workers.wait_ready("w0")
    redis_server.kill()  # and never back: the worker's retries run out
    assert worker.wait(120) == 1
    assert "Unrecoverable error" in workers.log("w0")


COHORT = {"region": "north", "study": 1, "trials": [2, 3], "epochs": [1, 0], "position": 0,
          "shard": 0}


def test_a_worker_sets_aside_every_bad_cohort_message(workers, redis_server) -> None:
    worker = workers.start("w0", "north:0,north:1")
    workers.wait_ready("w0")
    client = redis_server.client()
    app = redis_server.app()
    app.send_task("hoptune.cohort_hop", kwargs={**COHORT, "trials": [2, 2]}, queue=QUEUE)
    app.send_task("hoptune.cohort_hop", kwargs={**COHORT, "trials": [2, "3"]}, queue=QUEUE)
    app.send_task("hoptune.cohort_hop", kwargs={**COHORT, "trials": 2}, queue=QUEUE)
    app.send_task("hoptune.cohort_hop", kwargs={**COHORT, "shard": 1}, queue=QUEUE)
    app.send_task("hoptune.cohort_hop", args=[1], kwargs=COHORT, queue=QUEUE)

    entries = _wait_dead_letters(client, 5)
    assert [e["reason"] for e in reversed(entries)] == [
        "cohort hop field 'trials': a trial named twice in [2, 2]",
        "cohort hop field 'trials': ids must be ints >= 0, got '3'",
        "cohort hop field 'trials': expected list, got int 2",
        "cohort hop of hop.north.1 received on queue hop.north.0",
        "cohort hop takes keyword arguments only, got 1 positional",
    ]
    assert worker.poll() is None
    log = workers.log("w0")
    assert log.count(f"message on queue {QUEUE} set aside") == 5
    assert "Training" not in log
