"""Model hopping against task parallelism and one process, side by side in one run.

The same region data, the same trial configurations (fixed, so no pruning
changes the work), the same 2 real workers, three ways:

- hoptune: the data in 2 shards, one per worker; each trial hops between them;
- task parallelism through the same Celery cluster: the same data as one
  shard that both workers hold a full copy of (replicas of one queue), so each
  hop of a trial is a whole epoch on one worker;
- one process training the trials one after another, each in the visit order
  hoptune recorded for it (``replay_trial``): its final weights must be
  bitwise those hoptune's hops produced.

For each: wall time per epoch of the cohort (first trial started to last
trial finished, over the epochs), each worker's busy share (its recorded hop
time over that span), bytes of data the workers hold, bytes of checkpoints
moved between store and workers (at most: the hops that found their input in
their worker's memory read nothing), and each trial's final validation metric.

Usage: python bench/mop.py [--trials 4] [--epochs 3] [--hop-seconds 0.5]
Writes its section of BENCHMARKS.md; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hoptune.tuner import HopRecords

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import command, load_average, machine, write_section  # noqa: E402
from bench.hop_overhead import N_ITEMS, N_USERS, _calibrate  # noqa: E402

CONFIG = """
[defaults]
epochs = {epochs}
batch_size = 1024
seed = 0
validation_fraction = 0.05
optimizer = "fused_adamw"
[defaults.params]
embedding_dim = 32
lr = 0.005
reg = 1e-5
[regions.hop]
shards = 2
{region}
[regions.task]
shards = 1
{region}
"""
REGION = """data = "{data}"
family = "rating_mf"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]"""

#: The trial configurations, cycled: learning rates and embedding sizes a tuner would try.
CONFIGS = [{"lr": 0.005, "embedding_dim": 32}, {"lr": 0.01, "embedding_dim": 16},
           {"lr": 0.002, "embedding_dim": 32}, {"lr": 0.02, "embedding_dim": 8}]



def _way(rt, region, manifest, configs, app) -> dict:  # noqa: ANN001 - bench glue
    from hoptune.tasks.cli import follow, start_studies
    from hoptune.tasks.study import create_study

    study = create_study(rt, region, manifest=manifest, configs=configs,
                         parallel=len(configs))
    start_studies(app, [study])
    follow(rt, app, [study], progress=False, timeout=3600)
    trials = rt.db.trials(study)
    hops = HopRecords(rt.db).all(study_id=study)
    begin = min(t.started_at for t in trials)
    end = max(t.finished_at for t in trials)
    span = (end - begin).total_seconds()
    busy: dict[str, float] = {}
    for h in hops:
        busy[h.worker] = busy.get(h.worker, 0.0) + (
            h.finished_at - h.started_at).total_seconds()
    return {"study": study, "trials": trials, "hops": len(hops), "span_s": span,
            "epoch_s": span / region.epochs,
            "busy": {w: round(b / span, 4) for w, b in sorted(busy.items())},
            "metrics": [t.last_metric for t in trials]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hop-seconds", type=float, default=0.5)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="htmop-"))
    os.environ["HOPTUNE_HOME"] = str(home)
    os.environ["HOPTUNE_TORCH_THREADS"] = "1"
    for key in ("HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL", "HOPTUNE_BROKER_URL"):
        os.environ.pop(key, None)
    out: dict = {}
    try:
        out = _measure(home, args)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    _report(out)
    print(json.dumps(out))
    return 0


def _measure(home: Path, args: argparse.Namespace) -> dict:
    """The three ways on one region's data in ``home``: the figures ``_report`` writes."""
    from hoptune.core import Settings, Store
    from hoptune.regions import ingest, load_config
    from hoptune.tasks.worker import Runtime

    configs = [CONFIGS[i % len(CONFIGS)] for i in range(args.trials)]
    rows_per_shard, parameters = _calibrate(home / "cal", args.hop_seconds)
    config = load_config(_write_config(home, args.epochs, rows_per_shard))
    settings = Settings.from_env()
    store = Store(settings.store_url)
    hop_region, task_region = config.region("hop"), config.region("task")
    manifests = {r.name: ingest(r, store).manifest for r in (hop_region, task_region)}
    rt = Runtime(settings, worker="bench")
    load_before = load_average()
    hop, task = _on_the_cluster(rt, settings, (hop_region, task_region), manifests, configs)
    serial, equal = _one_process(rt, store, hop, args.epochs, hop_region.shards)
    stored, files, moved = _bytes(store, manifests, hop, task, args, hop_region.shards)
    return {
        "epoch_time_ratio": round(hop["epoch_s"] / task["epoch_s"], 4),
        "storage_ratio": round(stored["hop"] / stored["task"], 4),
        "min_worker_busy": min(hop["busy"].values()),
        "bitwise_equal": bool(equal),
        "epoch_s": {"hop": round(hop["epoch_s"], 3), "task": round(task["epoch_s"], 3),
                    "serial": round(serial, 3)},
        "busy": {"hop": hop["busy"], "task": task["busy"]},
        "stored_bytes": stored, "stored_file_bytes": files, "moved_bytes_at_most": moved,
        "metrics": {"hop": hop["metrics"], "task": task["metrics"]},
        "trials": args.trials, "epochs": args.epochs, "rows_per_shard": rows_per_shard,
        "parameters": parameters, "hops": {"hop": hop["hops"], "task": task["hops"]},
        "load_before": load_before, "load_after": load_average(),
    }


def _write_config(home: Path, epochs: int, rows_per_shard: int) -> Path:
    """The region's ratings and the configuration of its two ways; the configuration's path."""
    from hoptune.regions import write_ratings

    data = home / "data" / "mop.csv"
    data.parent.mkdir(parents=True)
    write_ratings(data, n_users=N_USERS, n_items=N_ITEMS,
                  n_rows=int(rows_per_shard * 2 / 0.95), rank=8, noise=0.3, seed=1)
    config_path = home / "hoptune.toml"
    config_path.write_text(CONFIG.format(epochs=epochs, region=REGION.format(data=data)))
    return config_path


def _on_the_cluster(rt, settings, regions, manifests: dict, configs: list[dict]  # noqa: ANN001
                    ) -> tuple[dict, dict]:
    """hoptune's way and task parallelism, one after the other, on the same 2 workers."""
    from hoptune.tasks import app
    from hoptune.tasks.cli import LocalCluster
    from hoptune.tasks.worker import EmbeddedRedis

    hop_region, task_region = regions
    broker = EmbeddedRedis(settings.home).start()
    # the same two workers serve both ways: one shard of "hop" each, and each a full
    # copy of "task" (a replica of its only queue)
    cluster = LocalCluster({}, 2, log_dir=settings.home / "logs")
    cluster.assignment = [[("hop", 0), ("task", 0)], [("hop", 1), ("task", 0)]]
    try:
        cluster.start()
        cluster.wait_ready(app)
        hop = _way(rt, hop_region, manifests["hop"], configs, app)
        task = _way(rt, task_region, manifests["task"], configs, app)
    finally:
        cluster.stop()
        broker.stop()
    return hop, task


def _one_process(rt, store, hop: dict, epochs: int, shards: int  # noqa: ANN001
                 ) -> tuple[float, bool]:
    """One process, one trial after another, in hoptune's recorded visit orders: its seconds
    per epoch, and whether every trial's final weights are bitwise hoptune's."""
    import torch

    from hoptune.tasks.hop import replay_trial
    from hoptune.tasks.worker import checkpoint_key, load_checkpoint

    torch.set_num_threads(1)
    started = time.monotonic()
    equal = True
    for trial in hop["trials"]:
        replayed = replay_trial(rt, trial.id)
        final = load_checkpoint(store, checkpoint_key(
            hop["study"], trial.id, epochs - 1, shards - 1)).model
        equal &= replayed.keys() == final.keys() and all(
            torch.equal(replayed[k], final[k]) for k in final)
    return (time.monotonic() - started) / epochs, equal


def _bytes(store, manifests: dict, hop: dict, task: dict, args: argparse.Namespace,  # noqa: ANN001
           shards: int) -> tuple[dict, dict, dict]:
    """Bytes of data the workers hold (the shards' tensors, as loaded on their devices), of
    the store's files, and moved between store and workers (at most), by way."""
    from hoptune.regions import load_shard
    from hoptune.tasks.worker import checkpoint_key

    shard_bytes = [sum(t.nbytes for t in load_shard(store, manifests["hop"], k).values())
                   for k in range(shards)]
    full_bytes = sum(t.nbytes for t in load_shard(store, manifests["task"], 0).values())
    files = {"hop": sum(store.fs.size(store.path(k))
                        for k in manifests["hop"]["files"]["shards"]),
             "task": 2 * store.fs.size(store.path(manifests["task"]["files"]["shards"][0]))}
    checkpoint_bytes = store.fs.size(store.path(checkpoint_key(
        hop["study"], hop["trials"][0].id, args.epochs - 1, shards - 1)))
    stored = {"hop": sum(shard_bytes), "task": 2 * full_bytes}
    moved = {
        "hop": sum(shard_bytes) + checkpoint_bytes * (2 * hop["hops"] - args.trials),
        "task": 2 * full_bytes + checkpoint_bytes * (2 * task["hops"] - args.trials)}
    return stored, files, moved


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def _report(f: dict) -> None:
    e, b = f["epoch_s"], f["busy"]
    busy = {way: ", ".join(f"{v:.1%}" for v in b[way].values()) for way in b}
    stored, moved, files = f["stored_bytes"], f["moved_bytes_at_most"], f["stored_file_bytes"]
    metrics = "\n".join(
        f"| {i} | {h:.4f} | {t:.4f} |"
        for i, (h, t) in enumerate(zip(f["metrics"]["hop"], f["metrics"]["task"], strict=True)))
    write_section("mop", f"""
## Model hopping against task parallelism (`bench/mop.py`)

Machine: {machine()}. Command: `{command()}`.
Load average (1, 5, 15 min) before / after: {f['load_before']} / {f['load_after']}.
{f['trials']} trials with fixed configurations (no pruning), {f['epochs']} epochs, the rating
model ({f['parameters']:,} parameters at the largest size), {f['rows_per_shard']:,} rows per
hoptune shard; the same 2 real `hoptune worker` processes on the embedded Redis serve every
way, one after the other. Task parallelism: the same data as one shard that both workers
hold in full, each trial's hop a whole epoch on one worker.

| | hoptune | task parallelism | one process, one trial after another |
| --- | ---: | ---: | ---: |
| wall time per epoch of the cohort (s) | {e['hop']:.3f} | {e['task']:.3f} | {e['serial']:.3f} |
| busy share of each worker | {busy['hop']} | {busy['task']} | 100% (one process) |
| bytes of data the workers hold (tensors) | {stored['hop']:,} | {stored['task']:,} | |
| the same as the store's Parquet files | {files['hop']:,} | {files['task']:,} | |
| bytes moved store <-> workers (at most) | {moved['hop']:,} | {moved['task']:,} | |
| hops | {f['hops']['hop']} | {f['hops']['task']} | |

Ratios hoptune / task parallelism: wall time per epoch **{f['epoch_time_ratio']:.3f}**
(target at most 1.10: {_verdict(f['epoch_time_ratio'] <= 1.10)}); data held
**{f['storage_ratio']:.3f}** (target at most 1/2: {_verdict(f['storage_ratio'] <= 0.5)});
least busy hoptune worker **{f['min_worker_busy']:.1%}** (target at least 90%:
{_verdict(f['min_worker_busy'] >= 0.9)}). Final weights of every trial bitwise equal to one
process training it in its recorded visit order: **{f['bitwise_equal']}**.

| trial | final validation RMSE, hoptune | task parallelism |
| --- | ---: | ---: |
{metrics}
""")


if __name__ == "__main__":
    sys.exit(main())
