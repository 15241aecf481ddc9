"""hoptune's Redis transport: a message that cannot be read is set aside, never fatal.

Layers, and what each one raises on a bad message:

- kombu's Redis channel pops the raw bytes (``BRPOP``) and decodes the JSON
  envelope itself; bytes that are not JSON raise ``JSONDecodeError`` in the
  worker's event loop, which Celery treats as unrecoverable and the worker
  stops. This channel decodes instead, and sets aside what fails: bytes that
  are not JSON, an envelope that is not kombu's (no body, headers or
  properties), a content type other than JSON (a pickle), a message with no
  task header or naming a task hoptune does not have.
- Celery decodes the body and finds the task; what reaches it is a JSON
  message for a hoptune task.
- The hop task checks its keyword arguments against the hop schema exactly
  (``_messages.parse_hop``) and sets aside what fails.
- The hop's claim checks the message against the study database (its study,
  region, trial, epoch, and the shard where the hop was placed) and against
  the shards this worker owns (``hoptune.tasks.hop._admission``); a
  ``tune_step`` naming no study is checked the same way. What fails is set aside.

Set aside means: logged once with its queue and the reason, and pushed to the
dead-letter list (``dead_letter.DEAD_LETTERS``), where an operator can read it
and ``hoptune status`` counts it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str

from hoptune.tasks.worker._dead_letter import push_dead_letter
from hoptune.tasks.worker._messages import TASK_NAMES

__all__ = ["Channel", "Transport", "consumer_url", "envelope_problem"]

log = logging.getLogger(__name__)


def envelope_problem(message: Any) -> str | None:
    """Why a decoded envelope cannot go to Celery, or None when it can."""
    if not isinstance(message, dict):
        return f"envelope is a JSON {type(message).__name__}, not an object"
    missing = [k for k in ("body", "headers", "properties") if not isinstance(message.get(k),
                                                                               (dict, str))]
    if missing or not isinstance(message.get("headers"), dict) or not isinstance(
            message.get("properties"), dict):
        return f"not a kombu envelope (missing or malformed: {', '.join(missing) or 'headers'})"
    content_type = message.get("content-type")
    if content_type != "application/json":
        return f"content type {content_type!r} refused: hoptune accepts JSON only"
    task = message["headers"].get("task")
    if not task:
        return "no task header"
    if task not in TASK_NAMES and not str(task).startswith("celery."):
        return f"unknown task {task!r}"
    return None


class Channel(kombu_redis.Channel):
    """kombu's Redis channel, with the envelope decoded here so that no message is fatal."""

    def _decode(self, raw: bytes | str, queue: str) -> dict[str, Any] | None:
        text = bytes_to_str(raw)
        try:
            message = json.loads(text)
        except ValueError as exc:
            reason = f"not JSON: {exc}"
        else:
            reason = envelope_problem(message)
            if reason is None:
                return message
        log.error("message on queue %s set aside: %s", queue, reason)
        with self.conn_or_acquire() as client:
            push_dead_letter(client, queue, reason, text)
        return None

    def _brpop_read(self, **options: Any) -> bool:
        # kombu's own _brpop_read, with its ``loads`` replaced by ``_decode``.
        try:
            try:
                dest__item = self.client.parse_response(self.client.connection, "BRPOP",
                                                        **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            if not dest__item:
                raise kombu_redis.Empty()
            dest, item = dest__item
            dest = bytes_to_str(dest).rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(dest)
            message = self._decode(item, dest)
            if message is not None:
                self.connection._deliver(message, dest)
            return True
        finally:
            self._in_poll = None
            flush = getattr(self, "_flush_brpop_reauth", None)
            if flush is not None:
                flush()

    def _get(self, queue: str) -> dict[str, Any]:
        # kombu's own _get (a poll without BRPOP), decoding through ``_decode``.
        with self.conn_or_acquire() as client:
            for pri in self.priority_steps:
                item = client.rpop(self._q_for_pri(queue, pri))
                if item:
                    self._maybe_update_queues_expire(client, queue)
                    message = self._decode(item, queue)
                    if message is not None:
                        return message
            self._maybe_update_queues_expire(client, queue)
            raise kombu_redis.Empty()


class Transport(kombu_redis.Transport):
    """The Redis transport with hoptune's channel."""

    Channel = Channel


_ALIAS = "hoptune-redis"
TRANSPORT_ALIASES.setdefault(_ALIAS, f"{__name__}:Transport")


def consumer_url(url: str) -> str:
    """The broker URL a worker consumes from: ``url`` on hoptune's Redis transport.

    ``redis://…`` and ``redis+socket://…`` become ``hoptune-redis://…`` and
    ``hoptune-redis+socket://…``; another scheme is returned as it is.
    """
    for scheme in ("redis://", "redis+socket://"):
        if url.startswith(scheme):
            return _ALIAS + url[len("redis"):]
    return url
