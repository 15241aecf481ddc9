"""``hoptune status``: every region's studies, the workers that answer, the last nightly runs.

One row per study (its trials by state and its best trial so far), then the
workers that answer a ping, each region's last nightly run and the health
sections of ``hoptune.tasks.monitor`` (failed trials, worker heartbeats, shard
takeovers, dead letters). A calibration study records hop costs only, so it
has no best trial.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from hoptune.core import Settings
from hoptune.tasks.cli._args import region_name

if TYPE_CHECKING:
    from hoptune.tuner import StudyDB, StudyRow

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune status``."""
    parser.add_argument("regions", nargs="*", type=region_name, metavar="REGION")


def run(args: argparse.Namespace) -> int:
    """Print the tables of the regions named (default: all)."""
    from hoptune.tasks.cli._follow import format_table
    from hoptune.tuner import StudyDB

    db = StudyDB(Settings.from_env().database_url)
    rows = [_study_row(db, study) for study in db.studies()
            if not args.regions or study.region in args.regions]
    if not rows:
        print("no studies yet")
        _print_workers()
        return 0
    print(format_table(rows, ["region", "study", "state", "pending", "running", "done",
                              "pruned", "failed", "best_trial", "metric", "epoch", "params"]))
    print("best_trial: the study's best trial so far; metric: its validation metric at its "
          "selected epoch (epoch, numbered from 1), as the report and the registry show it")
    from hoptune.tasks.plan import shard_line

    latest = {s.region: s for s in db.studies() if not args.regions or s.region in args.regions}
    for name, study in sorted(latest.items()):  # each region's latest study's shards
        print(f"{name}: {shard_line(study.manifest)}")
    _print_workers()
    nightly = _nightly_rows(db, args.regions)
    if nightly:
        print("\nlast nightly run per region:")
        print(format_table(nightly, ["region", "run", "started", "seconds", "state",
                                     "champion", "outcome"]))
    from hoptune.tasks.monitor import health_sections

    for title, section, columns in health_sections(db, Settings.from_env(), args.regions):
        print(f"\n{title}")
        print(format_table(section, columns))
    return 0


def _study_row(db: StudyDB, study: StudyRow) -> dict[str, Any]:
    """A study's row: its trials by state and its best trial, by the one rule promotion and
    the report use (``tuner.best_trial``), with the metric that ranks it."""
    from hoptune.tuner import best_trial, selected_epoch

    counts = db.counts(study.id)
    select = study.region_config.get("select", "best")
    best = chosen = None
    if study.kind != "calibration":  # a calibration records hop costs only: nothing to rank
        best = best_trial(db.trials(study.id), bool(study.minimize), select)
    if best is not None:
        chosen = selected_epoch(db.epochs(best.id), bool(study.minimize), select)
    state = f"{study.state} (calibration)" if study.kind == "calibration" else study.state
    return {"region": study.region, "study": study.id, "state": state,
            **{k: counts[k] for k in ("pending", "running", "done", "pruned", "failed")},
            "best_trial": best.number if best else None,
            "metric": chosen[1] if chosen else None,
            "epoch": chosen[0] + 1 if chosen else None,
            "params": best.params if best else None}


def _print_workers() -> None:
    from hoptune.tasks import app
    from hoptune.tasks.cli._follow import format_table
    from hoptune.tasks.worker import answering_workers

    rows, why = answering_workers(Settings.from_env(), app)
    print(f"\nworkers: {why}" if why else "\nworkers:")
    if rows:
        print(format_table(rows, ["worker", "device", "kernels", "shards", "hops"]))


def _nightly_rows(db: StudyDB, regions: list[str]) -> list[dict[str, Any]]:
    """Each region's last nightly run (of the regions named, or all)."""
    from hoptune.core import Store
    from hoptune.tuner import NightlyRecords, champion_card, utcnow

    store = Store(Settings.from_env().store_url)
    last: dict[str, dict[str, Any]] = {}
    for row in NightlyRecords(db).regions():
        if not regions or row["region"] in regions:
            last[row["region"]] = row
    out = []
    for name, row in sorted(last.items()):
        end = row["finished_at"] or utcnow()
        card = champion_card(store, name)
        out.append({"region": name, "run": row["run_id"],
                    "started": f"{row['started_at']:%Y-%m-%d %H:%M}",
                    "seconds": round((end - row["started_at"]).total_seconds()),
                    "state": row["state"], "champion": card["version"] if card else None,
                    "outcome": row["outcome"]})
    return out
