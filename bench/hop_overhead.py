"""How much of a hop is not training: dispatch, checkpoint load and save, recording.

One trial of a ~1M-parameter rating model hops between 2 real workers (one
shard each) with nothing else running; the data is sized so one hop trains
for about ``--hop-seconds``. From the recorded hops it takes the median of
each part outside training:

- dispatch: from the moment a hop is recorded finished (and hands on) to the
  moment the next hop starts on the other worker (message, broker, pickup);
- load: rebuilding the model and optimizer and loading the previous checkpoint;
- save: writing the hop's checkpoint to the store;
- record: the study-database bookkeeping of the hop.

Usage: python bench/hop_overhead.py [--epochs 5] [--hop-seconds 1.0]
Writes its section of BENCHMARKS.md; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import command, machine, write_section  # noqa: E402

N_USERS, N_ITEMS, DIM = 20_000, 10_000, 32  # (20k + 10k) x (32 + 1) + 1 ~ 0.99M parameters

CONFIG = """
[defaults]
shards = 2
epochs = {epochs}
batch_size = 1024
seed = 0
validation_fraction = 0.05
optimizer = "fused_adamw"
[defaults.params]
embedding_dim = {dim}
lr = 0.005
reg = 1e-5
[regions.bench]
data = "{data}"
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]
"""


def _write(home: Path, rows: int, epochs: int) -> Path:
    from hoptune.regions import write_ratings

    data = home / "data" / "bench.csv"
    data.parent.mkdir(parents=True, exist_ok=True)
    write_ratings(data, n_users=N_USERS, n_items=N_ITEMS, n_rows=rows, rank=8, noise=0.3, seed=1)
    config = home / "hoptune.toml"
    config.write_text(CONFIG.format(epochs=epochs, dim=DIM, data=data))
    return config


def _calibrate(home: Path, hop_seconds: float) -> tuple[int, int]:
    """Rows per shard that make one hop train for about ``hop_seconds``; and the model size."""
    import torch

    from hoptune.core import Store
    from hoptune.regions import ingest, load_config, load_shard
    from hoptune.tasks._training import build_trial_model, make_trial_optimizer, train_pass

    torch.set_num_threads(1)
    region = load_config(_write(home, 100_000, 1)).region("bench")
    store = Store(str(home / "calibration"))
    manifest = ingest(region, store).manifest
    params = dict(region.params)
    model = build_trial_model(region, params, 0, manifest["meta"])
    optimizer = make_trial_optimizer(region, params, model)
    shard = load_shard(store, manifest, 0)
    train_pass(region, model, optimizer, shard, seed=0, epoch=0, shard=0, position=0,
               params=params)  # warm-up
    # the fastest of three passes: the machine is shared, a slow pass measures the neighbours
    rate = max(p.samples / p.seconds for p in
               (train_pass(region, model, optimizer, shard, seed=0, epoch=e, shard=0, position=0,
                           params=params)
                for e in range(1, 4)))
    shutil.rmtree(home / "calibration")
    size = sum(p.numel() for p in model.parameters())
    return int(rate * hop_seconds), size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--hop-seconds", type=float, default=1.0)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="htbench-"))
    os.environ["HOPTUNE_HOME"] = str(home)
    os.environ["HOPTUNE_TORCH_THREADS"] = "1"
    for key in ("HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL"):
        os.environ.pop(key, None)
    from hoptune.core import Settings, Store
    from hoptune.regions import ingest, load_config
    from hoptune.tasks._cluster import local_cluster
    from hoptune.tasks._driver import follow, start_studies
    from hoptune.tasks._runtime import Runtime
    from hoptune.tasks._workflow import create_study

    try:
        rows_per_shard, parameters = _calibrate(home, args.hop_seconds)
        total_rows = int(rows_per_shard * 2 / 0.95)
        config = load_config(_write(home, total_rows, args.epochs))
        region = config.region("bench")
        settings = Settings.from_env()
        manifest = ingest(region, Store(settings.store_url)).manifest
        from hoptune.tasks._app import app

        rt = Runtime(settings, worker="bench")
        with local_cluster(settings, {"bench": 2}, 2):
            study = create_study(rt, region, manifest=manifest, configs=[dict(region.params)])
            started = time.monotonic()
            start_studies(app, [study])
            follow(rt, app, [study], progress=False, timeout=1800)
            wall = time.monotonic() - started
        hops = rt.db.hops(study_id=study)
        figures = _figures(hops)
    finally:
        shutil.rmtree(home, ignore_errors=True)

    figures.update(parameters=parameters, rows_per_shard=rows_per_shard,
                   hops=len(hops), wall_seconds=round(wall, 2))
    _report(figures)
    print(json.dumps(figures))
    return 0


def _figures(hops: list[dict]) -> dict:
    """Medians of each part of a hop, in seconds, and the share outside training."""
    by_key = {(h["epoch"], h["position"]): h for h in hops}
    dispatch, load, train, save, record, inside = [], [], [], [], [], []
    for h in hops:
        total = (h["finished_at"] - h["started_at"]).total_seconds()
        inside.append(total)
        train.append(h["train_seconds"])
        load.append(h["load_seconds"])
        save.append(h["save_seconds"])
        record.append(total - h["train_seconds"] - h["load_seconds"] - h["save_seconds"])
        before = by_key.get((h["epoch"], h["position"] - 1))
        if before is not None:  # a hand-on within an epoch (not after a validation)
            dispatch.append((h["started_at"] - before["finished_at"]).total_seconds())
    med = {name: statistics.median(values) for name, values in
           [("dispatch_s", dispatch), ("load_s", load), ("train_s", train), ("save_s", save),
            ("record_s", record)]}
    overhead = med["dispatch_s"] + med["load_s"] + med["save_s"] + med["record_s"]
    hop = overhead + med["train_s"]
    out = {k: round(v, 4) for k, v in med.items()}
    out.update(overhead_s=round(overhead, 4), hop_s=round(hop, 4),
               overhead_share=round(overhead / hop, 4))
    return out


def _report(f: dict) -> None:
    verdict = "meets" if f["overhead_share"] <= 0.05 else "misses"
    write_section("hop_overhead", f"""
## Hop overhead (`bench/hop_overhead.py`)

Machine: {machine()}. Command: `{command()}`.
One trial of the rating model ({f['parameters']:,} parameters, `fused_adamw`, which runs its
torch reference path on a CPU) hopping between
2 real workers on the embedded Redis, SQLite study database and store folder,
{f['rows_per_shard']:,} rows per shard, {f['hops']} hops; medians over the hops
(dispatch over the hand-ons within an epoch).

| part of a hop | median seconds |
| --- | --- |
| dispatch (hand-on to start on the next worker) | {f['dispatch_s']:.4f} |
| checkpoint load (model + optimizer rebuilt, previous checkpoint read) | {f['load_s']:.4f} |
| checkpoint save | {f['save_s']:.4f} |
| recording (study database) | {f['record_s']:.4f} |
| **outside training, total** | **{f['overhead_s']:.4f}** |
| training | {f['train_s']:.4f} |

Overhead share of a hop: **{f['overhead_share']:.1%}** (target at most 5%: {verdict}).
""")


if __name__ == "__main__":
    sys.exit(main())
