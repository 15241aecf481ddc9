"""The hop lifecycle in the study database: queued, claimed, trained, handed on; or given back.

A hop is one trial trained once over one shard. Its row is queued when the
epoch starts or the previous hop hands on; a delivery claims it atomically
(one live holder at a time, so duplicates and replicas never train twice);
the holder records it done and places the next hop in the same transaction,
or gives it back when its delivery failed. The sweeper re-queues hops whose
holder died, and a hop whose checkpoint was lost is rewound.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection

from hoptune.tuner._hop_queue import queue_hop
from hoptune.tuner._placement import ShardLoads, next_shard, placed_order
from hoptune.tuner._rows import HopPosition, HopRow, WaitingHop
from hoptune.tuner._schema import epochs, hops, studies, trials, utcnow, workers
from hoptune.tuner._statements import (
    EPOCH_ORDER,
    HOP,
    HOP_DELIVERED,
    HOP_DONE,
    HOP_ID,
    HOP_LOCKED,
    HOP_SET,
    HOP_SET_INTERRUPTED,
    TRIAL_SET,
    hop_key,
)
from hoptune.tuner._studydb import StudyDB

__all__ = ["HopClaim", "HopRecords"]


class HopClaim(NamedTuple):
    """What a delivery's claim found: ``claimed``, ``held`` or ``done``; the hop as the claim
    left it; and the worker that had it before (where a claimed hop last ran)."""

    outcome: str
    hop: HopRow
    previous_worker: str | None


class HopRecords:
    """The hops of every study, in the study database: each public method is one transaction
    (or runs inside the caller's, where it takes ``conn``)."""

    def __init__(self, db: StudyDB) -> None:
        self.db = db

    def claim(self, trial_id: int, epoch: int, position: int, shard: int, *,
              worker: str, holder: str, live_after: datetime) -> HopClaim:
        """Count a delivery of a hop and claim it for ``holder``, in one atomic step.

        The outcome is ``"claimed"`` when this delivery may train: the hop was
        queued, or its holder's heartbeat is older than ``live_after`` (the holder
        died mid-hop: counted in ``interrupted``); ``"held"`` when a live holder
        has it (a duplicate or a replica's copy: drop it, it is no interruption);
        ``"done"`` when it has finished already. The row is the hop as this
        delivery left it.
        """
        now = utcnow()
        key = hop_key(trial_id, epoch, position)
        with self.db.transaction() as conn:
            queue_hop(conn, trial_id, epoch, position, shard)
            # SQLite: BEGIN IMMEDIATE holds the database
            row = HopRow.from_row(conn.execute(HOP if self.db.is_sqlite else HOP_LOCKED,
                                               key).one())
            conn.execute(HOP_DELIVERED, key)
            row = replace(row, deliveries=row.deliveries + 1)
            if row.state == "done":
                return HopClaim("done", row, row.worker)
            values: dict[str, Any] = {**key, "state": "running", "worker": worker,
                                      "holder": holder, "started_at": now}
            interrupted = False
            if row.state == "running":
                live = conn.execute(select(workers.c.id).where(
                    workers.c.id == row.holder, workers.c.heartbeat_at > live_after)).first()
                if live is not None and row.holder != holder:
                    return HopClaim("held", row, row.worker)
                if row.holder != holder:
                    interrupted = True
                    row = replace(row, interrupted=row.interrupted + 1)
            conn.execute(HOP_SET_INTERRUPTED if interrupted else HOP_SET, values)
            conn.execute(TRIAL_SET, {"key_trial": trial_id, "updated_at": now})
            claimed = replace(row, state="running", worker=worker, holder=holder)
            return HopClaim("claimed", claimed, row.worker)

    def release(self, trial_id: int, epoch: int, position: int, *, holder: str,
                error: str | None = None) -> HopRow | None:
        """Give a claimed hop back to the queue (its delivery failed), recording ``error``.

        Returns the hop row after the release, or None when ``holder`` no
        longer held it.
        """
        key = (hops.c.trial_id == trial_id, hops.c.epoch == epoch, hops.c.position == position)
        values: dict[str, Any] = {"state": "queued", "holder": None, "queued_at": utcnow()}
        if error is not None:
            values.update(error=error, errors=hops.c.errors + 1)
        with self.db.transaction() as conn:
            result = conn.execute(update(hops).where(*key, hops.c.state == "running",
                                                     hops.c.holder == holder).values(**values))
            if result.rowcount != 1:
                return None
            return HopRow.from_row(conn.execute(select(hops).where(*key)).one())

    def writer_alive(self, trial_id: int, epoch: int, position: int, live_after: datetime,
                     me: str | None = None) -> bool:
        """Whether the process that trained done hop (epoch, position) may still write its
        checkpoint behind its hand-on: True while that process is ``me`` (the asking one)
        or its heartbeat is newer than ``live_after``, and it has not said its write failed
        (``write_failed``); False once it is dead, its write failed, or the hop is no longer
        done (rewound)."""
        with self.db.reading() as conn:
            row = conn.execute(select(hops.c.state, hops.c.holder).where(
                hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                hops.c.position == position)).first()
            if row is None or row.state != "done" or row.holder is None:
                return False
            return row.holder == me or conn.execute(select(workers.c.id).where(
                workers.c.id == row.holder, workers.c.heartbeat_at > live_after)
            ).first() is not None

    def write_failed(self, trial_id: int, epoch: int, position: int, *, holder: str,
                     reason: str) -> bool:
        """``holder`` could not write done hop (epoch, position)'s checkpoint: said on its row
        (``reason`` as its error, no longer its writer), so a reader stops waiting for it
        and runs the hop again. False if the row no longer says ``holder`` trained it."""
        with self.db.transaction() as conn:
            result = conn.execute(update(hops).where(
                hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                hops.c.position == position, hops.c.state == "done",
                hops.c.holder == holder).values(holder=None, error=reason))
            return result.rowcount == 1

    def release_dead(self, live_after: datetime) -> list[HopRow]:
        """Hops running on a holder whose heartbeat is older than ``live_after``, re-queued.

        Each counts as interrupted; the caller sends its message again.
        """
        now = utcnow()
        alive = select(workers.c.id).where(workers.c.heartbeat_at > live_after)
        with self.db.transaction() as conn:
            dead = [HopRow.from_row(r) for r in conn.execute(select(hops).where(
                hops.c.state == "running",
                (hops.c.holder.is_(None)) | (hops.c.holder.not_in(alive))))]
            for hop in dead:
                conn.execute(update(hops).where(hops.c.id == hop.id,
                                                hops.c.state == "running").values(
                    state="queued", holder=None, queued_at=now,
                    interrupted=hops.c.interrupted + 1))
            return dead

    def waiting(self, before: datetime) -> list[WaitingHop]:
        """Queued hops of running trials of running studies, queued before ``before``.

        Each row carries its study and region, for routing the message again.
        """
        with self.db.reading() as conn:
            rows = conn.execute(
                select(hops, studies.c.id.label("study_id"), studies.c.region)
                .join(trials, trials.c.id == hops.c.trial_id)
                .join(studies, studies.c.id == trials.c.study_id)
                .where(hops.c.state == "queued", hops.c.queued_at < before,
                       trials.c.state == "running", studies.c.state == "running"))
            return [WaitingHop.from_row(r) for r in rows]

    def rewind(self, trial_id: int, epoch: int, position: int, *, reason: str
                   ) -> int | None:
        """Run hop (epoch, position) again: its checkpoint is lost or unreadable (``reason``).

        The hop goes back to queued with ``reason`` as its error, and the hops
        after it in the trial are forgotten (their records are replaced when
        they run again). Returns how many times the hop's output was lost, or
        None (nothing changed) if the trial is no longer running.
        """
        now = utcnow()
        key = (hops.c.trial_id == trial_id, hops.c.epoch == epoch, hops.c.position == position)
        with self.db.transaction() as conn:
            trial = conn.execute(select(trials.c.state).where(trials.c.id == trial_id)).one()
            if trial.state != "running":
                return None
            later = (hops.c.epoch > epoch) | ((hops.c.epoch == epoch)
                                              & (hops.c.position > position))
            conn.execute(hops.delete().where(hops.c.trial_id == trial_id, later,
                                             hops.c.position > 0))
            conn.execute(update(hops).where(hops.c.trial_id == trial_id, later).values(
                state="queued", holder=None, queued_at=now, finished_at=None))
            conn.execute(update(hops).where(*key).values(
                state="queued", holder=None, queued_at=now, finished_at=None, error=reason,
                errors=hops.c.errors + 1))
            conn.execute(update(trials).where(trials.c.id == trial_id).values(updated_at=now))
            return int(conn.execute(select(hops.c.errors).where(*key)).scalar_one())

    def get(self, trial_id: int, epoch: int, position: int, conn: Connection | None = None
            ) -> HopRow | None:
        if conn is None:
            with self.db.reading() as own:
                return self.get(trial_id, epoch, position, own)
        row = conn.execute(HOP, hop_key(trial_id, epoch, position)).first()
        return HopRow.from_row(row) if row is not None else None

    def finish(self, trial_id: int, epoch: int, position: int, *,
                   next_hop: tuple[int, int] | None, **values: Any) -> bool:
        """Record a trained hop and queue the next one (position, shard) in one transaction.

        Returns True if the next hop was newly queued (the caller sends its
        message); False if an earlier delivery already queued it.
        """
        with self.db.transaction() as conn:
            self._record_done(conn, trial_id, epoch, position, values)
            if next_hop is None:
                return False
            return queue_hop(conn, trial_id, epoch, next_hop[0], next_hop[1])

    def _record_done(self, conn: Connection, trial_id: int, epoch: int, position: int,
                     values: dict[str, Any]) -> None:
        now = utcnow()
        # its holder stays: the writer
        conn.execute(HOP_DONE, {**hop_key(trial_id, epoch, position), **values, "state": "done",
                                "finished_at": now})
        conn.execute(TRIAL_SET, {"key_trial": trial_id, "updated_at": now})

    def hand_on(self, trial_id: int, epoch: int, position: int, *, region: str,
                    shards: int, live_after: datetime, place: int | None = None,
                    **values: Any) -> int | None:
        """Record a trained hop and place the epoch's next hop, in one transaction.

        The next shard is chosen among the epoch's unvisited shards by the
        current load of their workers (``tuner._placement``) and recorded at
        once in the epoch's visit order. Returns the shard of the newly queued
        next hop (the caller sends its message); None after the epoch's last
        hop, or if an earlier delivery already queued the next one.
        """
        following = position + 1
        with self.db.transaction() as conn:
            # the loads matter only where there is a choice: not for an epoch's last shard
            choice = following + 1 < shards
            mine = conn.execute(HOP, hop_key(trial_id, epoch, position)).first() if choice else None
            here = None if mine is None else mine.holder
            self._record_done(conn, trial_id, epoch, position, values)
            if following >= shards or conn.execute(
                    HOP_ID, hop_key(trial_id, epoch, following)).first() is not None:
                return None
            order = list(conn.execute(EPOCH_ORDER, {"key_trial": trial_id,
                                                    "key_epoch": epoch}).scalar_one())
            shard = order[following]
            if place is not None and place in order[following:]:
                shard = place
            elif choice:
                shard = next_shard(order[following:], self.shard_loads(region, live_after, conn),
                                   shards, here)
            if shard != order[following]:
                conn.execute(update(epochs).where(epochs.c.trial_id == trial_id,
                                                  epochs.c.epoch == epoch)
                             .values(visit_order=placed_order(order, following, shard)))
            queue_hop(conn, trial_id, epoch, following, shard)
            return shard

    def shard_loads(self, region: str, live_after: datetime, conn: Connection | None = None
                    ) -> ShardLoads:
        """Hops waiting and running per shard of ``region``, and its live workers' shards."""
        if conn is None:
            with self.db.reading() as own:
                return self.shard_loads(region, live_after, own)
        loads = ShardLoads(held={})
        assert loads.held is not None
        rows = conn.execute(
            select(hops.c.shard, hops.c.state, hops.c.holder)
            .join(trials, trials.c.id == hops.c.trial_id)
            .join(studies, studies.c.id == trials.c.study_id)
            .where(studies.c.region == region, studies.c.state == "running",
                   trials.c.state == "running", hops.c.state.in_(("queued", "running"))))
        for shard, state, holder in rows:
            counts = loads.queued if state == "queued" else loads.running
            counts[shard] = counts.get(shard, 0) + 1
            if state == "running" and holder is not None:
                loads.held[holder] = loads.held.get(holder, 0) + 1
        for worker, owned in conn.execute(select(workers.c.id, workers.c.shards)
                                          .where(workers.c.heartbeat_at > live_after)):
            for name, k in owned or []:
                if name == region:
                    loads.owners.setdefault(int(k), []).append(worker)
        return loads

    def all(self, trial_id: int | None = None, *, study_id: int | None = None
             ) -> list[HopRow]:
        query = select(hops).order_by(hops.c.trial_id, hops.c.epoch, hops.c.position)
        if trial_id is not None:
            query = query.where(hops.c.trial_id == trial_id)
        if study_id is not None:
            query = query.where(hops.c.trial_id.in_(
                select(trials.c.id).where(trials.c.study_id == study_id)))
        with self.db.reading() as conn:
            return [HopRow.from_row(r) for r in conn.execute(query)]

    def since(self, since: datetime) -> list[HopRow]:
        """Every hop running now or finished at or after ``since``, of any study."""
        query = select(hops).where((hops.c.state == "running") | (hops.c.finished_at >= since))
        with self.db.reading() as conn:
            return [HopRow.from_row(r) for r in conn.execute(query.order_by(hops.c.id))]

    def last(self, trial_id: int) -> HopRow | None:
        """The trial's furthest hop record (by epoch, then position)."""
        with self.db.reading() as conn:
            row = conn.execute(
                select(hops).where(hops.c.trial_id == trial_id)
                .order_by(hops.c.epoch.desc(), hops.c.position.desc()).limit(1)
            ).first()
            return HopRow.from_row(row) if row is not None else None

    def running_positions(self, study_id: int, conn: Connection | None = None
                          ) -> list[HopPosition]:
        """For each running trial of the study: its current epoch's visit order and position."""
        if conn is None:
            with self.db.reading() as own:
                return self.running_positions(study_id, own)
        latest = (
            select(hops.c.trial_id, func.max(hops.c.id).label("hop_id"))
            .join(trials, trials.c.id == hops.c.trial_id)
            .where(trials.c.study_id == study_id, trials.c.state == "running")
            .group_by(hops.c.trial_id)
            .subquery()
        )
        rows = conn.execute(
            select(hops.c.trial_id, hops.c.epoch, hops.c.position, epochs.c.visit_order)
            .join(latest, latest.c.hop_id == hops.c.id)
            .join(epochs, (epochs.c.trial_id == hops.c.trial_id)
                  & (epochs.c.epoch == hops.c.epoch))
        )
        return [HopPosition.from_row(r) for r in rows]

    def done_count(self, study_id: int) -> int:
        """How many hops of the study have finished."""
        with self.db.reading() as conn:
            return int(conn.execute(
                select(func.count()).select_from(hops)
                .join(trials, trials.c.id == hops.c.trial_id)
                .where(trials.c.study_id == study_id, hops.c.state == "done")
            ).scalar_one())
