"""The study database: studies, trials, epochs and hops, behind SQLAlchemy.

One SQLite file under ``HOPTUNE_HOME`` by default, any SQLAlchemy URL
otherwise (PostgreSQL in a cluster). Many worker processes write at once, so
every method runs one short transaction; SQLite runs in WAL mode with a busy
timeout and takes its write lock at ``BEGIN`` (``BEGIN IMMEDIATE``) so two
writers queue instead of failing with "database is locked" halfway through.

This module is the only one that speaks SQL. Rows come back as plain dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from regions._errors import StoreError, StudyError

__all__ = ["StudyDB", "Locks", "NightlyRecords", "TRIAL_STATES", "ACTIVE_STATES", "utcnow"]

TRIAL_STATES = ("pending", "running", "done", "pruned", "failed")
ACTIVE_STATES = ("pending", "running")

metadata = MetaData()

studies = Table(
    "studies",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("region", String(64), nullable=False, index=True),
    Column("state", String(16), nullable=False, default="running"),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("budget", Integer, nullable=False),
    Column("parallel", Integer, nullable=False),
    Column("epochs", Integer, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("space", JSON),
    Column("region_config", JSON, nullable=False),
    Column("manifest", JSON),  # the data the study trains on, fixed at its start
    Column("data_hash", String(64)),
    Column("parent_id", Integer, ForeignKey("studies.id")),
    Column("minimize", Integer, nullable=False, default=1),
    Column("best_trial_id", Integer),
    Column("failure", Text),
    Column("nightly_run_id", Integer, index=True),
    Column("promotion", JSON),  # what promoting its best trial decided
)

trials = Table(
    "trials",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("study_id", Integer, ForeignKey("studies.id"), nullable=False, index=True),
    Column("number", Integer, nullable=False),
    Column("params", JSON, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("epochs_done", Integer, nullable=False, default=0),
    Column("last_metric", Float),
    Column("best_metric", Float),
    Column("failure", Text),
    UniqueConstraint("study_id", "number"),
)

epochs = Table(
    "epochs",
    metadata,
    Column("trial_id", Integer, ForeignKey("trials.id"), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("visit_order", JSON, nullable=False),
    Column("metric", Float),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

hops = Table(
    "hops",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("trial_id", Integer, ForeignKey("trials.id"), nullable=False, index=True),
    Column("epoch", Integer, nullable=False),
    Column("position", Integer, nullable=False),
    Column("shard", Integer, nullable=False),
    Column("state", String(16), nullable=False),  # queued, running, done
    Column("worker", String(255)),
    Column("deliveries", Integer, nullable=False, default=0),
    # deliveries that found the hop started and never finished: its worker died mid-hop
    Column("interrupted", Integer, nullable=False, default=0),
    Column("queued_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("samples", Integer),
    Column("loss", Float),
    Column("train_seconds", Float),
    Column("load_seconds", Float),
    Column("save_seconds", Float),
    UniqueConstraint("trial_id", "epoch", "position"),
)


nightly_runs = Table(
    "nightly_runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("state", String(16), nullable=False),  # running, done, abandoned
    Column("trigger", String(16), nullable=False),  # beat, cli
    Column("host", String(255)),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

nightly_regions = Table(
    "nightly_regions",
    metadata,
    Column("run_id", Integer, ForeignKey("nightly_runs.id"), primary_key=True),
    Column("region", String(64), primary_key=True),
    Column("state", String(16), nullable=False),  # running, promoted, kept, failed
    Column("study_id", Integer),
    Column("ingested", Integer),  # 1 if the data changed and was re-ingested
    Column("outcome", Text),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

locks = Table(
    "locks",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("holder", String(255)),
    Column("expires_at", DateTime(timezone=True)),
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time hoptune stores is UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _row(row: Any) -> dict[str, Any]:
    out = dict(row._mapping)
    for key, value in out.items():
        if isinstance(value, datetime):
            out[key] = _aware(value)
    return out


class StudyDB:
    """Studies, trials, epochs and hops in one SQL database.

    Safe to share between threads of one process (SQLAlchemy's pool); each
    process opens its own. Every public method is one transaction.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        self.engine = _make_engine(url)
        if create:
            try:
                metadata.create_all(self.engine)
            except SQLAlchemyError as exc:
                raise StoreError(f"study database {_safe_url(url)}: {exc.__class__.__name__}: "
                                 f"{str(exc).splitlines()[0]}") from exc

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
    ) -> int:
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
                )
            )
            return int(result.inserted_primary_key[0])

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
        return _row(row)

    def studies(self, region: str | None = None) -> list[dict[str, Any]]:
        query = select(studies).order_by(studies.c.id)
        if region is not None:
            query = query.where(studies.c.region == region)
        with self.transaction() as conn:
            return [_row(r) for r in conn.execute(query)]

    def latest_study(self, region: str, *, state: str | None = None) -> dict[str, Any] | None:
        query = select(studies).where(studies.c.region == region)
        if state is not None:
            query = query.where(studies.c.state == state)
        with self.transaction() as conn:
            row = conn.execute(query.order_by(studies.c.id.desc()).limit(1)).first()
        return _row(row) if row is not None else None

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
                   entries: list[tuple[dict[str, Any], int]]) -> list[int]:
        """Insert pending trials (params, seed) inside the caller's transaction."""
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
        return _row(row)

    def trials(self, study_id: int, conn: Connection | None = None,
               states: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        if conn is None:
            with self.transaction() as own:
                return self.trials(study_id, own, states)
        query = select(trials).where(trials.c.study_id == study_id).order_by(trials.c.number)
        if states is not None:
            query = query.where(trials.c.state.in_(states))
        return [_row(r) for r in conn.execute(query)]

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

    def touch_trial(self, trial_id: int) -> None:
        with self.transaction() as conn:
            conn.execute(update(trials).where(trials.c.id == trial_id).values(updated_at=utcnow()))

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
        return _row(row) if row is not None else None

    def epochs(self, trial_id: int) -> list[dict[str, Any]]:
        with self.transaction() as conn:
            rows = conn.execute(select(epochs).where(epochs.c.trial_id == trial_id)
                                .order_by(epochs.c.epoch))
            return [_row(r) for r in rows]

    def record_metric(self, trial_id: int, epoch: int, metric: float, *, minimize: bool) -> bool:
        """Store an epoch's validation metric; False if it was already recorded (redelivery)."""
        now = utcnow()
        with self.transaction() as conn:
            result = conn.execute(
                update(epochs)
                .where(epochs.c.trial_id == trial_id, epochs.c.epoch == epoch,
                       epochs.c.metric.is_(None))
                .values(metric=metric, finished_at=now)
            )
            if result.rowcount != 1:
                return False
            trial = self.trial(trial_id, conn)
            best = trial["best_metric"]
            if best is None or (metric < best if minimize else metric > best):
                best = metric
            conn.execute(update(trials).where(trials.c.id == trial_id).values(
                epochs_done=epoch + 1, last_metric=metric, best_metric=best, updated_at=now))
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

    def begin_hop(self, trial_id: int, epoch: int, position: int, shard: int,
                  worker: str) -> dict[str, Any]:
        """Count a delivery of a hop and mark it running on ``worker``; returns the hop row."""
        now = utcnow()
        with self.transaction() as conn:
            self._queue_hop(conn, trial_id, epoch, position, shard)
            conn.execute(
                update(hops)
                .where(hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                       hops.c.position == position, hops.c.state == "running")
                .values(interrupted=hops.c.interrupted + 1)
            )
            conn.execute(
                update(hops)
                .where(hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                       hops.c.position == position, hops.c.state != "done")
                .values(state="running", worker=worker, started_at=now)
            )
            conn.execute(
                update(hops)
                .where(hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                       hops.c.position == position)
                .values(deliveries=hops.c.deliveries + 1)
            )
            conn.execute(update(trials).where(trials.c.id == trial_id).values(updated_at=now))
            row = conn.execute(select(hops).where(hops.c.trial_id == trial_id,
                                                  hops.c.epoch == epoch,
                                                  hops.c.position == position)).one()
            return _row(row)

    def finish_hop(self, trial_id: int, epoch: int, position: int, *,
                   next_hop: tuple[int, int] | None, **values: Any) -> bool:
        """Record a trained hop and queue the next one (position, shard) in one transaction.

        Returns True if the next hop was newly queued (the caller sends its
        message); False if an earlier delivery already queued it.
        """
        now = utcnow()
        with self.transaction() as conn:
            conn.execute(
                update(hops)
                .where(hops.c.trial_id == trial_id, hops.c.epoch == epoch,
                       hops.c.position == position, hops.c.state != "done")
                .values(state="done", finished_at=now, **values)
            )
            conn.execute(update(trials).where(trials.c.id == trial_id).values(updated_at=now))
            if next_hop is None:
                return False
            return self._queue_hop(conn, trial_id, epoch, next_hop[0], next_hop[1])

    def hops(self, trial_id: int | None = None, *, study_id: int | None = None
             ) -> list[dict[str, Any]]:
        query = select(hops).order_by(hops.c.trial_id, hops.c.epoch, hops.c.position)
        if trial_id is not None:
            query = query.where(hops.c.trial_id == trial_id)
        if study_id is not None:
            query = query.where(hops.c.trial_id.in_(
                select(trials.c.id).where(trials.c.study_id == study_id)))
        with self.transaction() as conn:
            return [_row(r) for r in conn.execute(query)]

    def last_hop(self, trial_id: int) -> dict[str, Any] | None:
        """The trial's furthest hop record (by epoch, then position)."""
        with self.transaction() as conn:
            row = conn.execute(
                select(hops).where(hops.c.trial_id == trial_id)
                .order_by(hops.c.epoch.desc(), hops.c.position.desc()).limit(1)
            ).first()
            return _row(row) if row is not None else None

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
        return [_row(r) for r in rows]

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
            return [_row(r) for r in rows]


class NightlyRecords:
    """The nightly runs and, per run, what happened to each region."""

    def __init__(self, db: StudyDB) -> None:
        self.db = db

    def start_run(self, trigger: str, host: str) -> int:
        with self.db.transaction() as conn:
            result = conn.execute(nightly_runs.insert().values(
                state="running", trigger=trigger, host=host, started_at=utcnow()))
            return int(result.inserted_primary_key[0])

    def run(self, run_id: int) -> dict[str, Any]:
        with self.db.transaction() as conn:
            row = conn.execute(select(nightly_runs).where(nightly_runs.c.id == run_id)).first()
        if row is None:
            raise StudyError(f"no nightly run {run_id}")
        return _row(row)

    def runs(self) -> list[dict[str, Any]]:
        with self.db.transaction() as conn:
            return [_row(r) for r in conn.execute(select(nightly_runs)
                                                  .order_by(nightly_runs.c.id))]

    def finish_run(self, run_id: int, state: str) -> bool:
        with self.db.transaction() as conn:
            result = conn.execute(update(nightly_runs).where(
                nightly_runs.c.id == run_id, nightly_runs.c.state == "running")
                .values(state=state, finished_at=utcnow()))
            return result.rowcount == 1

    def add_region(self, run_id: int, region: str, state: str, *, study_id: int | None = None,
                   ingested: bool | None = None, outcome: str | None = None) -> None:
        now = utcnow()
        with self.db.transaction() as conn:
            conn.execute(nightly_regions.insert().values(
                run_id=run_id, region=region, state=state, study_id=study_id,
                ingested=None if ingested is None else int(ingested), outcome=outcome,
                started_at=now, finished_at=None if state == "running" else now))

    def end_region(self, run_id: int, region: str, state: str, outcome: str) -> bool:
        """Record a running region's outcome; False if it had already ended."""
        with self.db.transaction() as conn:
            result = conn.execute(update(nightly_regions).where(
                nightly_regions.c.run_id == run_id, nightly_regions.c.region == region,
                nightly_regions.c.state == "running")
                .values(state=state, outcome=outcome, finished_at=utcnow()))
            return result.rowcount == 1

    def regions(self, run_id: int | None = None) -> list[dict[str, Any]]:
        query = select(nightly_regions).order_by(nightly_regions.c.run_id,
                                                 nightly_regions.c.region)
        if run_id is not None:
            query = query.where(nightly_regions.c.run_id == run_id)
        with self.db.transaction() as conn:
            return [_row(r) for r in conn.execute(query)]


class Locks:
    """Named locks with an expiry, in the study database: a dead holder's lock runs out.

    Used for "one nightly run at a time": the holder renews its lock while it
    makes progress; a lock not renewed by its expiry is free to take.
    """

    def __init__(self, db: StudyDB) -> None:
        self.db = db

    def acquire(self, name: str, holder: str, ttl: float) -> dict[str, Any] | None:
        """Take ``name`` for ``holder``; returns None on success, else the current holder's row."""
        now = utcnow()
        for _ in range(3):
            try:
                with self.db.transaction() as conn:
                    query = select(locks).where(locks.c.name == name)
                    if not self.db.is_sqlite:
                        query = query.with_for_update()
                    row = conn.execute(query).first()
                    if row is None:
                        conn.execute(locks.insert().values(
                            name=name, holder=holder,
                            expires_at=now + timedelta(seconds=ttl)))
                        return None
                    current = _row(row)
                    if current["holder"] and current["expires_at"] > now:
                        return current
                    conn.execute(update(locks).where(locks.c.name == name).values(
                        holder=holder, expires_at=now + timedelta(seconds=ttl)))
                    return None
            except IntegrityError:
                continue  # another process inserted the row first: read it again
        raise StudyError(f"could not take lock {name!r}")

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        with self.db.transaction() as conn:
            result = conn.execute(update(locks).where(locks.c.name == name,
                                                      locks.c.holder == holder)
                                  .values(expires_at=utcnow() + timedelta(seconds=ttl)))
            return result.rowcount == 1

    def release(self, name: str, holder: str) -> bool:
        with self.db.transaction() as conn:
            result = conn.execute(update(locks).where(locks.c.name == name,
                                                      locks.c.holder == holder)
                                  .values(holder=None, expires_at=None))
            return result.rowcount == 1


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        from pathlib import Path

        from sqlalchemy.engine import make_url

        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False},
                               json_serializer=json.dumps)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True, json_serializer=json.dumps)


def _safe_url(url: str) -> str:
    """The URL without its password, for error messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as given
        return url
