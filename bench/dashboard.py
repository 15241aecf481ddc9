"""The dashboard's request times on a 300-region night's study database.

A fresh HOPTUNE_HOME gets a configuration of 300 regions and a study database
written through hoptune's own record-writing functions (``StudyDB``,
``HopRecords``, ``WorkerRecords``, ``NightlyRecords``, the registry's
``write_version``), as the workers would leave it in the middle of a night:
each region's study of 8 trials over 3 epochs of 2 shards, pruned at the rungs
by the pruner's own rule, most regions done and promoted (two champion
versions each), the last ``--running`` regions still running with hops in
flight, 16 worker processes with live heartbeats, and the embedded Redis the
dashboard reads queue depths from. Then the real ``hoptune dashboard`` serves
it, and each endpoint is requested ``--requests`` times in turn (after one
request each to warm up): median and max of each.

The target: every request well under a second.

Usage: python bench/dashboard.py [--regions 300] [--requests 10]
Writes its section of BENCHMARKS.md; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import command, load_average, machine, write_section  # noqa: E402

TARGET = 1.0  # seconds
DEADLINE = "6h"
TRIALS, EPOCHS, SHARDS, WORKERS = 8, 3, 2, 16
HEADER = f"""
[defaults]
shards = {SHARDS}
epochs = {EPOCHS}
batch_size = 256
seed = 5
validation_fraction = 0.2
trials = {TRIALS}
parallel = 4
[defaults.params]
embedding_dim = 8
lr = 0.02
[defaults.space]
lr = {{ type = "real", low = 0.001, high = 0.3, prior = "log" }}
embedding_dim = {{ type = "int", low = 4, high = 32 }}
[defaults.pruner]
reduction_factor = 2
min_epochs = 1
"""
REGION = """
[regions.{name}]
data = "data/{name}.csv"
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]
"""


def _name(i: int) -> str:
    return f"r{i:03d}"


def build(home: Path, regions: int, running: int) -> dict[str, float]:
    """Write the night's configuration, study database and registry; seconds each took."""
    import torch

    from hoptune.core import Settings, Store
    from hoptune.regions import ingest, load_config, write_ratings
    from hoptune.tuner import (
        AshaPruner,
        HopRecords,
        NightlyRecords,
        StudyDB,
        WorkerRecords,
        best_trial,
        parse_space,
        set_champion,
        utcnow,
        write_version,
    )

    started = time.perf_counter()
    (home / "hoptune.toml").write_text(HEADER + "".join(REGION.format(name=_name(i))
                                                        for i in range(regions)))
    settings = Settings.from_env()
    config = load_config(home / "hoptune.toml")
    db, store = StudyDB(settings.database_url), Store(settings.store_url)
    # one region's data, ingested: its manifest (rows, model shape) stands for every region's
    write_ratings(home / "data" / f"{_name(0)}.csv", n_users=200, n_items=100, n_rows=4000,
                  rank=3, noise=0.3, seed=1)
    manifest = ingest(config.region(_name(0)), store).manifest
    hops, nightly, records = HopRecords(db), NightlyRecords(db), WorkerRecords(db)
    names = [_name(i) for i in range(regions)]
    workers = []
    for w in range(WORKERS):
        holder = f"worker{w}@bench/{w}/{1000 + w}"
        owned = [[r, k] for i, r in enumerate(names) for k in range(SHARDS)
                 if (i * SHARDS + k) % WORKERS == w]
        records.register(holder, name=f"worker{w}@bench", host="bench", pid=1000 + w,
                         shards=owned, info={"device": "cpu", "host_class": "bench",
                                             "warm": True})
        workers.append((f"worker{w}@bench", holder))
    run = nightly.start_run("bench", socket.gethostname())
    pruner = AshaPruner(reduction_factor=2, min_epochs=1, max_epochs=EPOCHS)
    rng = random.Random(7)
    alive = utcnow() - timedelta(days=1)
    for i, name in enumerate(names):
        region = config.region(name)
        space = parse_space(region.space, f"regions.{name}.space")
        study = db.create_study(region=name, budget=TRIALS, parallel=region.parallel,
                                epochs=EPOCHS, seed=region.seed, space=space.to_json(),
                                region_config=region.model_dump(mode="json"),
                                manifest=manifest, data_hash=manifest["hash"],
                                nightly_run_id=run, minimize=True)
        nightly.add_region(run, name, "running", study_id=study, ingested=True)
        still = i >= regions - running
        trials = db.create_trials(study, [({"lr": 10 ** rng.uniform(-3, -0.5),
                                            "embedding_dim": rng.randint(4, 32)}, 100 + t)
                                           for t in range(TRIALS)])
        values: dict[int, list[float]] = {}
        for t, trial in enumerate(trials):
            if still and t >= TRIALS // 2:
                break  # the running regions' later trials are not started yet
            order = [t % SHARDS, (t + 1) % SHARDS]
            db.start_epoch(trial, 0, order)
            quality = rng.uniform(0.9, 1.3)
            history: list[float] = []
            for epoch in range(EPOCHS):
                for position in range(SHARDS):
                    name_w, holder = workers[rng.randrange(WORKERS)]
                    hops.claim(trial, epoch, position, order[position], worker=name_w,
                                       holder=holder, live_after=alive)
                    if still and t == TRIALS // 2 - 1 and epoch == 1 and position == 1:
                        break  # a hop in flight
                    hops.hand_on(trial, epoch, position, region=name, shards=SHARDS,
                                 live_after=alive, samples=2000,
                                 loss=quality - 0.1 * epoch, train_seconds=rng.uniform(0.3, 0.5),
                                 load_seconds=0.02, save_seconds=0.03)
                    order = db.epoch(trial, epoch).visit_order
                else:
                    metric = quality - 0.05 * epoch + rng.uniform(-0.02, 0.02)
                    history.append(metric)
                    values.setdefault(epoch + 1, []).append(metric)
                    last = epoch + 1 >= EPOCHS
                    stop = not last and pruner.should_stop(epoch + 1, history, values)
                    outcome = "done" if last else "pruned" if stop else "continue"
                    order = [(epoch + t) % SHARDS, (epoch + t + 1) % SHARDS]
                    db.end_epoch(trial, epoch, metric, minimize=True, outcome=outcome,
                                 next_order=order if outcome == "continue" else None)
                    if outcome != "continue":
                        break
                    continue
                break
        if not still:
            best = best_trial(db.trials(study), True)
            db.finish_study(study, "done", best_trial_id=best.id if best else None)
            nightly.end_region(run, name, "done", "promoted")
            for v in (1, 2):
                version = f"v{v:04d}"
                metric = (best.best_metric if best else 1.0) + 0.01 * (2 - v)
                card = {"region": name, "version": version, "created_at": utcnow().isoformat(),
                        "family": "rating_mf", "task": "rating", "metric_name": "rmse",
                        "metric": metric, "minimize": True, "study_id": study,
                        "trial_id": best.id if best else None,
                        "trial_number": best.number if best else None, "selected_epoch": EPOCHS,
                        "params": best.params if best else {}, "previous": None if v == 1 else
                        "v0001", "previous_metric": None, "reason": "bench"}
                write_version(store, name, version, {"w": torch.zeros(8)}, card)
                set_champion(store, name, version, card["created_at"])
            db.set_study(study, promotion={"promoted": True, "version": "v0002",
                                           "reason": "bench"})
    for _, holder in workers:
        records.beat(holder)
    db.dispose()
    return {"build_seconds": time.perf_counter() - started}


ENDPOINTS = ["/", "/api/night", "/region/{region}", "/api/region/{region}", "/api/study/{study}",
             "/api/study/{study}/trial/3", "/cluster", "/api/cluster", "/registry",
             "/api/registry", "/static/dashboard.js", "/region/no-such-region"]


def measure(home: Path, requests: int) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Start ``hoptune dashboard`` on ``home``; each endpoint's median and max seconds, and
    when it answered and had its first forecast."""
    env = {**os.environ, "HOPTUNE_HOME": str(home), "HOPTUNE_LIVENESS_SECONDS": "86400",
           "HOPTUNE_NIGHTLY_DEADLINE": DEADLINE}
    for key in ("HOPTUNE_BROKER_URL", "HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL",
                "HOPTUNE_DASHBOARD_USER", "HOPTUNE_DASHBOARD_PASSWORD"):
        env.pop(key, None)
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "hoptune.tasks.cli", "dashboard",
                                "--port", "0"], cwd=home, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        line = process.stdout.readline()
        if "http://" not in line:
            raise SystemExit(f"the dashboard did not start: {line}{process.stdout.read()}")
        base = line.split("http://", 1)[1].split("/", 1)[0]
        startup = time.perf_counter() - started
        while True:  # the forecast is computed in the background, once every 30 s
            running = json.loads(_get(f"http://{base}/api/night")[1])
            if "seconds_to_finish" in running["forecast"] or time.perf_counter() - started > 120:
                break
            time.sleep(0.5)
        forecast = {"startup_seconds": startup,
                    "forecast_seconds": time.perf_counter() - started, **running["forecast"]}
        latest = next(r for r in running["regions"] if r["state"] == "running")
        fill = {"region": latest["region"], "study": latest["study"]}
        times: dict[str, list[float]] = {}
        for round_ in range(requests + 1):
            for endpoint in ENDPOINTS:
                path = endpoint.format(**fill)
                t0 = time.perf_counter()
                status, _ = _get(f"http://{base}{path}")
                seconds = time.perf_counter() - t0
                expected = 404 if "no-such" in path else 200
                if status != expected:
                    process.terminate()
                    raise SystemExit(f"{path} answered {status}, not {expected}:\n"
                                     f"{process.stdout.read()[-3000:]}")
                if round_:  # the first round warms up
                    times.setdefault(endpoint, []).append(seconds)
        return ({e: {"median": statistics.median(v), "max": max(v)} for e, v in times.items()},
                forecast)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _forecast_note(forecast: dict[str, Any], running: int) -> str:
    """What the night page said of the forecast (computed in a thread, every 30 s)."""
    if "seconds_to_finish" not in forecast:
        return (f"It had no forecast of the {running} running studies within "
                f"{forecast['forecast_seconds']:.0f} s; the night page said: "
                f"{forecast['verdict']}.")
    return (f"Its first forecast (the planner's simulation of the {running} running studies, in "
            f"a thread, again every 30 s) came {forecast['forecast_seconds']:.1f} s after it "
            f"was launched: {forecast['verdict']} (`HOPTUNE_NIGHTLY_DEADLINE={DEADLINE}`).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=300)
    parser.add_argument("--running", type=int, default=30,
                        help="of them, the regions whose studies still run")
    parser.add_argument("--requests", type=int, default=10, help="requests per endpoint")
    parser.add_argument("--no-write", action="store_true", help="leave BENCHMARKS.md alone")
    args = parser.parse_args()
    from hoptune.tasks.worker import EmbeddedRedis

    home = Path(tempfile.mkdtemp(prefix="htdash-"))
    os.environ["HOPTUNE_HOME"] = str(home)
    for key in ("HOPTUNE_BROKER_URL", "HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL"):
        os.environ.pop(key, None)
    redis = EmbeddedRedis(home).start()
    load = load_average()
    try:
        built = build(home, args.regions, args.running)
        print(f"built the night's database in {built['build_seconds']:.1f} s", flush=True)
        times, forecast = measure(home, args.requests)
    finally:
        redis.stop()
        shutil.rmtree(home, ignore_errors=True)
    worst = max(t["max"] for t in times.values())
    result = {"regions": args.regions, "running": args.running, "requests": args.requests,
              "startup_seconds": round(forecast["startup_seconds"], 2),
              "forecast": forecast,
              "build_seconds": round(built["build_seconds"], 1),
              "worst_seconds": round(worst, 4), "met": worst < TARGET,
              "endpoints": {e: {k: round(v, 4) for k, v in t.items()} for e, t in times.items()}}
    if not args.no_write:
        rows = "\n".join(f"| `{e}` | {t['median'] * 1000:.1f} | {t['max'] * 1000:.1f} |"
                         for e, t in times.items())
        write_section("dashboard", f"""
## Dashboard request times (`bench/dashboard.py`)

Machine: {machine()}. Command: `{command()}`. Load average before the bench: {load}.

A study database of a {args.regions}-region night, written through hoptune's own record
functions: {TRIALS} trials a region over {EPOCHS} epochs of {SHARDS} shards, pruned at the
rungs, {args.regions - args.running} regions done and promoted (two champion versions each),
{args.running} still running with a hop in flight; {WORKERS} worker processes with live
heartbeats; the embedded Redis. `hoptune dashboard` served it (SQLite, this host); each
endpoint was requested {args.requests} times after one warm-up request (milliseconds).
The dashboard started answering {forecast["startup_seconds"]:.1f} s after it was launched (it reads
what its pages keep first: the finished studies' trials, the last minutes' hops).
{_forecast_note(forecast, args.running)}

| endpoint | median ms | max ms |
| --- | --- | --- |
{rows}

Slowest request: {worst * 1000:.0f} ms against a target of {TARGET * 1000:.0f} ms:
{"met" if worst < TARGET else "missed"}.
""")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
