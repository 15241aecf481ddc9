"""Celery configuration of hoptune, with its environment overrides, in one place.

Loaded by name (``app.config_from_object("hoptune.tasks.celeryconfig")``). Every
process of a cluster (workers, beat, the command line, Flower) must see the
same values; the Redis visibility timeout in particular must be identical
everywhere and longer than the longest hop, or a slow hop is delivered twice.
"""

from __future__ import annotations

import os

from hoptune.core import Settings
from hoptune.tasks.worker import consumer_url, is_amqp

_settings = Settings.from_env()

#: The broker: ``HOPTUNE_BROKER_URL``, or the embedded Redis on a unix socket under HOPTUNE_HOME.
broker_url = _settings.broker_url or f"redis+socket://{_settings.embedded_socket}"
# Workers consume through hoptune's Redis transport, which sets aside a message it cannot
# read instead of stopping the worker (tasks/worker/_transport.py); senders use plain Redis.
broker_read_url = consumer_url(broker_url)
#: RabbitMQ (``amqp://USER:PASS@HOST:5672/VHOST``) instead of Redis: see ``worker._rabbitmq``.
rabbitmq = is_amqp(broker_url)
# Redis holds only queues and transient results; nothing hoptune needs lives there. RabbitMQ
# keeps no results (hoptune reads none: every outcome is in the study database).
result_backend = os.environ.get("HOPTUNE_RESULT_BACKEND") or (None if rabbitmq else broker_url)
task_ignore_result = True

#: Seconds before Redis hands an unacknowledged hop to another worker.
visibility_timeout = int(os.environ.get("HOPTUNE_VISIBILITY_TIMEOUT", "7200"))
# On RabbitMQ a message is never handed on while its worker's connection lives, so there is
# no visibility timeout; every publish waits for the broker's confirm instead.
broker_transport_options = ({"confirm_publish": True} if rabbitmq
                            else {"visibility_timeout": visibility_timeout})
result_backend_transport_options = {"visibility_timeout": visibility_timeout}
broker_connection_retry_on_startup = True
#: How often a worker retries a lost broker before it gives up and exits with status 1, for
#: its supervisor to restart it (Celery's default, 100, is about an hour of retries).
broker_connection_max_retries = int(os.environ.get("HOPTUNE_BROKER_RETRIES", "100"))

# Messages are JSON and small: ids, keys and numbers, never pickles or tensors.
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
event_serializer = "json"

# At-least-once delivery: a hop is acknowledged only after it ran, and a hop
# whose worker died is delivered again; its checkpoint makes the effect exactly once.
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
worker_concurrency = 1  # one hop per GPU at a time

# Flower and `hoptune status` see every task.
worker_send_task_events = True
task_send_sent_event = True
task_track_started = True

# On RabbitMQ every queue (this one and each shard's) is a durable quorum queue whose
# dead-letter exchange is hoptune.dead: the app's queue table makes it so (worker._rabbitmq's
# AMQP). Quorum queues have no priorities; hoptune's messages carry none.
task_default_queue = "hoptune.control"
# A message Celery cannot read (not JSON, a pickle, no task) is set aside, not dropped.
worker_consumer = "hoptune.tasks.worker:SetAsideConsumer"
task_create_missing_queues = True
worker_hijack_root_logger = False
timezone = "UTC"
enable_utc = True
