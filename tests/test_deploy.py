"""deploy/keda-workers.yaml, held to the real CLI, queue names and exported metrics."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from hoptune.tasks.cli import build_parser
from hoptune.tasks.monitor._metrics import ClusterCollector
from hoptune.tasks.worker._messages import hop_queue
from hoptune.tasks.worker._runtime import parse_shard_spec

ROOT = Path(__file__).resolve().parents[1]
DOCS = list(yaml.safe_load_all((ROOT / "deploy" / "keda-workers.yaml").read_text()))
BY_KIND = {(d["kind"], d["metadata"]["name"]): d for d in DOCS}
RABBITMQ = list(yaml.safe_load_all((ROOT / "deploy" / "keda-workers-rabbitmq.yaml").read_text()))


def _worker() -> tuple[dict, list[str]]:
    (deployment,) = [d for d in DOCS if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, container["command"]


def test_the_worker_command_is_accepted_by_the_real_cli() -> None:
    _, command = _worker()
    assert command[0] == "hoptune"
    args = build_parser().parse_args(command[1:])
    assert args.command == "worker"
    assert parse_shard_spec(args.shards) == [("north", 0)]


def test_the_scaled_object_scales_that_deployment_by_its_own_shard_queue(tmp_path: Path
                                                                         ) -> None:
    deployment, command = _worker()
    (scaled,) = [d for d in DOCS if d["kind"] == "ScaledObject"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["spec"]["minReplicaCount"] >= 1  # a shard queue always has a consumer
    shards = parse_shard_spec(build_parser().parse_args(command[1:]).shards)
    queues = {hop_queue(region, shard) for region, shard in shards}
    triggers = scaled["spec"]["triggers"]
    assert {t["type"] for t in triggers} == {"redis", "prometheus"}
    (redis,) = [t for t in triggers if t["type"] == "redis"]
    assert redis["metadata"]["listName"] in queues
    auth = redis["authenticationRef"]["name"]
    assert ("TriggerAuthentication", auth) in BY_KIND
    exported = _exported(tmp_path)
    metrics = set()
    for trigger in [t for t in triggers if t["type"] == "prometheus"]:
        query = trigger["metadata"]["query"]
        (metric, queue) = re.fullmatch(r'max\((\w+)\{queue="([^"]+)"\}\)', query).groups()
        assert queue in queues
        assert metric in exported, f"{metric} is not a metric `hoptune metrics` serves"
        metrics.add(metric)
    # the queue's age, and the planner's workers wanted for the deadline
    assert metrics == {"hoptune_queue_oldest_seconds", "hoptune_shard_workers_wanted"}


def test_the_rabbitmq_scaled_object_scales_the_same_deployment_by_its_quorum_queue(
        tmp_path: Path) -> None:
    """The RabbitMQ alternative: the same Deployment, its shard's queue read over AMQP."""
    deployment, command = _worker()
    (scaled,) = [d for d in RABBITMQ if d["kind"] == "ScaledObject"]
    redis_scaled = BY_KIND[("ScaledObject", deployment["metadata"]["name"])]
    assert scaled["metadata"]["name"] == redis_scaled["metadata"]["name"]  # one replaces one
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["spec"]["minReplicaCount"] >= 1
    shards = parse_shard_spec(build_parser().parse_args(command[1:]).shards)
    queues = {hop_queue(region, shard) for region, shard in shards}
    triggers = scaled["spec"]["triggers"]
    (rabbit,) = [t for t in triggers if t["type"] == "rabbitmq"]
    assert rabbit["metadata"]["queueName"] in queues
    assert rabbit["metadata"]["protocol"] == "amqp"  # a passive declare: no management API
    assert rabbit["metadata"]["mode"] == "QueueLength" and int(rabbit["metadata"]["value"]) > 0
    (auth,) = [d for d in RABBITMQ if d["kind"] == "TriggerAuthentication"]
    assert auth["metadata"]["name"] == rabbit["authenticationRef"]["name"]
    assert {(r["parameter"], r["key"]) for r in auth["spec"]["secretTargetRef"]} == {
        ("host", "broker-url")}  # the URL the workers use (the Deployment's broker-url)
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HOPTUNE_BROKER_URL",
            "valueFrom": {"secretKeyRef": {"name": "hoptune", "key": "broker-url"}}} in env
    exported = _exported(tmp_path)
    for trigger in [t for t in triggers if t["type"] == "prometheus"]:
        metric = re.fullmatch(r'max\((\w+)\{queue="[^"]+"\}\)',
                              trigger["metadata"]["query"]).group(1)
        assert metric in exported


def _exported(folder: Path) -> set[str]:
    """The names ``hoptune metrics`` serves, from its collector over an empty database."""
    from hoptune.tuner import StudyDB

    collector = ClusterCollector(StudyDB(f"sqlite:///{folder / 'studies.db'}"), {"north": 2},
                                 lambda queue: 0)
    return {family.name for family in collector.collect()}
