"""Queueing a hop: the one insert of a hop row, shared by the epoch records and the hop lifecycle.

An epoch's start queues its first hop (``StudyDB.start_epoch``, ``end_epoch``);
a trained hop queues the next (``HopRecords.finish``, ``hand_on``). A hop is
keyed by (trial, epoch, position): queueing one that exists changes nothing.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Connection

from hoptune.tuner._schema import hops, utcnow

__all__ = ["queue_hop"]


def queue_hop(conn: Connection, trial_id: int, epoch: int, position: int,
               shard: int) -> bool:
    exists = conn.execute(
        select(hops.c.id).where(hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                                hops.c.position == position)
    ).first()
    if exists is not None:
        return False
    conn.execute(hops.insert().values(trial_id=trial_id, epoch=epoch, position=position,
                                      shard=shard, state="queued", deliveries=0,
                                      interrupted=0,
                                      queued_at=utcnow()))
    return True
