"""Studies, trials, epochs and hops: the records a study is made of, behind SQLAlchemy.

One SQLite file under ``HOPTUNE_HOME`` by default, any SQLAlchemy URL
otherwise (PostgreSQL in a cluster). Every method runs one short transaction.
The record modules (this one, ``_nightly_records``, ``_locks``) are the only
ones that speak SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from hoptune.core import SchemaError, StudyError
from hoptune.tuner._engine import database_error, make_engine
from hoptune.tuner._placement import ShardLoads, next_shard, placed_order
from hoptune.tuner._revisions import open_schema
from hoptune.tuner._schema import (
    ACTIVE_STATES,
    TRIAL_STATES,
    epochs,
    hops,
    row_dict,
    studies,
    trials,
    utcnow,
    workers,
)

__all__ = ["StudyDB"]


class StudyDB:
    """Studies, trials, epochs and hops in one SQL database.

    Safe to share between threads of one process (SQLAlchemy's pool); each
    process opens its own. Every public method is one transaction.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        """Open the database and check its schema revision (once per process, before any work).

        An empty database is made at the newest revision (unless ``create`` is
        False); one at another revision raises ``SchemaError``.
        """
        self.url = url
        self.engine = make_engine(url)
        try:
            open_schema(self.engine, url, create=create)
        except SQLAlchemyError as exc:
            self.engine.dispose()
            raise database_error(url, exc) from exc
        except SchemaError:
            self.engine.dispose()
            raise

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()

    # studies -------------------------------------------------------------

    def create_study(
        self,
        *,
        region: str,
        budget: int,
        parallel: int,
        epochs: int,
        seed: int,
        region_config: dict[str, Any],
        space: dict[str, Any] | None = None,
        data_hash: str | None = None,
        parent_id: int | None = None,
        minimize: bool = True,
        manifest: dict[str, Any] | None = None,
        nightly_run_id: int | None = None,
        kind: str = "tune",
    ) -> int:
        """Record a running study of ``region``.

        ``kind`` is ``"tune"``, or ``"calibration"`` for a study that only
        records hop costs for the planner: never promoted, never a warm start.

        The database holds one running study per region: while one runs, this
        raises ``StudyError`` naming it, so two commands starting a study of one
        region at once make one study, never two.
        """
        try:
            with self.transaction() as conn:
                result = conn.execute(
                    studies.insert().values(
                        manifest=manifest,
                        nightly_run_id=nightly_run_id,
                        region=region,
                        state="running",
                        created_at=utcnow(),
                        budget=budget,
                        parallel=parallel,
                        epochs=epochs,
                        seed=seed,
                        space=space,
                        region_config=region_config,
                        data_hash=data_hash,
                        parent_id=parent_id,
                        minimize=int(minimize),
                        kind=kind,
                    )
                )
                return int(result.inserted_primary_key[0])
        except IntegrityError:
            running = self.latest_study(region, state="running", kind=None)
            if running is None:
                raise
            raise StudyError(f"region {region!r} already has a running study "
                             f"({running['id']})") from None

    def study(self, study_id: int) -> dict[str, Any]:
        with self.transaction() as conn:
            return self._study(conn, study_id)

    def _study(self, conn: Connection, study_id: int, *, lock: bool = False) -> dict[str, Any]:
        query = select(studies).where(studies.c.id == study_id)
        if lock and not self.is_sqlite:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            raise StudyError(f"no study {study_id}")
        return row_dict(row)

    def studies(self, region: str | None = None) -> list[dict[str, Any]]:
        query = select(studies).order_by(studies.c.id)
        if region is not None:
            query = query.where(studies.c.region == region)
        with self.transaction() as conn:
            return [row_dict(r) for r in conn.execute(query)]

    def data_hashes_in_use(self) -> set[str]:
        """The data hashes of the running studies: what workers must keep cached."""
        query = select(studies.c.data_hash).where(studies.c.state == "running").distinct()
        with self.transaction() as conn:
            return {row[0] for row in conn.execute(query) if row[0] is not None}

    def latest_study(self, region: str, *, state: str | None = None,
                     kind: str | None = "tune") -> dict[str, Any] | None:
        """The region's newest study (of ``state``; of ``kind``, by default a tuning study)."""
        query = select(studies).where(studies.c.region == region)
        if state is not None:
            query = query.where(studies.c.state == state)
        if kind is not None:
            query = query.where(studies.c.kind == kind)
        with self.transaction() as conn:
            row = conn.execute(query.order_by(studies.c.id.desc()).limit(1)).first()
        return row_dict(row) if row is not None else None

    def finish_study(self, study_id: int, state: str, *, best_trial_id: int | None = None,
                     failure: str | None = None, conn: Connection | None = None) -> bool:
        """Mark a running study finished; False if it already was (so only one caller wins)."""
        if conn is None:
            with self.transaction() as own:
                return self.finish_study(study_id, state, best_trial_id=best_trial_id,
                                         failure=failure, conn=own)
        result = conn.execute(
            update(studies)
            .where(studies.c.id == study_id, studies.c.state == "running")
            .values(state=state, finished_at=utcnow(), best_trial_id=best_trial_id,
                    failure=failure)
        )
        return result.rowcount == 1

    @contextmanager
    def locked_study(self, study_id: int) -> Iterator[tuple[Connection, dict[str, Any]]]:
        """One transaction holding the study's lock: concurrent holders run one at a time.

        PostgreSQL locks the study row (``SELECT … FOR UPDATE``); SQLite's
        ``BEGIN IMMEDIATE`` already holds the database's write lock.
        """
        with self.transaction() as conn:
            yield conn, self._study(conn, study_id, lock=True)

    def set_study(self, study_id: int, conn: Connection | None = None, **values: Any) -> None:
        if conn is None:
            with self.transaction() as own:
                return self.set_study(study_id, own, **values)
        conn.execute(update(studies).where(studies.c.id == study_id).values(**values))

    # trials --------------------------------------------------------------

    def add_trials(self, conn: Connection, study_id: int,
                   entries: list[tuple[dict[str, Any], int]],
                   proposal_seconds: float | None = None) -> list[int]:
        """Insert pending trials (params, seed) inside the caller's transaction;
        ``proposal_seconds``: how long the ``tune_step`` proposing them had worked."""
        start = conn.execute(
            select(func.coalesce(func.max(trials.c.number), -1)).where(
                trials.c.study_id == study_id)
        ).scalar_one() + 1
        now = utcnow()
        ids = []
        for offset, (params, seed) in enumerate(entries):
            result = conn.execute(
                trials.insert().values(
                    study_id=study_id, number=start + offset, params=params, seed=seed,
                    state="pending", created_at=now, updated_at=now, epochs_done=0,
                    proposal_seconds=proposal_seconds,
                )
            )
            ids.append(int(result.inserted_primary_key[0]))
        return ids

    def create_trials(self, study_id: int, entries: list[tuple[dict[str, Any], int]]) -> list[int]:
        with self.transaction() as conn:
            return self.add_trials(conn, study_id, entries)

    def trial(self, trial_id: int, conn: Connection | None = None) -> dict[str, Any]:
        if conn is None:
            with self.transaction() as own:
                return self.trial(trial_id, own)
        row = conn.execute(select(trials).where(trials.c.id == trial_id)).first()
        if row is None:
            raise StudyError(f"no trial {trial_id}")
        return row_dict(row)

    def trials(self, study_id: int, conn: Connection | None = None,
               states: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        if conn is None:
            with self.transaction() as own:
                return self.trials(study_id, own, states)
        query = select(trials).where(trials.c.study_id == study_id).order_by(trials.c.number)
        if states is not None:
            query = query.where(trials.c.state.in_(states))
        return [row_dict(r) for r in conn.execute(query)]

    def end_trial(self, trial_id: int, state: str, *, failure: str | None = None) -> bool:
        """Move an active trial to a final state; False if it had already ended."""
        now = utcnow()
        with self.transaction() as conn:
            result = conn.execute(
                update(trials)
                .where(trials.c.id == trial_id, trials.c.state.in_(ACTIVE_STATES))
                .values(state=state, finished_at=now, updated_at=now, failure=failure)
            )
            return result.rowcount == 1

    # epochs --------------------------------------------------------------

    def start_epoch(self, trial_id: int, epoch: int, visit_order: list[int],
                    conn: Connection | None = None) -> tuple[list[int], bool]:
        """Record an epoch's visit order and queue its first hop; an existing record wins.

        Returns the visit order in force and whether this call created it, so
        a repeated request replays the order chosen the first time and sends
        no second first hop.
        """
        if conn is None:
            with self.transaction() as own:
                return self.start_epoch(trial_id, epoch, visit_order, own)
        existing = conn.execute(
            select(epochs.c.visit_order).where(epochs.c.trial_id == trial_id,
                                               epochs.c.epoch == epoch)
        ).first()
        if existing is not None:
            return list(existing[0]), False
        now = utcnow()
        conn.execute(epochs.insert().values(trial_id=trial_id, epoch=epoch,
                                            visit_order=list(visit_order), started_at=now))
        self._queue_hop(conn, trial_id, epoch, 0, visit_order[0])
        conn.execute(update(trials).where(trials.c.id == trial_id).values(
            state="running", updated_at=now,
            started_at=func.coalesce(trials.c.started_at, now)))
        return list(visit_order), True

    def epoch(self, trial_id: int, epoch: int, conn: Connection | None = None
              ) -> dict[str, Any] | None:
        if conn is None:
            with self.transaction() as own:
                return self.epoch(trial_id, epoch, own)
        row = conn.execute(select(epochs).where(epochs.c.trial_id == trial_id,
                                                epochs.c.epoch == epoch)).first()
        return row_dict(row) if row is not None else None

    def epochs(self, trial_id: int) -> list[dict[str, Any]]:
        with self.transaction() as conn:
            rows = conn.execute(select(epochs).where(epochs.c.trial_id == trial_id)
                                .order_by(epochs.c.epoch))
            return [row_dict(r) for r in rows]

    def end_epoch(self, trial_id: int, epoch: int, metric: float | None, *, minimize: bool,
                  outcome: str, failure: str | None = None,
                  next_order: list[int] | None = None) -> bool:
        """Decide the end of the trial's ``epoch`` once, in one transaction.

        Records its validation ``metric`` (None when it was not finite) and what
        follows: ``"continue"`` records epoch ``epoch + 1`` with ``next_order`` and
        queues its first hop; ``"done"``, ``"pruned"`` or ``"failed"`` end the
        trial. Returns False, changing nothing, when the epoch's end was decided
        already (a redelivered last hop): every later copy is a no-op.
        """
        now = utcnow()
        with self.transaction() as conn:
            result = conn.execute(
                update(epochs)
                .where(epochs.c.trial_id == trial_id, epochs.c.epoch == epoch,
                       epochs.c.finished_at.is_(None))
                .values(metric=metric, finished_at=now)
            )
            if result.rowcount != 1:
                return False
            values: dict[str, Any] = {"updated_at": now}
            if metric is not None:
                best = self.trial(trial_id, conn)["best_metric"]
                if best is None or (metric < best if minimize else metric > best):
                    best = metric
                values.update(epochs_done=epoch + 1, last_metric=metric, best_metric=best)
            conn.execute(update(trials).where(trials.c.id == trial_id).values(**values))
            if outcome == "continue":
                assert next_order is not None
                conn.execute(epochs.insert().values(trial_id=trial_id, epoch=epoch + 1,
                                                    visit_order=list(next_order),
                                                    started_at=now))
                self._queue_hop(conn, trial_id, epoch + 1, 0, next_order[0])
            else:
                conn.execute(update(trials).where(
                    trials.c.id == trial_id, trials.c.state.in_(ACTIVE_STATES)).values(
                    state=outcome, finished_at=now, failure=failure))
            return True

    def rung_values(self, study_id: int, epoch: int) -> list[float]:
        """Validation metrics every trial of the study recorded at ``epoch``."""
        with self.transaction() as conn:
            rows = conn.execute(
                select(epochs.c.metric)
                .join(trials, trials.c.id == epochs.c.trial_id)
                .where(trials.c.study_id == study_id, epochs.c.epoch == epoch,
                       epochs.c.metric.is_not(None))
            )
            return [float(r[0]) for r in rows]

    # hops ----------------------------------------------------------------

    def _queue_hop(self, conn: Connection, trial_id: int, epoch: int, position: int,
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

    def claim_hop(self, trial_id: int, epoch: int, position: int, shard: int, *,
                  worker: str, holder: str, live_after: datetime) -> tuple[str, dict[str, Any]]:
        """Count a delivery of a hop and claim it for ``holder``, in one atomic step.

        Returns ``("claimed", row)`` when this delivery may train: the hop was
        queued, or its holder's heartbeat is older than ``live_after`` (the holder
        died mid-hop: counted in ``interrupted``). ``("held", row)`` when a live
        holder has it (a duplicate or a replica's copy: drop it, it is no
        interruption), ``("done", row)`` when it has finished already.
        """
        now = utcnow()
        key = (hops.c.trial_id == trial_id, hops.c.epoch == epoch, hops.c.position == position)
        with self.transaction() as conn:
            self._queue_hop(conn, trial_id, epoch, position, shard)
            query = select(hops).where(*key)
            if not self.is_sqlite:
                query = query.with_for_update()  # SQLite: BEGIN IMMEDIATE holds the database
            row = row_dict(conn.execute(query).one())
            conn.execute(update(hops).where(*key).values(deliveries=hops.c.deliveries + 1))
            row["deliveries"] += 1
            if row["state"] == "done":
                return "done", row
            values: dict[str, Any] = {"state": "running", "worker": worker, "holder": holder,
                                      "started_at": now}
            if row["state"] == "running":
                live = conn.execute(select(workers.c.id).where(
                    workers.c.id == row["holder"], workers.c.heartbeat_at > live_after)).first()
                if live is not None and row["holder"] != holder:
                    return "held", row
                if row["holder"] != holder:
                    values["interrupted"] = hops.c.interrupted + 1
                    row["interrupted"] += 1
            conn.execute(update(hops).where(*key).values(**values))
            conn.execute(update(trials).where(trials.c.id == trial_id).values(updated_at=now))
            return "claimed", {**row, "state": "running", "worker": worker, "holder": holder,
                               "previous_worker": row["worker"]}

    def release_hop(self, trial_id: int, epoch: int, position: int, *, holder: str,
                    error: str | None = None) -> dict[str, Any] | None:
        """Give a claimed hop back to the queue (its delivery failed), recording ``error``.

        Returns the hop row after the release, or None when ``holder`` no
        longer held it.
        """
        key = (hops.c.trial_id == trial_id, hops.c.epoch == epoch, hops.c.position == position)
        values: dict[str, Any] = {"state": "queued", "holder": None, "queued_at": utcnow()}
        if error is not None:
            values.update(error=error, errors=hops.c.errors + 1)
        with self.transaction() as conn:
            result = conn.execute(update(hops).where(*key, hops.c.state == "running",
                                                     hops.c.holder == holder).values(**values))
            if result.rowcount != 1:
                return None
            return row_dict(conn.execute(select(hops).where(*key)).one())

    def release_dead_hops(self, live_after: datetime) -> list[dict[str, Any]]:
        """Hops running on a holder whose heartbeat is older than ``live_after``, re-queued.

        Each counts as interrupted; the caller sends its message again.
        """
        now = utcnow()
        alive = select(workers.c.id).where(workers.c.heartbeat_at > live_after)
        with self.transaction() as conn:
            dead = [row_dict(r) for r in conn.execute(select(hops).where(
                hops.c.state == "running",
                (hops.c.holder.is_(None)) | (hops.c.holder.not_in(alive))))]
            for hop in dead:
                conn.execute(update(hops).where(hops.c.id == hop["id"],
                                                hops.c.state == "running").values(
                    state="queued", holder=None, queued_at=now,
                    interrupted=hops.c.interrupted + 1))
            return dead

    def waiting_hops(self, before: datetime) -> list[dict[str, Any]]:
        """Queued hops of running trials of running studies, queued before ``before``.

        Each row carries its study and region, for routing the message again.
        """
        with self.transaction() as conn:
            rows = conn.execute(
                select(hops, studies.c.id.label("study_id"), studies.c.region)
                .join(trials, trials.c.id == hops.c.trial_id)
                .join(studies, studies.c.id == trials.c.study_id)
                .where(hops.c.state == "queued", hops.c.queued_at < before,
                       trials.c.state == "running", studies.c.state == "running"))
            return [row_dict(r) for r in rows]

    def rewind_hop(self, trial_id: int, epoch: int, position: int, *, reason: str
                   ) -> int | None:
        """Run hop (epoch, position) again: its checkpoint is lost or unreadable (``reason``).

        The hop goes back to queued with ``reason`` as its error, and the hops
        after it in the trial are forgotten (their records are replaced when
        they run again). Returns how many times the hop's output was lost, or
        None (nothing changed) if the trial is no longer running.
        """
        now = utcnow()
        key = (hops.c.trial_id == trial_id, hops.c.epoch == epoch, hops.c.position == position)
        with self.transaction() as conn:
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

    def hop(self, trial_id: int, epoch: int, position: int) -> dict[str, Any] | None:
        with self.transaction() as conn:
            row = conn.execute(select(hops).where(
                hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                hops.c.position == position)).first()
            return row_dict(row) if row is not None else None

    def finish_hop(self, trial_id: int, epoch: int, position: int, *,
                   next_hop: tuple[int, int] | None, **values: Any) -> bool:
        """Record a trained hop and queue the next one (position, shard) in one transaction.

        Returns True if the next hop was newly queued (the caller sends its
        message); False if an earlier delivery already queued it.
        """
        with self.transaction() as conn:
            self._record_done(conn, trial_id, epoch, position, values)
            if next_hop is None:
                return False
            return self._queue_hop(conn, trial_id, epoch, next_hop[0], next_hop[1])

    def _record_done(self, conn: Connection, trial_id: int, epoch: int, position: int,
                     values: dict[str, Any]) -> None:
        now = utcnow()
        conn.execute(
            update(hops)
            .where(hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                   hops.c.position == position, hops.c.state != "done")
            .values(state="done", finished_at=now, holder=None, **values)
        )
        conn.execute(update(trials).where(trials.c.id == trial_id).values(updated_at=now))

    def hand_on_hop(self, trial_id: int, epoch: int, position: int, *, region: str,
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
        key = (hops.c.trial_id == trial_id, hops.c.epoch == epoch)
        with self.transaction() as conn:
            # the loads matter only where there is a choice: not for an epoch's last shard
            choice = following + 1 < shards
            here = (conn.execute(select(hops.c.holder).where(*key, hops.c.position == position))
                    .scalar() if choice else None)
            self._record_done(conn, trial_id, epoch, position, values)
            if following >= shards or conn.execute(select(hops.c.id).where(
                    *key, hops.c.position == following)).first() is not None:
                return None
            order = list(conn.execute(select(epochs.c.visit_order).where(
                epochs.c.trial_id == trial_id, epochs.c.epoch == epoch)).scalar_one())
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
            self._queue_hop(conn, trial_id, epoch, following, shard)
            return shard

    def shard_loads(self, region: str, live_after: datetime, conn: Connection | None = None
                    ) -> ShardLoads:
        """Hops waiting and running per shard of ``region``, and its live workers' shards."""
        if conn is None:
            with self.transaction() as own:
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

    def hops(self, trial_id: int | None = None, *, study_id: int | None = None
             ) -> list[dict[str, Any]]:
        query = select(hops).order_by(hops.c.trial_id, hops.c.epoch, hops.c.position)
        if trial_id is not None:
            query = query.where(hops.c.trial_id == trial_id)
        if study_id is not None:
            query = query.where(hops.c.trial_id.in_(
                select(trials.c.id).where(trials.c.study_id == study_id)))
        with self.transaction() as conn:
            return [row_dict(r) for r in conn.execute(query)]

    def hops_since(self, since: datetime) -> list[dict[str, Any]]:
        """Every hop running now or finished at or after ``since``, of any study."""
        query = select(hops).where((hops.c.state == "running") | (hops.c.finished_at >= since))
        with self.transaction() as conn:
            return [row_dict(r) for r in conn.execute(query.order_by(hops.c.id))]

    def last_hop(self, trial_id: int) -> dict[str, Any] | None:
        """The trial's furthest hop record (by epoch, then position)."""
        with self.transaction() as conn:
            row = conn.execute(
                select(hops).where(hops.c.trial_id == trial_id)
                .order_by(hops.c.epoch.desc(), hops.c.position.desc()).limit(1)
            ).first()
            return row_dict(row) if row is not None else None

    def running_positions(self, study_id: int, conn: Connection | None = None
                          ) -> list[dict[str, Any]]:
        """For each running trial of the study: its current epoch's visit order and position."""
        if conn is None:
            with self.transaction() as own:
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
        return [row_dict(r) for r in rows]

    def hops_done(self, study_id: int) -> int:
        """How many hops of the study have finished."""
        with self.transaction() as conn:
            return int(conn.execute(
                select(func.count()).select_from(hops)
                .join(trials, trials.c.id == hops.c.trial_id)
                .where(trials.c.study_id == study_id, hops.c.state == "done")
            ).scalar_one())

    def counts(self, study_id: int) -> dict[str, int]:
        with self.transaction() as conn:
            rows = conn.execute(select(trials.c.state, func.count()).where(
                trials.c.study_id == study_id).group_by(trials.c.state))
            out = {state: 0 for state in TRIAL_STATES}
            out.update({state: int(n) for state, n in rows})
            return out

    def stalled_trials(self, before: datetime) -> list[dict[str, Any]]:
        """Running trials of running studies whose last progress is older than ``before``."""
        with self.transaction() as conn:
            rows = conn.execute(
                select(trials)
                .join(studies, studies.c.id == trials.c.study_id)
                .where(studies.c.state == "running", trials.c.state == "running",
                       trials.c.updated_at < before)
            )
            return [row_dict(r) for r in rows]

