"""Worker processes and their heartbeats, and the shards taken over from dead owners.

Liveness is a heartbeat, not a timeout: each worker process touches its row
every few seconds; a hop whose holder's row is older than the liveness bound
belongs to a worker that is gone, and the sweeper sends it again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select, update

from hoptune.tuner._schema import row_dict, takeovers, utcnow, workers
from hoptune.tuner._studydb import StudyDB

__all__ = ["RETIRED_AT", "WorkerRecords"]

RETIRED_AT = datetime(1970, 1, 1, tzinfo=UTC)  # the heartbeat of a worker that stopped cleanly


class WorkerRecords:
    """The ``workers`` and ``takeovers`` tables."""

    def __init__(self, db: StudyDB) -> None:
        self.db = db

    def register(self, worker_id: str, *, name: str, host: str, pid: int,
                 shards: list[list[Any]], info: dict[str, Any] | None = None) -> None:
        now = utcnow()
        with self.db.transaction() as conn:
            conn.execute(delete(workers).where(workers.c.id == worker_id))
            conn.execute(workers.insert().values(
                id=worker_id, name=name, host=host, pid=pid, shards=shards, info=info or {},
                started_at=now, heartbeat_at=now))

    def beat(self, worker_id: str, info: dict[str, Any] | None = None) -> bool:
        """Touch the worker's heartbeat; False if its row is gone (or retired)."""
        values: dict[str, Any] = {"heartbeat_at": utcnow()}
        if info is not None:
            values["info"] = info
        with self.db.transaction() as conn:
            return conn.execute(update(workers).where(workers.c.id == worker_id,
                                                      workers.c.heartbeat_at > RETIRED_AT)
                                .values(**values)).rowcount == 1

    def retire(self, worker_id: str) -> None:
        """A worker process that stops cleanly says so: its hops need no liveness wait.

        Its row stays, its heartbeat set to ``RETIRED_AT`` (never live) and its info
        marked ``retired``: the device and host class its hops trained on are what the
        planner's cost model is keyed by.
        """
        with self.db.transaction() as conn:
            row = conn.execute(select(workers.c.info).where(workers.c.id == worker_id)).first()
            if row is not None:
                conn.execute(update(workers).where(workers.c.id == worker_id).values(
                    heartbeat_at=RETIRED_AT, info={**(row[0] or {}), "retired": True}))

    def all(self) -> list[dict[str, Any]]:
        with self.db.transaction() as conn:
            return [row_dict(r) for r in conn.execute(select(workers).order_by(workers.c.name))]

    def live(self, after: datetime) -> list[dict[str, Any]]:
        """Worker processes whose heartbeat is newer than ``after``."""
        return [w for w in self.all() if w["heartbeat_at"] > after]

    def prune(self, before: datetime) -> int:
        """Forget worker rows silent since ``before`` (long dead); returns how many."""
        with self.db.transaction() as conn:
            return conn.execute(delete(workers).where(workers.c.heartbeat_at < before)).rowcount

    def add_takeover(self, queue: str, worker: str, reason: str) -> None:
        with self.db.transaction() as conn:
            conn.execute(takeovers.insert().values(queue=queue, worker=worker, reason=reason,
                                                   at=utcnow()))

    def takeovers(self) -> list[dict[str, Any]]:
        with self.db.transaction() as conn:
            return [row_dict(r) for r in conn.execute(select(takeovers)
                                                       .order_by(takeovers.c.id))]
