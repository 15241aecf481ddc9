"""The nightly runs and, per run, what happened to each region."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from hoptune.core import StudyError
from hoptune.tuner._schema import nightly_regions, nightly_runs, row_dict, utcnow
from hoptune.tuner._studydb import StudyDB

__all__ = ["NightlyRecords"]


class NightlyRecords:
    """The nightly runs and, per run, what happened to each region."""

    def __init__(self, db: StudyDB) -> None:
        self.db = db

    def start_run(self, trigger: str, host: str, conn: Connection | None = None) -> int:
        if conn is None:
            with self.db.transaction() as own:
                return self.start_run(trigger, host, own)
        result = conn.execute(nightly_runs.insert().values(
            state="running", trigger=trigger, host=host, started_at=utcnow()))
        return int(result.inserted_primary_key[0])

    def run(self, run_id: int) -> dict[str, Any]:
        with self.db.reading() as conn:
            row = conn.execute(select(nightly_runs).where(nightly_runs.c.id == run_id)).first()
        if row is None:
            raise StudyError(f"no nightly run {run_id}")
        return row_dict(row)

    def runs(self) -> list[dict[str, Any]]:
        with self.db.reading() as conn:
            return [row_dict(r) for r in conn.execute(select(nightly_runs)
                                                  .order_by(nightly_runs.c.id))]

    def hold_run(self, run_id: int, conn: Connection) -> None:
        """Make ``conn``'s transaction the only one writing run ``run_id``'s outcomes until it
        ends (on SQLite ``BEGIN IMMEDIATE`` holds the database already): two regions that end
        at once then each see the other's outcome or wait for it, so one of them ends the run.
        """
        if not self.db.is_sqlite:
            conn.execute(select(nightly_runs.c.id).where(nightly_runs.c.id == run_id)
                         .with_for_update())

    def finish_run(self, run_id: int, state: str, conn: Connection | None = None) -> bool:
        if conn is None:
            with self.db.transaction() as own:
                return self.finish_run(run_id, state, own)
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

    def end_region(self, run_id: int, region: str, state: str, outcome: str,
                   conn: Connection | None = None) -> bool:
        """Record a running region's outcome; False if it had already ended."""
        if conn is None:
            with self.db.transaction() as own:
                return self.end_region(run_id, region, state, outcome, own)
        result = conn.execute(update(nightly_regions).where(
            nightly_regions.c.run_id == run_id, nightly_regions.c.region == region,
            nightly_regions.c.state == "running")
            .values(state=state, outcome=outcome, finished_at=utcnow()))
        return result.rowcount == 1

    def regions(self, run_id: int | None = None, conn: Connection | None = None
                ) -> list[dict[str, Any]]:
        if conn is None:
            with self.db.reading() as own:
                return self.regions(run_id, own)
        query = select(nightly_regions).order_by(nightly_regions.c.run_id,
                                                 nightly_regions.c.region)
        if run_id is not None:
            query = query.where(nightly_regions.c.run_id == run_id)
        return [row_dict(r) for r in conn.execute(query)]

    def going(self) -> set[int]:
        """The ids of the runs still going."""
        with self.db.reading() as conn:
            return {int(r[0]) for r in conn.execute(
                select(nightly_runs.c.id).where(nightly_runs.c.state == "running"))}

    def undecided(self, study_ids: list[int], conn: Connection | None = None) -> list[int]:
        """Those of ``study_ids`` whose nightly region's outcome is not recorded yet while their
        run goes on (the promotion records it, and with the run's last region the run's end;
        a run abandoned when its lock expired waits for nothing)."""
        if not study_ids:
            return []
        if conn is None:
            with self.db.reading() as own:
                return self.undecided(study_ids, own)
        return [int(r[0]) for r in conn.execute(
            select(nightly_regions.c.study_id)
            .join(nightly_runs, nightly_runs.c.id == nightly_regions.c.run_id)
            .where(nightly_regions.c.study_id.in_(study_ids),
                   nightly_regions.c.state == "running", nightly_runs.c.state == "running"))]

