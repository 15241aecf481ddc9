"""The nightly runs and, per run, what happened to each region."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from hoptune.core import StudyError
from hoptune.tuner._schema import nightly_regions, nightly_runs, row_dict, utcnow
from hoptune.tuner._studydb import StudyDB

__all__ = ["NightlyRecords"]


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
        return row_dict(row)

    def runs(self) -> list[dict[str, Any]]:
        with self.db.transaction() as conn:
            return [row_dict(r) for r in conn.execute(select(nightly_runs)
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
            return [row_dict(r) for r in conn.execute(query)]

