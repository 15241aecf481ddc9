"""``hoptune demo``: three synthetic regions trained by hopping across local workers.

Everything runs for real on one machine: the embedded Redis (or
``HOPTUNE_BROKER_URL``), ``hoptune worker`` processes owning the shards, the
SQLite study database and the store folder under ``HOPTUNE_HOME``.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from hoptune.core import Settings
from hoptune.tasks.cli._args import WORKERS_HELP, positive

if TYPE_CHECKING:
    from hoptune.tasks.worker import Runtime

__all__ = ["add_arguments", "run", "run_demo", "next_commands", "print_left",
           "DEMO_CONFIGS"]

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
    parser.add_argument("--parallel", type=positive, default=None,
                        help="concurrent trials per region (default: the demo "
                             "configuration's, 2)")
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
             parallel: int | None = None, fixed: bool = False, progress: bool = True) -> int:
    """Tune each demo region (or train ``DEMO_CONFIGS`` with ``fixed``); print every trial.

    ``workers`` 0: one per visible GPU, or 2; ``parallel`` None: the demo
    configuration's. Ends with the device each worker trained on, each region's
    champion, where the configuration and the home are, and what to run next.
    """
    from hoptune.regions import load_config, write_demo
    from hoptune.tasks.cli._cluster import default_workers, local_cluster
    from hoptune.tasks.cli._follow import (
        TABLE_METRICS,
        follow,
        format_table,
        metric_note,
        start_studies,
        study_table,
    )
    from hoptune.tasks.plan import ingest_region
    from hoptune.tasks.study import create_study
    from hoptune.tasks.worker import Runtime, describe_workers

    started = time.monotonic()
    config = load_config(write_demo(settings.demo_config.parent))
    rt = Runtime(settings, worker="demo")
    manifests = {}
    for region in config.regions.values():
        manifests[region.name] = ingest_region(rt, region, workers or default_workers()).manifest
    from hoptune.tasks import app

    with local_cluster(settings, {n: int(m["shards"]) for n, m in manifests.items()}, workers):
        configs = (DEMO_CONFIGS * (trials // len(DEMO_CONFIGS) + 1))[:trials] if fixed else None
        study_ids = [
            create_study(rt, region.model_copy(update={"epochs": epochs}),
                         manifest=manifests[region.name], configs=configs, trials=trials,
                         parallel=parallel or region.parallel)
            for region in config.regions.values()
        ]
        start_studies(app, study_ids)
        follow(rt, app, study_ids, progress=progress)
        workers = describe_workers(app)
    rows = [row for s in study_ids for row in study_table(rt, s)]
    print(format_table(rows, ["region", "trial", "state", "params", *TABLE_METRICS, "epochs",
                              "hops", "seconds"]))
    print(metric_note(rt.db.study(study_ids[0])))
    for worker in workers:
        print(f"{worker['worker']} trained {worker['hops']} hops on {worker['device']} "
              f"(kernels: {worker['kernels']})")
    failed = [r for r in rows if r["state"] == "failed"]
    print(f"{len(rows)} trials in {len(study_ids)} regions, {time.monotonic() - started:.0f} s"
          + (f"; {len(failed)} failed" if failed else ""))
    print_left(rt, settings, study_ids)
    return 1 if failed else 0


def next_commands(region: str, config_flag: str = "") -> list[str]:
    """The three commands the demo suggests next (README's "After the demo" runs them too)."""
    return ["hoptune status", f"hoptune report {region}",
            f"hoptune tune {region}{config_flag} --trials 4 --local-workers 2"]


def print_left(rt: Runtime, settings: Settings, study_ids: list[int]) -> None:
    """What the demo left: each region's champion, its configuration and home, what next."""
    from hoptune.regions import display_path
    from hoptune.tuner import champion_card

    print("\nwhat the demo left:")
    regions = []
    for study_id in study_ids:
        study = rt.db.study(study_id)
        regions.append(study.region)
        card = champion_card(rt.store, study.region)
        promotion = study.promotion or {}
        if card is not None and card["study_id"] == study_id:
            print(f"  {study.region}: champion {card['version']}, validation "
                  f"{card['metric_name']} {card['metric']:.4f} (trial {card['trial_number']}, "
                  f"epoch {card['selected_epoch']})")
        else:
            print(f"  {study.region}: no new champion ({promotion.get('reason', 'no decision')})")
    config = settings.demo_config
    found = Settings.from_env().config_path == config
    print(f"  configuration: {display_path(config)}"
          + (" (the commands below, run in this folder, find it)" if found else
             f" (pass --config {display_path(config)}: ./hoptune.toml or $HOPTUNE_CONFIG "
             f"names another here)"))
    print(f"  home: {display_path(settings.home)} (study database, store, registry, reports)")
    flag = "" if found else f" --config {display_path(config)}"
    print("try next:")
    for command in next_commands(regions[0], flag):
        print(f"  {command}")
