"""The dead-letter list: messages set aside because no worker may act on them.

A Redis list (``hoptune.dead``) next to the queues, newest first, capped and
expiring a week after the last entry, as a broker's dead-letter queue would:
an operator reads it (``hoptune status`` shows its length), nothing consumes it.
"""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["DEAD_LETTERS", "DEAD_LETTER_TTL", "push_dead_letter", "read_dead_letters"]

DEAD_LETTERS = "hoptune.dead"
DEAD_LETTER_TTL = 7 * 24 * 3600
_KEEP = 10_000  # entries; the oldest go first
_BODY_CHARS = 4096  # of each message, enough to see what it was


def push_dead_letter(client: Any, queue: str, reason: str, body: str) -> None:
    """Record one set-aside message; ``client`` is a redis-py client of the broker."""
    entry = json.dumps({"queue": queue, "reason": reason, "at": time.time(),
                        "body": body[:_BODY_CHARS]})
    with client.pipeline() as pipe:
        pipe.lpush(DEAD_LETTERS, entry)
        pipe.ltrim(DEAD_LETTERS, 0, _KEEP - 1)
        pipe.expire(DEAD_LETTERS, DEAD_LETTER_TTL)
        pipe.execute()


def read_dead_letters(client: Any, count: int = 100) -> tuple[int, list[dict[str, Any]]]:
    """How many messages are set aside, and the newest ``count`` of them."""
    total = int(client.llen(DEAD_LETTERS))
    return total, [json.loads(e) for e in client.lrange(DEAD_LETTERS, 0, count - 1)]
