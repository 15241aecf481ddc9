"""The nightly retraining: every region re-ingested, tuned warm, and promoted if better.

``start_nightly`` is what ``hoptune nightly`` and the beat-scheduled task both
run, and ``log_nightly_plan`` what they run once its messages are sent. It takes
the nightly lock (in the study database; it expires if its
holder stops making progress, so a dead run does not block the next night),
re-ingests each region (a no-op when the data is unchanged), starts a study
warm-started from the region's last one, and returns the messages that set
them going. Nothing waits: when a study ends, its promotion records the
region's outcome, and the last region to end finishes the run and frees the
lock. A region that fails (bad data, every trial failing) is recorded and the
others go on.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hoptune.core import HoptuneError, StudyError
from hoptune.regions import Config
from hoptune.tasks.study._nightly_lock import NIGHTLY_LOCK, holder, lock_seconds
from hoptune.tasks.study._validate import check_region
from hoptune.tasks.worker import Dispatch, Runtime, tune_step_dispatch
from hoptune.tuner import Locks, NightlyRecords, StudyRow

if TYPE_CHECKING:
    from hoptune.regions import IngestResult, RegionConfig

__all__ = ["after_promotion", "begin_nightly", "cancel_nightly", "start_nightly"]

log = logging.getLogger(__name__)


def begin_nightly(rt: Runtime, trigger: str = "cli") -> int:
    """Record a nightly run and take the nightly lock for it; refuse (a ``StudyError``, the
    run recorded "refused") if another run holds it. Returns the run's id: ``start_nightly``
    starts its regions, or ``cancel_nightly`` ends it where its workers could not start."""
    run_id, held = _start_run(rt, trigger)
    if held is not None:
        raise StudyError(
            f"a nightly run is already going ({held['holder']}, lock held until "
            f"{held['expires_at']:%Y-%m-%d %H:%M:%S} UTC unless it makes progress); "
            f"not starting another")
    _abandon_stale_runs(rt, run_id)
    return run_id


def cancel_nightly(rt: Runtime, run_id: int) -> None:
    """End a run begun (``begin_nightly``) before any region started: recorded "failed",
    its lock freed at once, in one transaction."""
    records = NightlyRecords(rt.db)
    with rt.db.transaction() as conn:
        records.hold_run(run_id, conn)
        if records.finish_run(run_id, "failed", conn):
            Locks(rt.db).release(NIGHTLY_LOCK, holder(run_id), conn)


def start_nightly(rt: Runtime, config: Config, names: list[str] | None = None, *,
                  trigger: str = "cli",
                  ingested: Callable[[Runtime, RegionConfig], IngestResult] | None = None,
                  run_id: int | None = None) -> tuple[int, list[Dispatch]]:
    """Start a nightly run over ``names`` (default: every region); refuse if one is going.

    Returns the run's id and the messages that set its studies going; the
    caller sends them, then logs the plan (``log_nightly_plan``). ``ingested``
    ingests a region (default ``ingest``; the CLI and the beat task pass ``ingest_region``, which
    resolves ``shards = "auto"`` from the measured costs). ``run_id``: a run already begun
    (``begin_nightly``, which the CLI calls before it starts local workers); by default
    one is begun here.
    """
    from hoptune.regions import ingest
    from hoptune.tasks.study._study import create_study

    regions = [config.region(n) for n in names] if names else list(config.regions.values())
    records = NightlyRecords(rt.db)
    if run_id is None:
        run_id = begin_nightly(rt, trigger)
    out: list[Dispatch] = []
    checked = []
    for region in regions:  # every region's configuration first, before any data is read
        try:
            check_region(config, region, tuned=True)
        except HoptuneError as exc:
            log.warning("nightly run %d: %s failed: %s", run_id, region.name, exc)
            records.add_region(run_id, region.name, "failed", outcome=str(exc))
            continue
        checked.append(region)
    for region in checked:
        try:
            running = rt.db.latest_study(region.name, state="running")
            if running is not None:
                raise StudyError(f"study {running.id} of {region.name} is still running")
            result = ingest(region, rt.store) if ingested is None else ingested(rt, region)
            parent = rt.db.latest_study(region.name, state="done")
            study_id = create_study(rt, region, manifest=result.manifest,
                                    parent_id=parent.id if parent else None,
                                    nightly_run_id=run_id)
        except HoptuneError as exc:
            log.warning("nightly run %d: %s failed: %s", run_id, region.name, exc)
            records.add_region(run_id, region.name, "failed", outcome=str(exc))
            continue
        records.add_region(run_id, region.name, "running", study_id=study_id,
                           ingested=result.changed)
        out.append(tune_step_dispatch(study_id))
    if _maybe_finish(rt, run_id):  # every region failed before it started
        log.info("nightly run %d finished", run_id)
    return run_id, out


def _start_run(rt: Runtime, trigger: str) -> tuple[int, dict[str, Any] | None]:
    """Record a run and take the nightly lock for it in one transaction: no other process sees
    the run going without the lock (the winner of two runs started at once would take the
    loser for a stale run and mark it abandoned). Refused, the run is recorded so; returns its
    id and the lock's holder where refused."""
    records, locks = NightlyRecords(rt.db), Locks(rt.db)

    def start(conn: Any) -> tuple[int, dict[str, Any] | None]:
        run_id = records.start_run(trigger, socket.gethostname(), conn)
        held = locks.take(conn, NIGHTLY_LOCK, holder(run_id), lock_seconds())
        if held is not None:
            records.finish_run(run_id, "refused", conn)
        return run_id, held

    return locks.transaction(NIGHTLY_LOCK, start)


def _abandon_stale_runs(rt: Runtime, current: int) -> None:
    """Runs whose lock expired are over: mark them, so the status view says so."""
    records = NightlyRecords(rt.db)
    for run in records.runs():
        if run["state"] == "running" and run["id"] != current:
            records.finish_run(run["id"], "abandoned")


def after_promotion(rt: Runtime, study: StudyRow, decision: dict[str, Any]) -> None:
    """Record a nightly study's outcome; the last region to end finishes the run."""
    run_id = study.nightly_run_id
    if run_id is None:
        return
    if study.state != "done":
        state = "failed"
    else:
        state = "promoted" if decision["promoted"] else "kept"
    outcome = decision["reason"]
    if decision.get("version"):
        outcome = f"{decision['version']}: {outcome}"
    # the region's outcome and, where it is the run's last, the run's end and the lock's
    # release: one transaction, so a driver that sees the outcome (``follow``) and stops its
    # workers never leaves the run going and its lock held until it expires
    records = NightlyRecords(rt.db)
    with rt.db.transaction() as conn:
        records.hold_run(run_id, conn)  # first: another region's end waits for this one's
        records.end_region(run_id, study.region, state, outcome, conn)
        finished = _maybe_finish(rt, run_id, conn)
    if finished:
        log.info("nightly run %d finished", run_id)


def _maybe_finish(rt: Runtime, run_id: int, conn: Any = None) -> bool:
    """End the run and free its lock, in one transaction (``conn``'s, where given), once no
    region of it is still running; whether this call ended it."""
    records = NightlyRecords(rt.db)
    if conn is None:
        with rt.db.transaction() as own:
            records.hold_run(run_id, own)
            return _maybe_finish(rt, run_id, own)
    if any(r["state"] == "running" for r in records.regions(run_id, conn)):
        return False
    if not records.finish_run(run_id, "done", conn):
        return False
    Locks(rt.db).release(NIGHTLY_LOCK, holder(run_id), conn)
    return True
