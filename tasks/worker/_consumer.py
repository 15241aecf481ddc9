"""The worker's Celery consumer: a message Celery cannot read is set aside, not dropped."""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.consumer import Consumer

from hoptune.tasks.worker._dead_letter import record_dead_letter

__all__ = ["SetAsideConsumer"]

log = logging.getLogger(__name__)


class SetAsideConsumer(Consumer):
    """Celery's consumer, setting aside (not dropping) a message it cannot read.

    On Redis, hoptune's transport decodes each message before Celery sees it
    (``_transport``); on RabbitMQ the envelope is AMQP's own, and what Celery
    cannot decode (bytes that are not JSON, a pickle), or finds no task for,
    arrives here. Each is logged once, recorded in the dead letters with its
    reason, and acknowledged, and the worker goes on.
    """

    def _set_aside(self, message: Any, reason: str) -> None:
        queue = (message.delivery_info or {}).get("routing_key") or "?"
        body = message.body.decode("utf-8", "replace") if isinstance(message.body, bytes) \
            else str(message.body)
        log.error("message on queue %s set aside: %s", queue, reason)
        try:
            with self.app.connection_for_write() as conn:
                record_dead_letter(conn, queue, reason, body)
        finally:
            message.ack()

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        content_type = message.content_type
        if content_type and content_type != "application/json":
            reason = f"content type {content_type!r} refused: hoptune accepts JSON only"
        else:
            reason = f"not JSON: {exc}"
        self._set_aside(message, reason)

    def on_unknown_message(self, body: Any, message: Any) -> None:
        self._set_aside(message, "no task header")

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        self._set_aside(message, f"unknown task {(message.headers or {}).get('task')!r}")

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        self._set_aside(message, f"invalid task message: {exc}")
