"""The plan of a nightly run, logged as it starts, with a warning when it predicts a miss."""

from __future__ import annotations

import logging

from hoptune.core import HoptuneError
from hoptune.regions import Config
from hoptune.tasks.plan._plan import Plan, Planner, _hms, format_plan, live_owners
from hoptune.tasks.worker import Runtime
from hoptune.tuner import NightlyRecords, StudyRow

__all__ = ["log_nightly_plan", "nightly_plan"]

log = logging.getLogger(__name__)


def log_nightly_plan(rt: Runtime, config: Config, run_id: int, workers: int | None = None
                     ) -> Plan | None:
    """Log the plan of nightly run ``run_id`` (``nightly_plan``), on ``workers``
    if given, by default on the live workers; warn at once when it predicts a miss.

    Called once the run's messages are sent: planning takes seconds of a small
    host (the recorded hops read and counted, the night simulated), which no
    study should wait for. So the plan is made from what was known before the
    run, the studies of other runs, even where the run's own have already
    started, or, tiny ones, ended.
    """
    started = [r["region"] for r in NightlyRecords(rt.db).regions(run_id)
               if r["study_id"] is not None]
    history = [s for s in rt.db.studies() if s.nightly_run_id != run_id]
    return nightly_plan(rt, config, started, run_id, workers, history=history)


def nightly_plan(rt: Runtime, config: Config, regions: list[str], run_id: int,
                 workers: int | None = None, *, history: list[StudyRow] | None = None
                 ) -> Plan | None:
    """Log the plan of a nightly run of ``regions`` as it starts; warn at once when it
    predicts a miss.

    ``workers`` (a count) is for a run whose workers are still starting; by
    default the live workers and the shards they own. ``history``: the studies
    to learn from (``Planner``). A plan that cannot be made (no recorded hops
    yet) is logged and the run goes on.
    """
    deadline = rt.settings.nightly_deadline
    if not regions:  # every region failed before its study started
        log.info("nightly run %d: no plan: no region started", run_id)
        return None
    try:
        planner = Planner(rt, config, regions, history=history)
        p = planner.plan(workers or planner.owners(live_owners(rt.db, regions)))
    except HoptuneError as exc:
        log.info("nightly run %d: no plan: %s", run_id, exc)
        return None
    log.info("nightly run %d plan: %s", run_id, format_plan(p).replace("\n", "; "))
    if deadline is not None and p.wall_seconds > deadline:
        log.warning("nightly run %d: predicted to miss its deadline of %s: %s on %d worker(s) "
                    "(range %s to %s); `hoptune plan --nightly --deadline %ds` says how many "
                    "workers meet it", run_id, _hms(deadline), _hms(p.wall_seconds), p.workers,
                    _hms(p.low_seconds), _hms(p.high_seconds), round(deadline))
    return p
