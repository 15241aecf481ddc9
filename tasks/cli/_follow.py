"""Driving studies from the command line: start them, follow them, print what they did.

The workflow lives in Celery tasks; a driver only sends the first
``tune_step`` and then watches the study database (and runs the sweeper now
and then, so a lost message costs a stall, not a study). Killing the driver
leaves the studies running.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from celery import Celery

from hoptune.tasks.study import sweep
from hoptune.tasks.worker import Runtime, tune_step_dispatch
from hoptune.tuner import (
    HopRecords,
    NightlyRecords,
    StudyRow,
    TrialRow,
    selected_epoch,
    trial_metric,
)

__all__ = ["POLL", "start_studies", "follow", "settled", "study_table", "format_table",
           "outcome", "planned_hops", "metric_note", "TABLE_METRICS"]

#: The columns of a trial's metrics in every table: ``metric`` is its selected epoch's,
#: ``epoch`` that epoch (from 1), ``last`` its last epoch's.
TABLE_METRICS = ["metric", "epoch", "last"]

#: Seconds between a driver's looks at whether its studies have settled: the command
#: returns at most this long after the last one's promotion is recorded (a look is one
#: row read per study).
POLL = 0.1
#: Seconds between refreshes of the progress bar, which reads every trial of the studies.
REFRESH = 0.5


def start_studies(app: Celery, study_ids: list[int]) -> None:
    from hoptune.tasks import send

    send([tune_step_dispatch(s) for s in study_ids], app)


def settled(study: StudyRow) -> bool:
    """Whether a study has ended and what promoting it decided is recorded."""
    return study.state != "running" and study.promotion is not None


def _trial_epochs(study: StudyRow, trial: TrialRow) -> int:
    """The epochs a trial trains unless pruned: its own ``epochs`` within the study's."""
    own = trial.params.get("epochs", study.epochs)
    return min(int(own), study.epochs) if isinstance(own, int | float) else study.epochs


def planned_hops(study: StudyRow, trials: list[TrialRow]) -> int:
    """The hops the study will have trained when it ends, as far as is known now.

    A trial not yet proposed counts the study's epochs; one that is pending or
    running its own epochs; one that has ended (done, pruned, failed) the
    epochs it trained, so a pruned trial's remaining hops leave the total when
    it is pruned, and the total is what the bar reaches at the end.
    """
    shards = int(study.region_config["shards"])
    unproposed = max(study.budget - len(trials), 0) if study.state == "running" else 0
    hops = unproposed * study.epochs * shards
    for t in trials:
        ended = t.state in ("done", "pruned", "failed")
        hops += (t.epochs_done if ended else _trial_epochs(study, t)) * shards
    return hops


def metric_note(study: StudyRow) -> str:
    """What the metric columns of a trial table are, under the study's ``select``."""
    select = study.region_config.get("select", "best")
    which = "its best epoch" if select == "best" else "its last epoch"
    return (f"metric: each trial's validation metric at its selected epoch (select = "
            f'"{select}": {which}), the one that ranks trials and is promoted; epoch: that '
            "epoch, numbered from 1; last: the metric at the trial's last epoch")


def summary(rt: Runtime, study_ids: list[int]) -> str:
    """One line: best metric so far and trials by state, over the studies."""
    counts = {"running": 0, "done": 0, "pruned": 0, "failed": 0}
    best: float | None = None
    epochs = 0
    for study_id in study_ids:
        study = rt.db.study(study_id)
        trials = rt.db.trials(study_id)
        for t in trials:
            epochs += t.epochs_done
            if t.state in counts:
                counts[t.state] += 1
        if len(study_ids) == 1:
            select = study.region_config.get("select", "best")
            scored = [m for t in trials if (m := trial_metric(t, select)) is not None]
            if scored:
                best = min(scored) if study.minimize else max(scored)
    line = " ".join(f"{k} {v}" for k, v in counts.items()) + f" | epochs {epochs}"
    return (f"best {best:.4g} | " if best is not None else "") + line


def follow(rt: Runtime, app: Celery, study_ids: list[int], *, progress: bool = True,
           sweep_every: float = 30.0,
           timeout: float | None = None) -> None:
    """Wait until every study has ended and its promotion is decided, with a progress bar.

    A study's promotion follows its end in another task; a command that
    returned before it (and stopped its local workers) left the region
    without its champion. A nightly study's promotion then records its region's
    outcome, and the run's last region the run's end and the release of the
    nightly lock, in one transaction: that is waited for too, or the next run
    started at once would be refused, and local workers stopped in between
    would leave the lock held until it expired. Sends the sweeper's messages
    every ``sweep_every`` seconds, so a lost message costs a stall rather than
    the study.
    """
    from tqdm import tqdm

    from hoptune.tasks import send

    bar = tqdm(total=_planned(rt, study_ids), unit="hop", disable=not progress,
               dynamic_ncols=True, mininterval=REFRESH)
    last_sweep = time.monotonic()
    started = time.monotonic()
    shown = -math.inf
    try:
        while True:
            with rt.db.reading() as conn:  # ten times a second: never queue behind a hop
                rows = [rt.db.study(s, conn) for s in study_ids]
                ended = all(settled(s) for s in rows) and not NightlyRecords(rt.db).undecided(
                    [s.id for s in rows if s.nightly_run_id is not None], conn)
            if progress and (ended or time.monotonic() - shown >= REFRESH):
                bar.total = _planned(rt, study_ids)
                bar.n = min(sum(HopRecords(rt.db).done_count(s) for s in study_ids), bar.total)
                bar.set_postfix_str(summary(rt, study_ids), refresh=False)
                bar.refresh()
                shown = time.monotonic()
            if ended:
                return
            if time.monotonic() - last_sweep > sweep_every:
                send(sweep(rt, app), app)
                last_sweep = time.monotonic()
            if timeout is not None and time.monotonic() - started > timeout:
                raise TimeoutError(f"studies {study_ids} still running after {timeout:.0f} s")
            time.sleep(POLL)
    finally:
        bar.close()


def _planned(rt: Runtime, study_ids: list[int]) -> int:
    return sum(planned_hops(rt.db.study(s), rt.db.trials(s)) for s in study_ids)


def study_table(rt: Runtime, study_id: int) -> list[dict[str, Any]]:
    """One row per trial: params, state, its metrics (``TABLE_METRICS``), hops and seconds.

    ``metric`` is the selected epoch's, by the rule promotion, status, the report
    and the registry use (``tuner.selected_epoch``), so a trial has one number.
    """
    study = rt.db.study(study_id)
    select = study.region_config.get("select", "best")
    hops_by_trial: dict[int, int] = {}
    for hop in HopRecords(rt.db).all(study_id=study_id):
        if hop.state == "done":
            hops_by_trial[hop.trial_id] = hops_by_trial.get(hop.trial_id, 0) + 1
    rows = []
    for t in rt.db.trials(study_id):
        seconds = ((t.finished_at - t.started_at).total_seconds()
                   if t.finished_at and t.started_at else None)
        chosen = selected_epoch(rt.db.epochs(t.id), bool(study.minimize), select)
        rows.append({"region": study.region, "study": study_id, "trial": t.number,
                     "state": t.state, "params": t.params,
                     "metric": chosen[1] if chosen else None,
                     "epoch": chosen[0] + 1 if chosen else None, "last": t.last_metric,
                     "epochs": t.epochs_done, "hops": hops_by_trial.get(t.id, 0),
                     "seconds": seconds})
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return json.dumps({k: float(f"{v:.3g}") if isinstance(v, float) else v
                           for k, v in value.items()}, separators=(",", ":"))
    return "-" if value is None else str(value)


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain aligned text table."""
    cells = [[c for c in columns]] + [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def outcome(rt: Runtime, study_id: int) -> tuple[int, list[str]]:
    """The exit status a driver reports for a settled study, and the lines that say why.

    0: the study spent its budget and its promotion was decided; 1: a trial or
    the promotion failed (each reason is a line: the unreadable checkpoint, the
    factory's exception).
    """
    study = rt.db.study(study_id)
    lines = []
    if study.state != "done":
        lines.append(f"study {study_id} {study.state}: {study.failure or 'not finished'}")
    promotion = study.promotion or {}
    if promotion.get("failed"):
        lines.append(f"promotion failed: {promotion['reason']}")
    # the trials' own reasons last, where a user's eye lands: the file, the exception
    lines += [f"trial {t.number} failed: {t.failure}" for t in rt.db.trials(study_id)
              if t.state == "failed"]
    return (1 if lines else 0), lines
