"""Queueing a hop: the one insert of a hop row, shared by the epoch records and the hop lifecycle.

An epoch's start queues its first hop (``StudyDB.start_epoch``, ``end_epoch``);
a trained hop queues the next (``HopRecords.finish``, ``hand_on``). A hop is
keyed by (trial, epoch, position): queueing one that exists changes nothing.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from hoptune.tuner._schema import utcnow
from hoptune.tuner._statements import HOP_ID, HOP_NEW, hop_key

__all__ = ["queue_hop"]


def queue_hop(conn: Connection, trial_id: int, epoch: int, position: int,
               shard: int) -> bool:
    if conn.execute(HOP_ID, hop_key(trial_id, epoch, position)).first() is not None:
        return False
    conn.execute(HOP_NEW, {"trial_id": trial_id, "epoch": epoch, "position": position,
                          "shard": shard, "state": "queued", "deliveries": 0,
                          "interrupted": 0, "queued_at": utcnow()})
    return True
