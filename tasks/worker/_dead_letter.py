"""The dead letters: messages set aside because no worker may act on them.

On Redis, a list (``hoptune.dead``) next to the queues, newest first, capped and
expiring a week after the last entry, as a broker's dead-letter queue would. On
RabbitMQ, the quorum queue ``hoptune.dead`` behind the dead-letter exchange of
the same name, capped and expiring alike (``_rabbitmq``). An operator reads
them (``hoptune status`` shows how many), nothing consumes them.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kombu import Connection

__all__ = ["DEAD_LETTERS", "DEAD_LETTER_TTL", "count_dead_letters", "push_dead_letter",
           "read_dead_letters", "record_dead_letter"]

DEAD_LETTERS = "hoptune.dead"
DEAD_LETTER_TTL = 7 * 24 * 3600
_KEEP = 10_000  # entries; the oldest go first
_BODY_CHARS = 4096  # of each message, enough to see what it was


def _entry(queue: str, reason: str, body: str) -> str:
    return json.dumps({"queue": queue, "reason": reason, "at": time.time(),
                       "body": body[:_BODY_CHARS]})


def _is_rabbitmq(conn: Any) -> bool:
    return isinstance(conn, Connection) and conn.transport.driver_type == "amqp"


def record_dead_letter(conn: Connection, queue: str, reason: str, body: str) -> None:
    """Record one set-aside message in the broker of ``conn`` (a kombu connection)."""
    if _is_rabbitmq(conn):
        from hoptune.tasks.worker._rabbitmq import publish_dead_letter

        publish_dead_letter(conn, _entry(queue, reason, body))
    else:
        push_dead_letter(conn.default_channel.client, queue, reason, body)


def count_dead_letters(conn: Connection) -> int:
    """How many messages are set aside in the broker of ``conn``."""
    if _is_rabbitmq(conn):
        from hoptune.tasks.worker._rabbitmq import count_dead_letters as count

        return count(conn)
    return int(conn.default_channel.client.llen(DEAD_LETTERS))


def push_dead_letter(client: Any, queue: str, reason: str, body: str) -> None:
    """Record one set-aside message; ``client`` is a redis-py client of the broker."""
    entry = _entry(queue, reason, body)
    with client.pipeline() as pipe:
        pipe.lpush(DEAD_LETTERS, entry)
        pipe.ltrim(DEAD_LETTERS, 0, _KEEP - 1)
        pipe.expire(DEAD_LETTERS, DEAD_LETTER_TTL)
        pipe.execute()


def read_dead_letters(client: Any, count: int = 100) -> tuple[int, list[dict[str, Any]]]:
    """How many messages are set aside, and the newest ``count`` of them.

    ``client`` is a redis-py client of the broker, or a kombu connection to either broker.
    """
    if _is_rabbitmq(client):
        from hoptune.tasks.worker._rabbitmq import read_dead_letters as read

        return read(client, count)
    if isinstance(client, Connection):
        client = client.default_channel.client
    total = int(client.llen(DEAD_LETTERS))
    return total, [json.loads(e) for e in client.lrange(DEAD_LETTERS, 0, count - 1)]
