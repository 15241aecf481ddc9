"""Messages that cannot hurt a worker: each is set aside, logged once, and nothing trains.

Pushed by hand onto a hop queue the way an operator or a buggy producer would:
raw bytes, a pickle envelope, an envelope with no task header, an unknown
task, a hop with a mistyped, missing or unknown field, a hop routed to the
wrong shard's queue, a hop rewritten to match another queue, a hop reaching a
worker that does not own its shard, a message naming a study, trial or epoch
the database does not have. The worker stays up throughout and still answers.
"""

from __future__ import annotations

import base64
import json
import pickle
import time
import uuid

import pytest

from hoptune.tasks.worker._dead_letter import read_dead_letters
from hoptune.tuner import HopRecords
from tests.faults.conftest import BROKERS

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


@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_a_message_that_is_not_json_is_set_aside_on_either_broker(workers, broker) -> None:
    """Bytes that are not JSON, with no task (a foreign producer's): on Redis the raw list
    entry, on RabbitMQ a message whose body does not decode. Either is logged once, kept in
    the dead letters (Redis's list, or RabbitMQ's dead-letter queue through its dead-letter
    exchange) with the reason, and the worker goes on and still answers."""
    worker = workers.start("w0", "north:0")
    workers.wait_ready("w0")
    broker.publish_raw(QUEUE, b"not json", **({"content_type": "application/json",
                                                "content_encoding": "utf-8"}
                                               if broker.kind == "rabbitmq" else {}))
    with broker.connection() as conn:
        (entry,) = _wait_dead_letters(conn, 1)
        # read, not consumed (RabbitMQ gives a message read back a moment later)
        assert _wait_dead_letters(conn, 1) == [entry]
    assert entry["queue"] == QUEUE
    assert entry["reason"].startswith("not JSON: Expecting value"), entry
    assert "not json" in entry["body"]
    assert worker.poll() is None
    assert {n for r in broker.app().control.ping(timeout=2) for n in r} == {"w0@faults"}
    log = workers.log("w0")
    assert log.count(f"message on queue {QUEUE} set aside") == 1
    assert "Unrecoverable error" not in log


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


def test_a_hop_rewritten_to_match_another_queue_trains_nowhere(scenario, workers,
                                                              redis_server) -> None:
    """One owner of north:0, one of south:0, none of north:1. A queued hop of north:1, its
    fields rewritten to match hop.north.0 and hop.south.0, reaches those queues' owners:
    the study database places it on north:1, so both copies are dead letters. Its own
    message, once a worker that does not own north:1 (and was not told to take it over)
    consumes that queue, is one too. Nobody trains it."""
    workers.env["HOPTUNE_TAKEOVER_SECONDS"] = "600"  # nobody is told to take north:1 over
    workers.start("w0", "north:0")
    workers.start("w1", "south:0")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}], epochs=1, parallel=1)
    db = scenario.runtime().db
    waiting: list = []

    def on_shard_1() -> bool:
        waiting[:] = [h for h in HopRecords(db).all(study_id=study)
                      if h.shard == 1 and h.state == "queued"]
        return bool(waiting)

    scenario.wait_until(on_shard_1, 120, "a hop queued on north:1, which nobody owns")
    (hop,) = waiting
    fields = {"study": study, "trial": hop.trial_id, "epoch": hop.epoch,
              "position": hop.position}
    app, client = scenario.app, redis_server.client()
    app.send_task("hoptune.hop", kwargs={**fields, "region": "north", "shard": 0},
                  queue="hop.north.0")
    app.send_task("hoptune.hop", kwargs={**fields, "region": "south", "shard": 0},
                  queue="hop.south.0")
    name = f"hop of trial {hop.trial_id} epoch {hop.epoch} position {hop.position}"
    entries = _wait_dead_letters(client, 2)
    assert sorted((e["queue"], e["reason"]) for e in entries) == [
        ("hop.north.0", f"{name}: placed on shard 1, not 0"),
        ("hop.south.0", f"{name}: study {study} is of region north, not south")]

    app.control.add_consumer("hop.north.1", destination=["w1@faults"], reply=True, timeout=5)
    entries = _wait_dead_letters(client, 3)
    assert {(e["queue"], e["reason"]) for e in entries[:-2]} == {
        ("hop.north.1", f"{name}: worker w1@faults does not own shard north:1 and was not "
                        f"told to take hop.north.1 over")}

    again = HopRecords(db).get(hop.trial_id, hop.epoch, hop.position)
    assert (again.state, again.deliveries) == ("queued", 0)  # no copy reached its claim
    assert (hop.trial_id, hop.epoch, hop.position) not in scenario.trainings()
    assert "trained hop" not in workers.log("w1")
    assert [workers.processes[n].poll() for n in ("w0", "w1")] == [None, None]


def test_a_message_naming_what_the_database_does_not_have_is_set_aside(scenario, workers,
                                                                       redis_server) -> None:
    """A hop naming no trial, or an epoch its trial does not have; a cohort and a tune_step
    naming no study: each a dead letter with its reason, no traceback; the study beside
    them finishes as if they had never been sent."""
    workers.start("w0", "north:0,north:1")
    workers.wait_ready()
    study = scenario.start(configs=[{"lr": 0.01}], epochs=1, parallel=1)
    (trial,) = scenario.runtime().db.trials(study)
    app, client = scenario.app, redis_server.client()
    app.send_task("hoptune.hop", kwargs={**HOP, "study": study, "trial": 99999}, queue=QUEUE)
    app.send_task("hoptune.hop", kwargs={**HOP, "study": study, "trial": trial.id, "epoch": 7},
                  queue=QUEUE)
    app.send_task("hoptune.cohort_hop", kwargs={**COHORT, "study": 99999}, queue=QUEUE)
    app.send_task("hoptune.tune_step", kwargs={"study": 99999}, queue="hoptune.control")

    entries = _wait_dead_letters(client, 4)
    assert sorted((e["queue"], e["reason"]) for e in entries) == sorted([
        (QUEUE, "hop of trial 99999 epoch 0 position 0: no trial 99999"),
        (QUEUE, f"hop of trial {trial.id} epoch 7 position 0: trial {trial.id} has no epoch 7"),
        (QUEUE, "cohort hop of trials [2, 3] position 0: no study 99999"),
        ("hoptune.control", "hoptune.tune_step: no study 99999")])
    scenario.settle(study)
    scenario.check(study)
    assert workers.processes["w0"].poll() is None
    log = workers.log("w0")
    assert "StudyError" not in log and "raised unexpected" not in log
