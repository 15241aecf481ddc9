"""RabbitMQ as hoptune's broker: quorum queues and a dead-letter exchange.

With ``HOPTUNE_BROKER_URL=amqp://USER:PASS@HOST:5672/VHOST`` every queue hoptune
declares (one per shard, ``hop.REGION.SHARD``, and ``hoptune.control``) is a
durable quorum queue whose dead-letter exchange is ``hoptune.dead``: whatever
RabbitMQ itself dead-letters (a message rejected, or redelivered past the
queue's delivery limit) lands in the queue ``hoptune.dead``, where a worker
also publishes each message it sets aside, with the reason. Quorum queues have
no priorities; hoptune's messages carry none (``task_queue_max_priority`` is
unset), so nothing is lost by that.

Every process must declare a queue with the same arguments, or RabbitMQ refuses
the second declaration: the Celery apps of workers, senders and tests all take
their queues from ``AMQP`` here (``Celery(..., amqp=AMQP)``). What a worker
cannot read is set aside by ``_consumer.SetAsideConsumer``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from amqp import spec
from celery.app import amqp as celery_amqp
from kombu import Connection, Exchange, Queue

__all__ = ["AMQP", "AMQP_CLASS", "DEAD_LETTER_ARGUMENTS", "count_dead_letters",
           "dead_letter_queue", "is_amqp", "publish_dead_letter", "queue_arguments",
           "read_dead_letters"]

log = logging.getLogger(__name__)

AMQP_CLASS = f"{__name__}:AMQP"

#: The exchange and queue of set-aside messages (the Redis list's name, too).
DEAD_LETTERS = "hoptune.dead"
_KEEP = 10_000  # messages; the oldest go first, as the Redis list's
_TTL_MS = 7 * 24 * 3600 * 1000

#: The dead-letter queue's own arguments: a quorum queue, capped, expiring after a week.
DEAD_LETTER_ARGUMENTS = {"x-queue-type": "quorum", "x-max-length": _KEEP,
                         "x-message-ttl": _TTL_MS}


def is_amqp(url: str | None) -> bool:
    """Whether ``url`` names a RabbitMQ (AMQP 0-9-1) broker."""
    return bool(url) and str(url).split("://", 1)[0] in ("amqp", "amqps", "pyamqp")


def queue_arguments() -> dict[str, Any]:
    """The arguments of every queue hoptune declares on RabbitMQ."""
    return {"x-queue-type": "quorum", "x-dead-letter-exchange": DEAD_LETTERS}


def dead_letter_queue() -> Queue:
    """The dead-letter queue, bound to the dead-letter exchange (a fanout: every letter)."""
    exchange = Exchange(DEAD_LETTERS, "fanout", durable=True)
    return Queue(DEAD_LETTERS, exchange, durable=True, queue_arguments=DEAD_LETTER_ARGUMENTS)


class _Queues(celery_amqp.Queues):
    """Celery's queue table; on RabbitMQ each queue added is a durable quorum queue."""

    rabbitmq = False

    def _add(self, queue: Queue) -> Queue:
        if self.rabbitmq:
            queue.queue_arguments = {**(queue.queue_arguments or {}), **queue_arguments()}
            queue.durable, queue.auto_delete, queue.exclusive = True, False, False
        return super()._add(queue)


class _RabbitQueues(_Queues):
    rabbitmq = True


class AMQP(celery_amqp.AMQP):
    """Celery's AMQP helpers, with hoptune's queue arguments where the broker is RabbitMQ."""

    @property
    def queues_cls(self) -> type[celery_amqp.Queues]:  # type: ignore[override]
        return _RabbitQueues if is_amqp(self.app.conf.broker_url) else _Queues


def publish_dead_letter(conn: Connection, entry: str) -> None:
    """Publish one set-aside entry (JSON) through the dead-letter exchange, confirmed."""
    queue = dead_letter_queue()
    with conn.Producer() as producer:
        producer.publish(entry.encode(), exchange=queue.exchange, routing_key=DEAD_LETTERS,
                         content_type="application/json", content_encoding="utf-8",
                         delivery_mode=2, declare=[queue], retry=True)


def count_dead_letters(conn: Connection) -> int:
    """How many messages wait in the dead-letter queue (0 before any was set aside)."""
    channel = conn.channel()
    try:
        return int(channel.queue_declare(DEAD_LETTERS, passive=True).message_count)
    except conn.channel_errors:
        return 0  # RabbitMQ says "no such queue" by closing the channel: none set aside
    finally:
        try:
            channel.close()
        except Exception:  # noqa: BLE001, S110 - a channel the broker closed already
            pass


def read_dead_letters(conn: Connection, count: int) -> tuple[int, list[dict[str, Any]]]:
    """How many messages are set aside, and the newest ``count`` of them, newest first.

    Read without consuming: the messages are taken unacknowledged and given back
    (RabbitMQ counts them again a moment later). A message RabbitMQ dead-lettered
    itself (not one hoptune published) is described from its ``x-death`` headers.
    """
    total = count_dead_letters(conn)
    entries: list[dict[str, Any]] = []
    if not total:
        return 0, []
    channel = conn.channel()
    try:
        while True:
            message = channel.basic_get(DEAD_LETTERS, no_ack=False)
            if message is None:
                break
            entries.append(_entry(message))
        # every message read goes back, in its order, before this returns (basic.recover is
        # synchronous; a closed channel would return them only some time after)
        channel.send_method(spec.Basic.Recover, "b", (True,), wait=spec.Basic.RecoverOk)
    finally:
        channel.close()
    return total, list(reversed(entries))[:count]


def _entry(message: Any) -> dict[str, Any]:
    headers = dict(getattr(message, "headers", None) or message.properties.get(
        "application_headers") or {})
    body = message.body.decode("utf-8", "replace") if isinstance(message.body, bytes) \
        else str(message.body)
    if "x-first-death-reason" not in headers:
        try:
            entry = json.loads(body)
        except ValueError:
            entry = None
        if isinstance(entry, dict) and "reason" in entry:
            return entry
    return {"queue": str(headers.get("x-first-death-queue", "?")),
            "reason": f"dead-lettered by RabbitMQ: {headers.get('x-first-death-reason', '?')}",
            "at": None, "body": body[:4096]}
