"""``hoptune demo``: three synthetic regions trained by hopping across local workers.

Everything runs for real on one machine: the embedded Redis (or
``HOPTUNE_BROKER_URL``), ``hoptune worker`` processes owning the shards, the
SQLite study database and the store folder under ``HOPTUNE_HOME``.
"""

from __future__ import annotations

import argparse
import time

from hoptune.core import Settings
from hoptune.tasks.cli._args import WORKERS_HELP, positive

__all__ = ["add_arguments", "run", "run_demo", "DEMO_CONFIGS"]

#: The fixed configurations every demo region trains.
DEMO_CONFIGS = [
    {"lr": 0.003, "embedding_dim": 8, "reg": 1e-4},
    {"lr": 0.01, "embedding_dim": 16, "reg": 1e-4},
    {"lr": 0.03, "embedding_dim": 16, "reg": 1e-3},
    {"lr": 0.1, "embedding_dim": 32, "reg": 1e-3},
    {"lr": 0.02, "embedding_dim": 24, "reg": 3e-4},
    {"lr": 0.05, "embedding_dim": 8, "reg": 3e-3},
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune demo``."""
    parser.add_argument("--workers", type=positive, default=0, help=WORKERS_HELP)
    parser.add_argument("--trials", type=positive, default=None,
                        help="trials per region (default: 8 tuned, 4 fixed)")
    parser.add_argument("--parallel", type=positive, default=2,
                        help="concurrent trials per region")
    parser.add_argument("--epochs", type=positive, default=3)
    parser.add_argument("--fixed", action="store_true",
                        help="train fixed configurations instead of tuning")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Run the demo as ``args`` say: see ``run_demo``."""
    trials = args.trials or (4 if args.fixed else 8)
    return run_demo(Settings.from_env(), workers=args.workers, trials=trials, epochs=args.epochs,
                    parallel=args.parallel, fixed=args.fixed, progress=not args.no_progress)


def run_demo(settings: Settings, *, workers: int = 0, trials: int = 8, epochs: int = 3,
             parallel: int = 2, fixed: bool = False, progress: bool = True) -> int:
    """Tune each demo region (or train ``DEMO_CONFIGS`` with ``fixed``); print every trial.

    ``workers`` 0: one per visible GPU, or 2. Ends with the device each worker trained on.
    """
    from hoptune.core import Store
    from hoptune.regions import ingest, load_config, write_demo
    from hoptune.tasks.cli._cluster import local_cluster
    from hoptune.tasks.cli._follow import follow, format_table, start_studies, study_table
    from hoptune.tasks.study import create_study
    from hoptune.tasks.worker import Runtime, describe_workers

    started = time.monotonic()
    config = load_config(write_demo(settings.home / "demo"))
    store = Store(settings.store_url)
    manifests = {}
    for region in config.regions.values():
        manifests[region.name] = ingest(region, store).manifest
    from hoptune.tasks import app

    rt = Runtime(settings, worker="demo")
    with local_cluster(settings, {r.name: r.shards for r in config.regions.values()}, workers):
        configs = (DEMO_CONFIGS * (trials // len(DEMO_CONFIGS) + 1))[:trials] if fixed else None
        study_ids = [
            create_study(rt, region.model_copy(update={"epochs": epochs}),
                         manifest=manifests[region.name], configs=configs, trials=trials,
                         parallel=parallel)
            for region in config.regions.values()
        ]
        start_studies(app, study_ids)
        follow(rt, app, study_ids, progress=progress)
        workers = describe_workers(app)
    rows = [row for s in study_ids for row in study_table(rt, s)]
    print(format_table(rows, ["region", "trial", "state", "params", "metric", "epochs", "hops",
                              "seconds"]))
    for study_id in study_ids:
        study = rt.db.study(study_id)
        if study.best_trial_id:
            best = rt.db.trial(study.best_trial_id)
            print(f"{study.region}: best trial {best.number}, validation RMSE "
                  f"{best.last_metric:.4f}")
    for worker in workers:
        print(f"{worker['worker']} trained {worker['hops']} hops on {worker['device']} "
              f"(kernels: {worker['kernels']})")
    failed = [r for r in rows if r["state"] == "failed"]
    print(f"{len(rows)} trials in {len(study_ids)} regions, {time.monotonic() - started:.0f} s"
          + (f"; {len(failed)} failed" if failed else ""))
    return 1 if failed else 0
