"""The ``hoptune`` command line.

Every failure a user can cause is a ``HoptuneError``: printed as one line
(``hoptune: error: …``) with exit status 2. Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from regions import ConfigError, HoptuneError, Settings

__all__ = ["main", "build_parser"]

REGION_PATTERN = "[a-z0-9_-]+"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hoptune",
        description="Tune and retrain one model per region by model hopping on Celery workers.")
    parser.add_argument("--config", type=Path, default=None,
                        help="region configuration (default: $HOPTUNE_CONFIG or ./hoptune.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ingest", help="validate, split and shard a region's data into the store")
    p.add_argument("regions", nargs="*", metavar="REGION", help="regions (default: all)")

    p = sub.add_parser("worker", help="run a Celery worker that owns some shards")
    p.add_argument("--shards", required=True, metavar="REGION:K[,REGION:K…]",
                   help="the shards this worker owns; it consumes exactly their queues")
    p.add_argument("--gpu", type=int, default=None, metavar="INDEX",
                   help="the GPU this worker uses (sets CUDA_VISIBLE_DEVICES)")
    p.add_argument("--name", default=None, help="Celery node name (default: gpuN@host / hop@host)")
    p.add_argument("--no-control", action="store_true",
                   help="do not consume the control queue (tune_step, sweep)")
    p.add_argument("--loglevel", default="INFO")

    p = sub.add_parser("up", help="start the embedded Redis and N local workers, until Ctrl-C")
    p.add_argument("--workers", type=_positive, default=2)

    p = sub.add_parser("demo", help="synthetic data for 3 regions, tuned by hopping, in a table")
    p.add_argument("--workers", type=_positive, default=2)
    p.add_argument("--trials", type=_positive, default=8, help="trials per region")
    p.add_argument("--parallel", type=_positive, default=2, help="concurrent trials per region")
    p.add_argument("--epochs", type=_positive, default=3)
    p.add_argument("--fixed", action="store_true",
                   help="train fixed configurations instead of tuning")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("tune", help="tune a region: start its study, or resume the running one")
    p.add_argument("region", metavar="REGION")
    p.add_argument("--trials", type=_positive, default=None,
                   help="trial budget of a new study (default: the region's `trials`)")
    p.add_argument("--parallel", type=_positive, default=None,
                   help="concurrent trials of a new study (default: the region's `parallel`)")
    p.add_argument("--local-workers", type=_positive, default=None, metavar="N",
                   help="start the embedded Redis and N local workers for this command")
    p.add_argument("--detach", action="store_true",
                   help="start or resume the study and return; the workers carry it on")
    p.add_argument("--no-progress", action="store_true", help="no live view")

    p = sub.add_parser("status", help="studies of every region: trials by state, best metric")
    p.add_argument("regions", nargs="*", metavar="REGION")

    p = sub.add_parser("sweep", help="re-send the work of stalled trials once")
    p.add_argument("--stall-seconds", type=float, default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(COMMANDS[args.command](args) or 0)
    except HoptuneError as exc:
        print(f"hoptune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hoptune: interrupted", file=sys.stderr)
        return 130


def _settings() -> Settings:
    return Settings.from_env()


def _config(args: argparse.Namespace):  # noqa: ANN202 - regions.Config
    from regions import load_config

    return load_config(args.config or _settings().config_path)


def _regions(config, names: list[str]) -> list:  # noqa: ANN001
    return [config.region(n) for n in names] if names else list(config.regions.values())


def cmd_ingest(args: argparse.Namespace) -> int:
    from regions import Store, ingest

    config = _config(args)
    store = Store(_settings().store_url)
    for region in _regions(config, args.regions):
        result = ingest(region, store)
        rows = sum(result.manifest["rows"])
        state = "ingested" if result.changed else "unchanged"
        print(f"{region.name}: {state}, {rows} training rows in {len(result.manifest['rows'])} "
              f"shards, {result.manifest['validation_rows']} validation rows "
              f"(hash {result.manifest['hash'][:12]})")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    import re

    from tasks._hop import CONTROL_QUEUE, hop_queue
    from tasks._runtime import parse_shard_spec

    owned = parse_shard_spec(args.shards)
    for region, _ in owned:
        if not re.fullmatch(REGION_PATTERN, region):
            raise ConfigError(f"--shards: bad region name {region!r} (expected {REGION_PATTERN})")
    host = socket.gethostname()
    name = args.name or (f"gpu{args.gpu}@{host}" if args.gpu is not None else f"hop@{host}")
    os.environ["HOPTUNE_WORKER_SHARDS"] = args.shards
    os.environ["HOPTUNE_WORKER_NAME"] = name
    if args.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
    queues = [hop_queue(r, k) for r, k in owned]
    if not args.no_control:
        queues.append(CONTROL_QUEUE)
    from tasks._app import app

    app.worker_main(["worker", "-Q", ",".join(queues), "-n", name, "-c", "1", "-E",
                     "-l", args.loglevel, "-P", "prefork"])
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from tasks._app import app
    from tasks._cluster import local_cluster

    settings = _settings()
    config = _config(args)
    shards = {r.name: r.shards for r in config.regions.values()}
    with local_cluster(settings, shards, args.workers, loglevel="INFO") as cluster:
        for name, owned in zip(cluster.names, cluster.assignment, strict=True):
            print(f"{name}: " + ", ".join(f"{r}:{k}" for r, k in owned))
        print(f"broker {app.conf.broker_url}; logs in {settings.home / 'logs'}; Ctrl-C stops")
        while cluster.alive():
            time.sleep(1.0)
    print("hoptune: a worker exited; stopping", file=sys.stderr)
    return 1


def cmd_tune(args: argparse.Namespace) -> int:
    from tasks._tune import tune_region

    return tune_region(_settings(), _config(args), args.region, trials=args.trials,
                       parallel=args.parallel, local_workers=args.local_workers,
                       progress=not args.no_progress, detach=args.detach)


def cmd_demo(args: argparse.Namespace) -> int:
    from tasks._demo import run_demo

    return run_demo(_settings(), workers=args.workers, trials=args.trials, epochs=args.epochs,
                    parallel=args.parallel, fixed=args.fixed, progress=not args.no_progress)


def cmd_status(args: argparse.Namespace) -> int:
    from tasks._driver import format_table
    from tuner._db import StudyDB

    db = StudyDB(_settings().database_url)
    rows = []
    for study in db.studies():
        if args.regions and study["region"] not in args.regions:
            continue
        counts = db.counts(study["id"])
        best = db.trial(study["best_trial_id"]) if study["best_trial_id"] else None
        if best is None:
            ranked = [t for t in db.trials(study["id"]) if t["best_metric"] is not None]
            if ranked:
                best = (min if study["minimize"] else max)(ranked, key=lambda t: t["best_metric"])
        rows.append({"region": study["region"], "study": study["id"], "state": study["state"],
                     **{k: counts[k] for k in ("pending", "running", "done", "pruned", "failed")},
                     "best": best["best_metric"] if best else None,
                     "params": best["params"] if best else None})
    if not rows:
        print("no studies yet")
        return 0
    print(format_table(rows, ["region", "study", "state", "pending", "running", "done",
                              "pruned", "failed", "best", "params"]))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from tasks._app import app, send
    from tasks._runtime import runtime
    from tasks._sweeper import sweep

    dispatches = sweep(runtime(), args.stall_seconds)
    send(dispatches, app)
    print(f"re-sent {len(dispatches)} messages")
    return 0


COMMANDS = {
    "ingest": cmd_ingest,
    "worker": cmd_worker,
    "up": cmd_up,
    "demo": cmd_demo,
    "tune": cmd_tune,
    "status": cmd_status,
    "sweep": cmd_sweep,
}

if __name__ == "__main__":
    sys.exit(main())
