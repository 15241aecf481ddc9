"""The worker process: what it holds and how it talks.

Its runtime (store, study database, device, shard cache), the device it trains
on, liveness by heartbeat, the messages and their Redis transport, RabbitMQ's
queues, the dead letters, which failures are transient, checkpoints, the embedded
broker, and the worker info that status and Flower show. The lowest floor of
``tasks``: it imports no other part of it.
"""

from __future__ import annotations

from hoptune.core import lazy_names

_NAMES = {
    "EmbeddedRedis": "hoptune.tasks.worker._broker",
    "ping": "hoptune.tasks.worker._broker",
    "redis_client": "hoptune.tasks.worker._broker",
    "socket_url": "hoptune.tasks.worker._broker",
    "Checkpoint": "hoptune.tasks.worker._checkpoint",
    "checkpoint_key": "hoptune.tasks.worker._checkpoint",
    "encode_checkpoint": "hoptune.tasks.worker._checkpoint",
    "keep_final": "hoptune.tasks.worker._checkpoint",
    "load_checkpoint": "hoptune.tasks.worker._checkpoint",
    "previous_position": "hoptune.tasks.worker._checkpoint",
    "save_checkpoint": "hoptune.tasks.worker._checkpoint",
    "write_encoded": "hoptune.tasks.worker._checkpoint",
    "set_aside": "hoptune.tasks.worker._checkpoint",
    "SetAsideConsumer": "hoptune.tasks.worker._consumer",
    "DEAD_LETTERS": "hoptune.tasks.worker._dead_letter",
    "count_dead_letters": "hoptune.tasks.worker._dead_letter",
    "push_dead_letter": "hoptune.tasks.worker._dead_letter",
    "record_dead_letter": "hoptune.tasks.worker._dead_letter",
    "AMQP": "hoptune.tasks.worker._rabbitmq",
    "is_amqp": "hoptune.tasks.worker._rabbitmq",
    "gpu_info": "hoptune.tasks.worker._device",
    "gpus": "hoptune.tasks.worker._device",
    "local_devices": "hoptune.tasks.worker._device",
    "visible_gpus": "hoptune.tasks.worker._device",
    "worker_device": "hoptune.tasks.worker._device",
    "worker_environment": "hoptune.tasks.worker._device",
    "TRANSIENT": "hoptune.tasks.worker._failures",
    "describe": "hoptune.tasks.worker._failures",
    "WorkerInfoStep": "hoptune.tasks.worker._info",
    "answering_workers": "hoptune.tasks.worker._info",
    "describe_workers": "hoptune.tasks.worker._info",
    "publish_worker_info": "hoptune.tasks.worker._info",
    "worker_info": "hoptune.tasks.worker._info",
    "Heartbeat": "hoptune.tasks.worker._liveness",
    "host_class": "hoptune.tasks.worker._liveness",
    "live_after": "hoptune.tasks.worker._liveness",
    "chain_seconds": "hoptune.tasks.worker._liveness",
    "liveness_seconds": "hoptune.tasks.worker._liveness",
    "keep_freed_memory": "hoptune.tasks.worker._memory",
    "BadMessage": "hoptune.tasks.worker._messages",
    "CONTROL_QUEUE": "hoptune.tasks.worker._messages",
    "CohortMessage": "hoptune.tasks.worker._messages",
    "Dispatch": "hoptune.tasks.worker._messages",
    "HopMessage": "hoptune.tasks.worker._messages",
    "cohort_dispatch": "hoptune.tasks.worker._messages",
    "hop_dispatch": "hoptune.tasks.worker._messages",
    "RETRY_SECONDS": "hoptune.tasks.worker._messages",
    "hop_queue": "hoptune.tasks.worker._messages",
    "parse_cohort": "hoptune.tasks.worker._messages",
    "parse_hop": "hoptune.tasks.worker._messages",
    "promote_dispatch": "hoptune.tasks.worker._messages",
    "tune_step_after_end": "hoptune.tasks.worker._messages",
    "tune_step_dispatch": "hoptune.tasks.worker._messages",
    "take_lease": "hoptune.tasks.worker._leases",
    "Runtime": "hoptune.tasks.worker._runtime",
    "parse_shard_spec": "hoptune.tasks.worker._runtime",
    "region_of": "hoptune.tasks.worker._runtime",
    "runtime": "hoptune.tasks.worker._runtime",
    "study_manifest": "hoptune.tasks.worker._runtime",
    "consumer_url": "hoptune.tasks.worker._transport",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
