"""``hoptune tune``: start or resume a region's study, then follow it live.

The study lives in the database and its workflow in Celery tasks, so this
command can die at any point: running it again finds the region's running
study, re-sends the furthest hop of each of its trials (a hop whose output
exists only hands on, so this never trains anything twice) and follows it.
A new study is warm-started from the region's last finished one.
"""

from __future__ import annotations

import sys
from typing import Any

from regions import Config, RegionConfig, Settings, ingest
from regions._config import display_path
from tasks._driver import follow, format_table, study_table
from tasks._hop import tune_step_dispatch
from tasks._runtime import Runtime
from tasks._sweeper import busy_trials, sweep
from tasks._workflow import create_study
from tuner import parse_space

__all__ = ["open_study", "tune_region"]


def open_study(rt: Runtime, config: Config, region: RegionConfig, *, trials: int | None = None,
               parallel: int | None = None) -> tuple[int, bool]:
    """The region's running study (resumed), or a new one warm-started from the last."""
    running = rt.db.latest_study(region.name, state="running")
    if running is not None:
        return running["id"], True
    # a bad space stops here, before the store or the database is touched
    where = f"{display_path(config.path)}: regions.{region.name}.space"
    parse_space(region.space, where)
    manifest = ingest(region, rt.store).manifest
    parent = rt.db.latest_study(region.name, state="done")
    study_id = create_study(rt, region, manifest=manifest, trials=trials, parallel=parallel,
                            parent_id=parent["id"] if parent else None, where=where)
    return study_id, False


def tune_region(settings: Settings, config: Config, name: str, *, trials: int | None = None,
                parallel: int | None = None, local_workers: int | None = None,
                progress: bool = True, detach: bool = False) -> int:
    region = config.region(name)
    rt = Runtime(settings, worker="cli")
    study_id, resumed = open_study(rt, config, region, trials=trials, parallel=parallel)
    study = rt.db.study(study_id)
    if resumed:
        print(f"{region.name}: resuming study {study_id} ({study['budget']} trials, "
              f"{study['parallel']} at a time)")
    else:
        warm = f", warm-started from study {study['parent_id']}" if study["parent_id"] else ""
        print(f"{region.name}: study {study_id}, {study['budget']} trials, "
              f"{study['parallel']} at a time{warm}")
    from tasks._app import app, send
    from tasks._cluster import local_cluster

    with local_cluster(settings, {region.name: region.shards}, local_workers):
        if not app.control.ping(timeout=1.0):
            print("hoptune: warning: no worker answers; start `hoptune up` or "
                  "`hoptune worker --shards …`", file=sys.stderr)
        # resuming: re-send the furthest hop of each trial that no live worker holds
        resend = sweep(rt, 0.0, study_id, busy_trials(app)) if resumed else []
        send([tune_step_dispatch(study_id), *resend], app)
        if detach:
            print(f"study {study_id} runs in the workers; `hoptune status` shows it")
            return 0
        follow(rt, app, [study_id], progress=progress)
    print_study(rt, study_id)
    return 0 if rt.db.study(study_id)["state"] == "done" else 1


def print_study(rt: Runtime, study_id: int, top: int = 10) -> None:
    study = rt.db.study(study_id)
    rows: list[dict[str, Any]] = study_table(rt, study_id)
    scored = sorted((r for r in rows if r["metric"] is not None),
                    key=lambda r: r["metric"], reverse=not study["minimize"])
    shown = scored[:top] + [r for r in rows if r["metric"] is None][: max(top - len(scored), 0)]
    print(format_table(shown, ["trial", "state", "metric", "epochs", "hops", "seconds",
                               "params"]))
    if study["best_trial_id"]:
        best = rt.db.trial(study["best_trial_id"])
        print(f"study {study_id} {study['state']}: best trial {best['number']} "
              f"{best['last_metric']:.4g} with {best['params']}")
    else:
        print(f"study {study_id} {study['state']}: {study['failure'] or 'no finished trial'}")
