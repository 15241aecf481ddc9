"""The ``hoptune`` command line.

Every failure a user can cause is a ``HoptuneError``: printed as one line
(``hoptune: error: …``) with exit status 2. Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hoptune.core import ConfigError, HoptuneError, Settings, lazy_names
from hoptune.tasks.cli._db import add_db_arguments, require_schema, run_db
from hoptune.tasks.cli._flower import add_flower_arguments, run_flower

_NAMES = {
    "calibrate": "hoptune.tasks.cli._calibrate",
    "LocalCluster": "hoptune.tasks.cli._cluster",
    "assign_shards": "hoptune.tasks.cli._cluster",
    "local_cluster": "hoptune.tasks.cli._cluster",
    "follow": "hoptune.tasks.cli._follow",
    "settled": "hoptune.tasks.cli._follow",
    "start_studies": "hoptune.tasks.cli._follow",
}

__all__ = ["main", "build_parser", *_NAMES]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())

REGION_PATTERN = "[a-z0-9_-]+"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _region(text: str) -> str:
    """A region name from the command line; it becomes part of store paths, so it is checked."""
    import re

    if not re.fullmatch(REGION_PATTERN, text):
        raise argparse.ArgumentTypeError(f"bad region name {text!r} (expected {REGION_PATTERN})")
    return text


def _names(text: str) -> list[str]:
    import re

    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if not re.fullmatch(REGION_PATTERN, name):
            raise argparse.ArgumentTypeError(f"bad region name {name!r}")
    if not names:
        raise argparse.ArgumentTypeError("no region given")
    return names


def _add_follow_options(p: argparse.ArgumentParser, start: str) -> None:
    """The options of commands that start work in the workers and then follow it."""
    p.add_argument("--local-workers", type=_positive, default=None, metavar="N", nargs="?",
                   const=0, help="start the embedded Redis and N local workers for this "
                                 "command (N omitted: one per visible GPU, or 2)")
    p.add_argument("--detach", action="store_true",
                   help=f"{start} and return; the workers carry it on")
    p.add_argument("--no-progress", action="store_true", help="no live view")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hoptune",
        description="Tune and retrain one model per region by model hopping on Celery workers.")
    parser.add_argument("--config", type=Path, default=None,
                        help="region configuration (default: $HOPTUNE_CONFIG or ./hoptune.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ingest", help="validate, split and shard a region's data into the store")
    p.add_argument("regions", nargs="*", type=_region, metavar="REGION",
                   help="regions (default: all)")

    p = sub.add_parser("worker", help="run a Celery worker that owns some shards")
    p.add_argument("--shards", required=True, metavar="REGION:K[,REGION:K…]",
                   help="the shards this worker owns; it consumes exactly their queues")
    p.add_argument("--gpu", type=int, default=None, metavar="INDEX",
                   help="train on this GPU, the only one the worker sees")
    p.add_argument("--device", default=None, metavar="cpu|cuda|cuda:N",
                   help="train on this device; overrides --gpu (default: the first visible "
                        "GPU, else the CPU)")
    p.add_argument("--kernels", choices=("auto", "cupy", "torch"), default=None,
                   help="CuPy kernels where their self-test passes (auto), always (cupy: a "
                        "failed self-test is an error), or never (torch); default "
                        "$HOPTUNE_KERNELS or auto")
    p.add_argument("--name", default=None, help="Celery node name (default: gpuN@host / hop@host)")
    p.add_argument("--no-control", action="store_true",
                   help="do not consume the control queue (tune_step, sweep)")
    p.add_argument("--loglevel", default="INFO")

    workers_help = "local workers (default: one per visible GPU, or 2)"
    p = sub.add_parser("up", help="start the embedded Redis and N local workers, until Ctrl-C")
    p.add_argument("--workers", type=_positive, default=0, help=workers_help)
    p.add_argument("--metrics-port", type=_positive, default=None, metavar="PORT",
                   help="also serve Prometheus metrics on PORT (as `hoptune metrics`)")

    p = sub.add_parser("demo", help="synthetic data for 3 regions, tuned by hopping, in a table")
    p.add_argument("--workers", type=_positive, default=0, help=workers_help)
    p.add_argument("--trials", type=_positive, default=None,
                   help="trials per region (default: 8 tuned, 4 fixed)")
    p.add_argument("--parallel", type=_positive, default=2, help="concurrent trials per region")
    p.add_argument("--epochs", type=_positive, default=3)
    p.add_argument("--fixed", action="store_true",
                   help="train fixed configurations instead of tuning")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("tune", help="tune a region: start its study, or resume the running one")
    p.add_argument("region", type=_region, metavar="REGION")
    p.add_argument("--trials", type=_positive, default=None,
                   help="trial budget of a new study (default: the region's `trials`)")
    p.add_argument("--parallel", type=_positive, default=None,
                   help="concurrent trials of a new study (default: the region's `parallel`)")
    _add_follow_options(p, "start or resume the study")

    p = sub.add_parser("nightly", help="the nightly retraining, by hand: re-ingest, tune warm, "
                                       "promote if better, for every region")
    p.add_argument("--regions", type=_names, default=None, metavar="R1,R2",
                   help="only these regions (default: all)")
    _add_follow_options(p, "start the run")

    p = sub.add_parser("beat", help="run celery beat with the nightly schedule (exactly one)")
    p.add_argument("--loglevel", default="INFO")
    p.add_argument("--schedule-file", type=Path, default=None,
                   help="where beat keeps its last run times (default: $HOPTUNE_HOME)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the schedule and the next nightly run, then exit")

    p = sub.add_parser("models", help="the model registry: every promoted version")
    p.add_argument("regions", nargs="*", type=_region, metavar="REGION")

    p = sub.add_parser("export", help="write a region's champion for serving")
    p.add_argument("region", type=_region, metavar="REGION")
    p.add_argument("--out", type=Path, required=True, metavar="DIR")

    p = sub.add_parser("predict", help="predict rows of a CSV or Parquet file with a region's "
                                       "champion")
    p.add_argument("region", type=_region, metavar="REGION")
    p.add_argument("--input", type=Path, required=True, metavar="FILE",
                   help="rows with the region's column names (.csv or .parquet)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="the rows and a 'prediction' column (.csv or .parquet)")
    p.add_argument("--version", default=None, help="a registry version (default: the champion)")

    p = sub.add_parser("report", help="an HTML report with plots of a region's latest study")
    p.add_argument("region", type=_region, metavar="REGION")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="default: $HOPTUNE_HOME/reports/REGION")
    p.add_argument("--study", type=_positive, default=None, help="a study id (default: latest)")

    p = sub.add_parser("flower", help="Flower for the cluster, behind HTTP basic auth")
    add_flower_arguments(p)

    p = sub.add_parser("status", help="studies of every region, and the workers that answer")
    p.add_argument("regions", nargs="*", type=_region, metavar="REGION")

    p = sub.add_parser("doctor", help="check this host: versions, GPUs, kernel self-tests, "
                                      "broker, database, store (exit 1 if one is not usable)")
    p.add_argument("--json", action="store_true", help="one JSON object")

    p = sub.add_parser("plan", help="predict a study's or a night's wall time on N workers, "
                                    "or the fewest workers that meet a deadline")
    p.add_argument("region", nargs="?", type=_region, metavar="REGION")
    p.add_argument("--nightly", action="store_true", help="every region's study at once")
    p.add_argument("--workers", type=_positive, default=None, help="workers to plan for")
    p.add_argument("--deadline", default=None, metavar="DURATION",
                   help="print the fewest workers that meet it (6h, 90m, 45s)")
    p.add_argument("--calibrate", action="store_true",
                   help="first train a few one-epoch trials of REGION's model to record hop "
                        "costs, where this host class has none of its family")
    p.add_argument("--local-workers", type=_positive, default=None, metavar="N", nargs="?",
                   const=0, help="with --calibrate: start the embedded Redis and N local "
                                 "workers for it (default: one per visible GPU, or 2)")
    p.add_argument("--host-class", default=None, metavar="CLASS",
                   help="plan with the hop costs recorded on this host class "
                        "(HOPTUNE_HOST_CLASS; default: the class with the most recorded hops)")
    p.add_argument("--json", action="store_true", help="one JSON object")

    p = sub.add_parser("sweep", help="send again, once, whatever work a fault may have lost")

    p = sub.add_parser("metrics", help="serve Prometheus metrics for an autoscaler: queue "
                                       "depths, running hops, busy workers, trials by state, "
                                       "the predicted finish and the workers wanted")
    p.add_argument("--port", type=_positive, default=9464)
    p.add_argument("--addr", default="0.0.0.0", help="address to listen on (default: all)")
    p.add_argument("--forecast-every", type=_positive_float, default=30.0, metavar="SECONDS",
                   help="simulate the running studies' remaining work at most this often "
                        "(default 30)")

    p = sub.add_parser("gc", help="remove the checkpoints finished studies no longer need")
    p.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                   help="also every checkpoint of studies that ended more than DAYS ago")
    p.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")

    p = sub.add_parser("db", help="the study database's schema: its revision, the upgrade")
    add_db_arguments(p)
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
    from hoptune.regions import load_config

    return load_config(args.config or _settings().config_path)


def _regions(config, names: list[str]) -> list:  # noqa: ANN001
    return [config.region(n) for n in names] if names else list(config.regions.values())


def cmd_ingest(args: argparse.Namespace) -> int:
    from hoptune.core import Store
    from hoptune.regions import ingest
    from hoptune.tasks.study import check_region

    config = _config(args)
    store = Store(_settings().store_url)
    regions = _regions(config, args.regions)
    for region in regions:  # every region named is checked before any data is read
        check_region(config, region, tuned=False)
    for region in regions:
        result = ingest(region, store)
        rows = sum(result.manifest["rows"])
        state = "ingested" if result.changed else "unchanged"
        print(f"{region.name}: {state}, {rows} training rows in {len(result.manifest['rows'])} "
              f"shards, {result.manifest['validation_rows']} validation rows "
              f"(hash {result.manifest['hash'][:12]})")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    import re

    from hoptune.tasks.worker import CONTROL_QUEUE, hop_queue, parse_shard_spec

    owned = parse_shard_spec(args.shards)
    for region, _ in owned:
        if not re.fullmatch(REGION_PATTERN, region):
            raise ConfigError(f"--shards: bad region name {region!r} (expected {REGION_PATTERN})")
    from hoptune.tasks.worker import worker_environment

    host = socket.gethostname()
    name = args.name or (f"gpu{args.gpu}@{host}" if args.gpu is not None else f"hop@{host}")
    # the training process takes its device and kernels setting from the environment
    os.environ.update(worker_environment(args.device, args.gpu, args.kernels))
    os.environ["HOPTUNE_WORKER_SHARDS"] = args.shards
    os.environ["HOPTUNE_WORKER_NAME"] = name
    queues = [hop_queue(r, k) for r, k in owned]
    if not args.no_control:
        queues.append(CONTROL_QUEUE)
    require_schema(_settings())
    from hoptune.tasks import app

    # Celery's Worker itself rather than its command line, whose exit status (non-zero
    # after an unrecoverable error) app.worker_main drops: a supervisor must see it.
    # no mingle (a second's wait at start to sync revoked ids and clocks with the other
    # workers: hoptune revokes nothing) and no gossip (hoptune elects nothing); the
    # workers' heartbeats and task events, which Flower and `hoptune status` read, stay on
    worker = app.Worker(hostname=name, queues=queues, concurrency=1, pool_cls="prefork",
                        loglevel=args.loglevel, send_events=True, without_mingle=True,
                        without_gossip=True)
    worker.start()
    return int(worker.exitcode or 0)


def cmd_up(args: argparse.Namespace) -> int:
    from kombu.utils.url import maybe_sanitize_url

    from hoptune.tasks import app
    from hoptune.tasks.cli._cluster import local_cluster

    settings = _settings()
    config = _config(args)
    require_schema(settings)
    shards = {r.name: r.shards for r in config.regions.values()}
    # SIGTERM (a service manager, `kill`) stops the workers and Redis like Ctrl-C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with local_cluster(settings, shards, args.workers, loglevel="INFO") as cluster:
        for name, owned in zip(cluster.names, cluster.assignment, strict=True):
            print(f"{name}: " + ", ".join(f"{r}:{k}" for r, k in owned))
        broker = maybe_sanitize_url(app.conf.broker_url)
        print(f"broker {broker}; logs in {settings.home / 'logs'}; Ctrl-C stops")
        stop_metrics = None
        if args.metrics_port:
            from hoptune.tasks.monitor import start_metrics

            stop_metrics = start_metrics(settings, shards, args.metrics_port, app=app)
            print(f"metrics on http://0.0.0.0:{args.metrics_port}/metrics")
        try:
            while cluster.alive():
                time.sleep(1.0)
        finally:
            if stop_metrics is not None:
                stop_metrics()
    print("hoptune: a worker exited; stopping", file=sys.stderr)
    return 1


def cmd_tune(args: argparse.Namespace) -> int:
    from hoptune.tasks.cli._tune import tune_region

    return tune_region(_settings(), _config(args), args.region, trials=args.trials,
                       parallel=args.parallel, local_workers=args.local_workers,
                       progress=not args.no_progress, detach=args.detach)


def cmd_demo(args: argparse.Namespace) -> int:
    from hoptune.tasks.cli._demo import run_demo

    trials = args.trials or (4 if args.fixed else 8)
    return run_demo(_settings(), workers=args.workers, trials=trials, epochs=args.epochs,
                    parallel=args.parallel, fixed=args.fixed, progress=not args.no_progress)


def cmd_status(args: argparse.Namespace) -> int:
    from hoptune.tasks.cli._follow import format_table
    from hoptune.tuner import StudyDB

    db = StudyDB(_settings().database_url)
    rows = []
    for study in db.studies():
        if args.regions and study["region"] not in args.regions:
            continue
        counts = db.counts(study["id"])
        best = db.trial(study["best_trial_id"]) if study["best_trial_id"] else None
        calibration = study["kind"] == "calibration"  # hop costs only: nothing to rank
        if calibration:
            best = None
        elif best is None:
            ranked = [t for t in db.trials(study["id"]) if t["last_metric"] is not None]
            if ranked:
                best = (min if study["minimize"] else max)(ranked, key=lambda t: t["last_metric"])
        state = f"{study['state']} (calibration)" if calibration else study["state"]
        rows.append({"region": study["region"], "study": study["id"], "state": state,
                     **{k: counts[k] for k in ("pending", "running", "done", "pruned", "failed")},
                     "best": best["last_metric"] if best else None,
                     "params": best["params"] if best else None})
    if not rows:
        print("no studies yet")
        _print_workers()
        return 0
    print(format_table(rows, ["region", "study", "state", "pending", "running", "done",
                              "pruned", "failed", "best", "params"]))
    _print_workers()
    nightly = _nightly_rows(db, args.regions)
    if nightly:
        print("\nlast nightly run per region:")
        print(format_table(nightly, ["region", "run", "started", "seconds", "state",
                                     "champion", "outcome"]))
    from hoptune.tasks.monitor import health_sections

    for title, section, columns in health_sections(db, _settings(), args.regions):
        print(f"\n{title}")
        print(format_table(section, columns))
    return 0


def _print_workers() -> None:
    from hoptune.tasks import app
    from hoptune.tasks.cli._follow import format_table
    from hoptune.tasks.worker import answering_workers

    rows, why = answering_workers(_settings(), app)
    print(f"\nworkers: {why}" if why else "\nworkers:")
    if rows:
        print(format_table(rows, ["worker", "device", "kernels", "shards", "hops"]))


def _nightly_rows(db, regions: list[str]) -> list[dict]:  # noqa: ANN001 - tuner.StudyDB
    from hoptune.core import Store
    from hoptune.tuner import NightlyRecords, champion_card, utcnow

    store = Store(_settings().store_url)
    last: dict[str, dict] = {}
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


def cmd_nightly(args: argparse.Namespace) -> int:
    from hoptune.tasks import app, send
    from hoptune.tasks.cli._cluster import local_cluster
    from hoptune.tasks.cli._follow import POLL, follow, format_table
    from hoptune.tasks.plan import log_nightly_plan
    from hoptune.tasks.study import start_nightly
    from hoptune.tasks.worker import Runtime
    from hoptune.tuner import NightlyRecords

    settings = _settings()
    config = _config(args)
    rt = Runtime(settings, worker="cli")
    names = args.regions or list(config.regions)
    shards = {n: config.region(n).shards for n in names}
    with local_cluster(settings, shards, args.local_workers):
        run_id, dispatches = start_nightly(rt, config, args.regions, trigger="cli")
        send(dispatches, app)
        print(f"nightly run {run_id}: {len(dispatches)} studies started", flush=True)
        log_nightly_plan(rt, config, run_id)
        if args.detach:
            return 0
        studies = [r["study_id"] for r in NightlyRecords(rt.db).regions(run_id)
                   if r["study_id"] is not None]
        follow(rt, app, studies, progress=not args.no_progress)
        deadline = time.monotonic() + 120
        while (NightlyRecords(rt.db).run(run_id)["state"] == "running"
               and time.monotonic() < deadline):
            time.sleep(POLL)  # the promotions finish the run
    rows = NightlyRecords(rt.db).regions(run_id)
    print(format_table(rows, ["region", "state", "study_id", "ingested", "outcome"]))
    return 1 if any(r["state"] in ("failed", "running") for r in rows) else 0


def cmd_beat(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from hoptune.tasks.study import beat_schedule, next_nightly

    settings = _settings()
    config = _config(args)
    schedule = beat_schedule(config)
    due = next_nightly(config, datetime.now(UTC))
    sweep_every = schedule["hoptune-sweep"]["schedule"]
    print(f"nightly: cron {config.schedule.cron!r} in {config.schedule.timezone}; "
          f"next run {due:%Y-%m-%d %H:%M %Z}; sweeper every {sweep_every:.0f} s")
    if args.dry_run:
        return 0
    require_schema(settings)
    from hoptune.tasks import app

    app.conf.beat_schedule = schedule
    app.conf.timezone = config.schedule.timezone
    settings.home.mkdir(parents=True, exist_ok=True)
    schedule_file = args.schedule_file or settings.home / "celerybeat-schedule"
    app.start(["beat", "-l", args.loglevel, "-s", str(schedule_file)])
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from hoptune.core import Store
    from hoptune.tasks.cli._follow import format_table
    from hoptune.tuner import champion_card, versions

    store = Store(_settings().store_url)
    names = args.regions or sorted({k.split("/")[1] for k in store.list("models")})
    rows = []
    for name in names:
        champion = champion_card(store, name)
        for card in versions(store, name):
            rows.append({"region": name, "version": card["version"],
                         "champion": "*" if champion and champion["version"] == card["version"]
                         else "", "created": card["created_at"][:19].replace("T", " "),
                         card["metric_name"]: card["metric"], "study": card["study_id"],
                         "trial": card["trial_number"], "params": card["params"]})
    if not rows:
        print("no models yet")
        return 0
    columns = ["region", "version", "champion", "created"]
    columns += sorted({k for r in rows for k in r} - set(columns) - {"study", "trial", "params"})
    print(format_table(rows, columns + ["study", "trial", "params"]))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from hoptune.core import Store
    from hoptune.tuner import export_champion

    card = export_champion(Store(_settings().store_url), args.region, args.out)
    print(f"{args.region}: champion {card['version']} ({card['metric_name']} "
          f"{card['metric']:.4g}) written to {args.out}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    """Check every row first (a bad one: its one-line error, exit 2, no output file)."""
    import os

    from hoptune.core import DataError, Store
    from hoptune.regions import display_path, read_rows
    from hoptune.tuner import load_predictor

    suffix = args.out.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise DataError(f"{display_path(args.out)}: must end in .csv or .parquet")
    predictor = load_predictor(Store(_settings().store_url), args.region, args.version)
    table = read_rows(args.input, predictor.region)
    table["prediction"] = predictor.predict(table, display_path(args.input))
    partial = args.out.with_name(f".{args.out.name}.partial")
    if suffix == ".csv":
        table.to_csv(partial, index=False)
    else:
        table.to_parquet(partial, index=False)
    os.replace(partial, args.out)
    print(f"{args.region}: {len(table)} predictions by {predictor.version} written to "
          f"{display_path(args.out)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from hoptune.core import Store
    from hoptune.tuner import StudyDB, write_report

    settings = _settings()
    out = args.out or settings.home / "reports" / args.region
    index = write_report(StudyDB(settings.database_url), Store(settings.store_url), args.region,
                         out, study_id=args.study)
    print(f"report written to {index}")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from hoptune.tasks.study import collect
    from hoptune.tasks.worker import Runtime

    if args.older_than is not None and args.older_than < 0:
        raise ConfigError(f"--older-than: must be >= 0 days, got {args.older_than}")
    done = collect(Runtime(_settings(), worker="cli"), older_than_days=args.older_than,
                   dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(done.keys)} checkpoints, {done.bytes / 1e6:.1f} MB")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from hoptune.tasks import app, send
    from hoptune.tasks.study import sweep
    from hoptune.tasks.worker import Runtime

    dispatches = sweep(Runtime(_settings(), worker="cli"), app)
    send(dispatches, app)
    print(f"re-sent {len(dispatches)} messages")
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from hoptune.core import ConfigError
    from hoptune.tasks.monitor import start_metrics

    settings = _settings()
    require_schema(settings)
    try:
        shards = {r.name: r.shards for r in _config(args).regions.values()}
    except ConfigError:
        if args.config:  # a config named on the command line must be right
            raise
        shards = {}  # without one, the regions of running studies are reported
    stop = start_metrics(settings, shards, args.port, args.addr,
                         forecast_every=args.forecast_every)
    print(f"metrics on http://{args.addr}:{args.port}/metrics; Ctrl-C stops", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(1.0)
    finally:
        stop()


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from hoptune.core import parse_duration
    from hoptune.tasks.plan import Planner, format_plan, workers_for
    from hoptune.tasks.worker import Runtime

    if args.nightly == (args.region is not None):
        raise ConfigError("plan: name one REGION or --nightly")
    if args.calibrate and args.nightly:
        raise ConfigError("plan: --calibrate calibrates one REGION")
    if args.workers is not None and args.deadline is not None or not args.calibrate and (
            args.workers is None and args.deadline is None):
        raise ConfigError("plan: give --workers N or --deadline DURATION")
    if args.local_workers is not None and not args.calibrate:
        raise ConfigError("plan: --local-workers is for --calibrate")
    deadline = parse_duration(args.deadline, "--deadline") if args.deadline else None
    config = _config(args)
    names = list(config.regions) if args.nightly else [config.region(args.region).name]
    if args.calibrate:
        from hoptune.tasks.cli._calibrate import calibrate

        study_id = calibrate(_settings(), config, names[0], local_workers=args.local_workers)
        family = config.region(names[0]).family
        print(f"{names[0]}: " + (f"calibration study {study_id} recorded the hop costs of "
                                  f"{family}" if study_id is not None else
                                  f"this host class already has hop costs of {family}: "
                                  "nothing to calibrate"),
              file=sys.stderr if args.json else sys.stdout)
        if args.workers is None and args.deadline is None:
            return 0
    planner = Planner(Runtime(_settings(), worker="cli"), config, names, host=args.host_class)
    result = workers_for(planner, deadline) if deadline else planner.plan(args.workers)
    if args.json:
        print(json.dumps({**result.as_dict(), "regions": names, "deadline_seconds": deadline}))
    else:
        print(format_plan(result, deadline))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from hoptune.tasks.monitor import diagnose, render

    report = diagnose(_settings())
    print(json.dumps(report) if args.json else render(report))
    return 0 if report["ok"] else 1


COMMANDS = {
    "ingest": cmd_ingest,
    "worker": cmd_worker,
    "metrics": cmd_metrics,
    "up": cmd_up,
    "demo": cmd_demo,
    "tune": cmd_tune,
    "status": cmd_status,
    "sweep": cmd_sweep,
    "gc": cmd_gc,
    "nightly": cmd_nightly,
    "beat": cmd_beat,
    "models": cmd_models,
    "export": cmd_export,
    "predict": cmd_predict,
    "report": cmd_report,
    "flower": run_flower,
    "doctor": cmd_doctor,
    "plan": cmd_plan,
    "db": run_db,
}

def run() -> None:
    """The ``hoptune`` command: ``main``, then the process ends at once with its status.

    Everything a command does is done when ``main`` returns: its workers and
    Redis stopped, its rows committed, its output written. Python's teardown
    of the modules a command imports (Celery, SQLAlchemy, pandas, torch) then
    only frees memory the process is about to give back, and took 0.24 s
    after a study's last line on a 2-core host (0.46 s with torch imported),
    the command's user waiting. So the output and the log are flushed and the
    process exits without it.
    """
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more reaches it
            pass
    logging.shutdown()
    os._exit(status)

