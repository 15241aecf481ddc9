"""What ``hoptune status`` says about health: failures and their reasons, workers, shards.

The study table says how far each study is; these sections say what went
wrong and where: every failed trial with its reason, hops whose last delivery
failed, each worker process's heartbeat (the device each trains on is in the
workers table above it), each shard queue's takeovers,
and how many messages wait in the dead-letter list.
"""

from __future__ import annotations

from typing import Any

from hoptune.core import Settings
from hoptune.tasks.worker import live_after, liveness_seconds
from hoptune.tuner import HopRecords, StudyDB, WorkerRecords, utcnow

__all__ = ["health_sections"]


def health_sections(db: StudyDB, settings: Settings, regions: list[str]
                    ) -> list[tuple[str, list[dict[str, Any]], list[str]]]:
    """(title, rows, columns) for each section that has something to say."""
    out = []
    failures = []
    for study in db.studies():
        if regions and study.region not in regions:
            continue
        for trial in db.trials(study.id):
            if trial.state == "failed":
                failures.append({"region": study.region, "study": study.id,
                                 "trial": trial.number, "reason": trial.failure})
        promotion = study.promotion or {}
        if promotion.get("failed"):
            failures.append({"region": study.region, "study": study.id, "trial": "-",
                             "reason": f"promotion failed: {promotion['reason']}"})
        if study.state == "running":
            for hop in HopRecords(db).all(study_id=study.id):
                if hop.error and hop.state != "done":
                    failures.append({"region": study.region, "study": study.id,
                                     "trial": f"hop {hop.id}",
                                     "reason": f"{hop.errors} failed deliveries, last: "
                                               f"{hop.error}"})
    if failures:
        out.append(("failures:", failures, ["region", "study", "trial", "reason"]))
    records = WorkerRecords(db)
    alive = live_after()
    now = utcnow()
    def state(w: dict[str, Any]) -> str:
        if w["heartbeat_at"] <= alive:
            return "gone"
        # its imports and shards still loading: its first tasks wait for them
        return "warming up" if (w["info"] or {}).get("warm") is False else "live"

    workers = [{"worker": w["name"], "process": w["id"].rsplit("/", 2)[-2],
                "state": state(w),
                "heartbeat": f"{(now - w['heartbeat_at']).total_seconds():.0f} s ago",
                "shards": ",".join(f"{r}:{k}" for r, k in w["shards"] or [])}
               for w in records.all() if not (w["info"] or {}).get("retired")]
    if workers:
        out.append((f"worker heartbeats (a process is gone after "
                    f"{liveness_seconds():.0f} s without one):",
                    workers, ["worker", "process", "state", "heartbeat", "shards"]))
    takeovers = [{"queue": t["queue"], "worker": t["worker"], "at": f"{t['at']:%H:%M:%S}",
                  "reason": t["reason"]} for t in records.takeovers()]
    if takeovers:
        out.append(("shard takeovers:", takeovers, ["queue", "worker", "at", "reason"]))
    dead = _dead_letters(settings)
    if dead:
        out.append(("dead letters:", [{"messages": dead}], ["messages"]))
    return out


def _dead_letters(settings: Settings) -> int:
    """How many messages wait in the dead letters (0 when no broker answers)."""
    from hoptune.tasks.worker import (
        DEAD_LETTERS,
        count_dead_letters,
        is_amqp,
        ping,
        redis_client,
        socket_url,
    )

    url = settings.broker_url or socket_url(settings.embedded_socket)
    if not ping(url, 0.5):
        return 0
    if is_amqp(url):  # RabbitMQ's dead-letter queue, counted by a passive declare
        from kombu import Connection

        with Connection(url, connect_timeout=2.0) as conn:
            return count_dead_letters(conn)
    return int(redis_client(url, 1.0).llen(DEAD_LETTERS))
