"""``hoptune tune``: start or resume a region's study, then follow it live.

The study lives in the database and its workflow in Celery tasks, so this
command can die at any point: running it again finds the region's running
study, re-sends the furthest hop of each of its trials (a hop whose output
exists only hands on, so this never trains anything twice) and follows it.
A new study is warm-started from the region's last finished one.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from hoptune.core import Settings, StudyError
from hoptune.tasks.cli._args import add_follow_options, positive, read_config, region_name

if TYPE_CHECKING:
    from hoptune.regions import Config, RegionConfig
    from hoptune.tasks.worker import Dispatch, Runtime

__all__ = ["add_arguments", "open_study", "run", "tune_region"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune tune``."""
    parser.add_argument("region", type=region_name, metavar="REGION")
    parser.add_argument("--trials", type=positive, default=None,
                        help="trial budget of a new study (default: the region's `trials`)")
    parser.add_argument("--parallel", type=positive, default=None,
                        help="concurrent trials of a new study (default: the region's "
                             "`parallel`)")
    add_follow_options(parser, "start or resume the study")


def run(args: argparse.Namespace) -> int:
    """Start or resume the study of ``args.region`` and follow it: see ``tune_region``."""
    return tune_region(Settings.from_env(), read_config(args), args.region, trials=args.trials,
                       parallel=args.parallel, local_workers=args.local_workers,
                       progress=not args.no_progress, detach=args.detach)


def open_study(rt: Runtime, config: Config, region: RegionConfig, *, trials: int | None = None,
               parallel: int | None = None) -> tuple[int, bool]:
    """The region's running study (resumed), or a new one warm-started from the last."""
    from hoptune.regions import display_path
    from hoptune.tasks.plan import ingest_region
    from hoptune.tasks.study import check_region, create_study

    running = rt.db.latest_study(region.name, state="running")
    if running is not None:
        return running.id, True
    # a bad configuration stops here, before the store or the database is touched
    check_region(config, region, tuned=True)
    where = f"{display_path(config.path)}: regions.{region.name}.space"
    manifest = ingest_region(rt, region).manifest
    parent = rt.db.latest_study(region.name, state="done")
    try:
        study_id = create_study(rt, region, manifest=manifest, trials=trials, parallel=parallel,
                                parent_id=parent.id if parent else None, where=where)
    except StudyError:
        # another command started the region's study meanwhile: follow that one
        running = rt.db.latest_study(region.name, state="running")
        if running is None:
            raise
        return running.id, True
    return study_id, False


def tune_region(settings: Settings, config: Config, name: str, *, trials: int | None = None,
                parallel: int | None = None, local_workers: int | None = None,
                progress: bool = True, detach: bool = False) -> int:
    """Start or resume the region's study and follow it; the first hop starts in seconds.

    Local workers are spawned first (a bad configuration stops before that) and
    import and preload while this process ingests, records the study and sends
    its first ``tune_step``, which waits in Redis for the first worker up.
    """
    from hoptune.tasks.study import check_region

    region = config.region(name)
    check_region(config, region, tuned=True)
    from hoptune.tasks import app, send
    from hoptune.tasks.cli._cluster import default_workers, local_cluster
    from hoptune.tasks.cli._follow import follow, outcome
    from hoptune.tasks.plan import local_shards
    from hoptune.tasks.study import sweep
    from hoptune.tasks.worker import Runtime, region_of

    if local_workers is not None:
        from hoptune.tasks.cli._cluster import stop_seconds

        stop_seconds()  # a bad bound stops here, before the study database is touched
    rt = Runtime(settings, worker="cli")
    shards = {}
    if local_workers is not None:  # "auto": the K of the running study or of the data now
        shards = {region.name: local_shards(rt, region, local_workers or default_workers())}
    with local_cluster(settings, shards, local_workers, wait=False) as cluster:
        study_id, resumed = open_study(rt, config, region, trials=trials, parallel=parallel)
        study = rt.db.study(study_id)
        # resuming: send again every hop of the study that waits (a live worker's hop is
        # left alone: its claim holds, and a copy of a waiting one is claimed once)
        resend = sweep(rt, app, study_id, resend_after=0.0) if resumed else []
        send([*first_step(rt, study_id, workers_starting=cluster is not None), *resend], app)
        if resumed:
            print(f"{region.name}: resuming study {study_id} ({study.budget} trials, "
                  f"{study.parallel} at a time)")
        else:
            warm = f", warm-started from study {study.parent_id}" if study.parent_id else ""
            print(f"{region.name}: study {study_id}, {study.budget} trials, "
                  f"{study.parallel} at a time{warm}")
        if cluster is not None:
            cluster.wait_ready(app)  # a worker that cannot start is an error, not a stall
        else:
            warn_unowned(rt, region_of(study))
        if detach:
            print(f"study {study_id} runs in the workers; `hoptune status` shows it")
            return 0
        follow(rt, app, [study_id], progress=progress)
    print_study(rt, study_id)
    status, problems = outcome(rt, study_id)
    for line in problems:
        print(f"hoptune: {line}", file=sys.stderr)
    return status


def unowned_shards(rt: Runtime, region: RegionConfig) -> list[int]:
    """The region's shards that no live worker owns, read from the workers' heartbeats (no
    broadcast to wait on); a live worker of another region takes them over in time."""
    from hoptune.tasks.worker import live_after
    from hoptune.tuner import WorkerRecords

    owned = {int(k) for w in WorkerRecords(rt.db).live(live_after())
             for r, k in w["shards"] or [] if r == region.name}
    return [k for k in range(region.shards) if k not in owned]


def warn_unowned(rt: Runtime, region: RegionConfig) -> None:
    """Warn, naming the shards and the command that serves them, where no live worker owns
    some of the region's shards: their hops wait."""
    missing = unowned_shards(rt, region)
    if not missing:
        return
    spec = ",".join(f"{region.name}:{k}" for k in missing)
    print(f"hoptune: warning: no live worker owns {region.name}'s shard(s) "
          f"{', '.join(map(str, missing))}: their hops wait; start `hoptune up` or "
          f"`hoptune worker --shards {spec}`", file=sys.stderr)


def first_step(rt: Runtime, study_id: int, *, workers_starting: bool) -> list[Dispatch]:
    """The messages that start a study: its first trials' hops, or a ``tune_step``.

    While this command's own workers are still starting, their first seconds go
    to importing torch: proposing the first trials here, meanwhile, puts their
    hops in the queues before any worker is ready. Running workers propose
    faster than this process could import scikit-optimize, so they are sent a
    ``tune_step``.
    """
    if not workers_starting:
        from hoptune.tasks.worker import tune_step_dispatch

        return [tune_step_dispatch(study_id)]
    from hoptune.tasks.study import tune_step

    return tune_step(rt, study_id)


def print_study(rt: Runtime, study_id: int, top: int = 10) -> None:
    """The study's best ``top`` trials, its outcome and its promotion.

    Trials are ranked, and the best named, by their selected epoch's metric:
    the number the report, ``hoptune status`` and the registry show.
    """
    from hoptune.tasks.cli._follow import TABLE_METRICS, format_table, metric_note, study_table

    study = rt.db.study(study_id)
    rows: list[dict[str, Any]] = study_table(rt, study_id)
    scored = sorted((r for r in rows if r["metric"] is not None),
                    key=lambda r: r["metric"], reverse=not study.minimize)
    shown = scored[:top] + [r for r in rows if r["metric"] is None][: max(top - len(scored), 0)]
    print(format_table(shown, ["trial", "state", *TABLE_METRICS, "epochs", "hops", "seconds",
                               "params"]))
    print(metric_note(study))
    number = rt.db.trial(study.best_trial_id).number if study.best_trial_id else None
    best = next((r for r in rows if r["trial"] == number), None)
    if best is not None and best["metric"] is not None:
        print(f"study {study_id} {study.state}: best trial {best['trial']}, metric "
              f"{best['metric']:.4g} at epoch {best['epoch']}, with {best['params']}")
    else:
        print(f"study {study_id} {study.state}: {study.failure or 'no finished trial'}")
    if study.promotion is not None:
        print(f"promotion: {study.promotion['reason']}")
