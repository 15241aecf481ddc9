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
from hoptune.tuner._engine import READ_ONLY, database_error, make_engine
from hoptune.tuner._hop_queue import queue_hop
from hoptune.tuner._revisions import open_schema
from hoptune.tuner._rows import EpochRow, StudyRow, TrialRow
from hoptune.tuner._schema import (
    ACTIVE_STATES,
    TRIAL_STATES,
    epochs,
    studies,
    trials,
    utcnow,
)
from hoptune.tuner._statements import (
    EPOCH,
    EPOCH_END,
    EPOCH_NEW,
    EPOCHS,
    STUDY,
    STUDY_LOCKED,
    TRIAL,
    TRIAL_SET,
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

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A transaction that only reads: on SQLite it takes no write lock (in WAL mode a
        reader waits for no writer), so a hop's checks never queue behind another's record."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(**{READ_ONLY: True})
            with conn.begin():
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
                             f"({running.id})") from None

    def study(self, study_id: int, conn: Connection | None = None) -> StudyRow:
        if conn is None:
            with self.reading() as own:
                return self._study(own, study_id)
        return self._study(conn, study_id)

    def _study(self, conn: Connection, study_id: int, *, lock: bool = False) -> StudyRow:
        query = STUDY_LOCKED if lock and not self.is_sqlite else STUDY
        row = conn.execute(query, {"key_study": study_id}).first()
        if row is None:
            raise StudyError(f"no study {study_id}")
        return StudyRow.from_row(row)

    def studies(self, region: str | None = None) -> list[StudyRow]:
        query = select(studies).order_by(studies.c.id)
        if region is not None:
            query = query.where(studies.c.region == region)
        with self.reading() as conn:
            return [StudyRow.from_row(r) for r in conn.execute(query)]

    def data_hashes_in_use(self) -> set[str]:
        """The data hashes of the running studies: what workers must keep cached."""
        query = select(studies.c.data_hash).where(studies.c.state == "running").distinct()
        with self.reading() as conn:
            return {row[0] for row in conn.execute(query) if row[0] is not None}

    def latest_study(self, region: str, *, state: str | None = None,
                     kind: str | None = "tune") -> StudyRow | None:
        """The region's newest study (of ``state``; of ``kind``, by default a tuning study)."""
        query = select(studies).where(studies.c.region == region)
        if state is not None:
            query = query.where(studies.c.state == state)
        if kind is not None:
            query = query.where(studies.c.kind == kind)
        with self.reading() as conn:
            row = conn.execute(query.order_by(studies.c.id.desc()).limit(1)).first()
        return StudyRow.from_row(row) if row is not None else None

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
    def locked_study(self, study_id: int) -> Iterator[tuple[Connection, StudyRow]]:
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

    def trial(self, trial_id: int, conn: Connection | None = None) -> TrialRow:
        if conn is None:
            with self.reading() as own:
                return self.trial(trial_id, own)
        row = conn.execute(TRIAL, {"key_trial": trial_id}).first()
        if row is None:
            raise StudyError(f"no trial {trial_id}")
        return TrialRow.from_row(row)

    def trials(self, study_id: int, conn: Connection | None = None,
               states: tuple[str, ...] | None = None) -> list[TrialRow]:
        if conn is None:
            with self.reading() as own:
                return self.trials(study_id, own, states)
        query = select(trials).where(trials.c.study_id == study_id).order_by(trials.c.number)
        if states is not None:
            query = query.where(trials.c.state.in_(states))
        return [TrialRow.from_row(r) for r in conn.execute(query)]

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
        queue_hop(conn, trial_id, epoch, 0, visit_order[0])
        conn.execute(update(trials).where(trials.c.id == trial_id).values(
            state="running", updated_at=now,
            started_at=func.coalesce(trials.c.started_at, now)))
        return list(visit_order), True

    def epoch(self, trial_id: int, epoch: int, conn: Connection | None = None
              ) -> EpochRow | None:
        if conn is None:
            with self.reading() as own:
                return self.epoch(trial_id, epoch, own)
        row = conn.execute(EPOCH, {"key_trial": trial_id, "key_epoch": epoch}).first()
        return EpochRow.from_row(row) if row is not None else None

    def epochs(self, trial_id: int, conn: Connection | None = None) -> list[EpochRow]:
        if conn is None:
            with self.reading() as own:
                return self.epochs(trial_id, own)
        return [EpochRow.from_row(r) for r in conn.execute(EPOCHS, {"key_trial": trial_id})]

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
            result = conn.execute(EPOCH_END, {"key_trial": trial_id, "key_epoch": epoch,
                                              "metric": metric, "finished_at": now})
            if result.rowcount != 1:
                return False
            values: dict[str, Any] = {"key_trial": trial_id, "updated_at": now}
            if metric is not None:
                best = self.trial(trial_id, conn).best_metric
                if best is None or (metric < best if minimize else metric > best):
                    best = metric
                values.update(epochs_done=epoch + 1, last_metric=metric, best_metric=best)
            conn.execute(TRIAL_SET, values)
            if outcome == "continue":
                assert next_order is not None
                conn.execute(EPOCH_NEW, {"trial_id": trial_id, "epoch": epoch + 1,
                                         "visit_order": list(next_order), "started_at": now})
                queue_hop(conn, trial_id, epoch + 1, 0, next_order[0])
            else:
                conn.execute(update(trials).where(
                    trials.c.id == trial_id, trials.c.state.in_(ACTIVE_STATES)).values(
                    state=outcome, finished_at=now, failure=failure))
            return True

    def rung_values(self, study_id: int, epoch: int, conn: Connection | None = None
                    ) -> list[float]:
        """Validation metrics every trial of the study recorded at ``epoch``."""
        if conn is None:
            with self.reading() as own:
                return self.rung_values(study_id, epoch, own)
        rows = conn.execute(
            select(epochs.c.metric)
            .join(trials, trials.c.id == epochs.c.trial_id)
            .where(trials.c.study_id == study_id, epochs.c.epoch == epoch,
                   epochs.c.metric.is_not(None))
        )
        return [float(r[0]) for r in rows]

    # counts -------------------------------------------------------------

    def counts(self, study_id: int) -> dict[str, int]:
        with self.reading() as conn:
            rows = conn.execute(select(trials.c.state, func.count()).where(
                trials.c.study_id == study_id).group_by(trials.c.state))
            out = {state: 0 for state in TRIAL_STATES}
            out.update({state: int(n) for state, n in rows})
            return out

    def stalled_trials(self, before: datetime) -> list[TrialRow]:
        """Running trials of running studies whose last progress is older than ``before``."""
        with self.reading() as conn:
            rows = conn.execute(
                select(trials)
                .join(studies, studies.c.id == trials.c.study_id)
                .where(studies.c.state == "running", trials.c.state == "running",
                       trials.c.updated_at < before)
            )
            return [TrialRow.from_row(r) for r in rows]

