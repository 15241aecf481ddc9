"""How much of a hop is not training: dispatch, checkpoint load and save, recording.

One trial of a ~1M-parameter rating model hops between 2 real workers (one
shard each) with nothing else running; the data is sized so one hop trains
for about each of ``--hop-seconds`` (a short and a long hop). Each size runs
side by side in one go, with this checkout's code ("after") and with the code
of ``--before REV`` (extracted with ``git archive`` and put first on the import
path of the measuring process and its workers), ``--rounds`` times each,
alternating (before, after, before, after), so a drift of the machine's load
weighs on both sides alike. From the recorded hops of each side's rounds it
takes the median of each part outside training:

- dispatch: from the moment a hop is recorded finished (and hands on) to the
  moment the next hop starts on the other worker (message, broker, pickup);
- load: rebuilding the model and optimizer and loading the previous checkpoint;
- save: writing the hop's checkpoint to the store;
- record: the study-database bookkeeping of the hop.

With ``--store URL`` (``s3://BUCKET/PREFIX``; credentials and endpoint from the
standard AWS variables) each size also runs this checkout's code with the store
there, beside the local folder ("after"), in a fresh prefix of its own: what
the object store costs a hop.

Usage: python bench/hop_overhead.py [--epochs 10] [--hop-seconds 0.04,1.0] [--rounds 4]
       [--before REV]
       [--store s3://BUCKET/PREFIX]
Writes its section of BENCHMARKS.md; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from hoptune.tuner import HopRecords, HopRow

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: a --before tree put there wins for hoptune

from bench._report import command, load_average, machine, write_section  # noqa: E402

N_USERS, N_ITEMS, DIM = 20_000, 10_000, 32  # (20k + 10k) x (32 + 1) + 1 ~ 0.99M parameters
PACKAGES = ("core", "kernels", "regions", "tuner", "tasks")

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


def _calibrate(home: Path, hop_seconds: float, epochs: int, device: str = "cpu",
               rows: int = 100_000) -> tuple[int, int]:
    """Rows per shard that make a hop of an ``epochs``-epoch run train for about
    ``hop_seconds`` on average on ``device`` (on a CPU, one torch thread, as a worker),
    measured on ``rows`` rows; and the model size.

    A pass gets faster as the trial trains (a fifth of a second in three on the
    rating model), so the rate is the mean over as many passes as the run makes
    (two shards an epoch; at most 20), not the fastest of the first few.
    """
    import torch

    from hoptune.core import Store
    from hoptune.regions import ingest, load_config, load_shard
    from hoptune.tasks.hop import build_trial_model, make_trial_optimizer, train_pass

    on = torch.device(device)
    if on.type == "cpu":
        torch.set_num_threads(1)
    region = load_config(_write(home, rows, 1)).region("bench")
    store = Store(str(home / "calibration"))
    manifest = ingest(region, store).manifest
    params = dict(region.params)
    model = build_trial_model(region, params, 0, manifest["meta"], on)
    optimizer = make_trial_optimizer(region, params, model)
    shard = {k: v.to(on) for k, v in load_shard(store, manifest, 0).items()}
    passes = [train_pass(region, model, optimizer, shard, seed=0, epoch=e, shard=0,
                         position=0, params=params) for e in range(min(2 * epochs, 20))]
    rate = sum(p.samples for p in passes) / sum(p.seconds for p in passes)
    shutil.rmtree(home / "calibration")
    size = sum(p.numel() for p in model.parameters())
    return int(rate * hop_seconds), size


def _measure(rows_per_shard: int, epochs: int, store: str | None = None) -> dict:
    """One trial hopping on 2 local workers with whatever ``hoptune`` imports here; the
    store in the home's folder, or at ``store``."""
    home = Path(tempfile.mkdtemp(prefix="htbench-"))
    os.environ["HOPTUNE_HOME"] = str(home)
    os.environ["HOPTUNE_TORCH_THREADS"] = "1"
    for key in ("HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL"):
        os.environ.pop(key, None)
    if store is not None:
        os.environ["HOPTUNE_STORE_URL"] = store
    from hoptune.core import Settings, Store
    from hoptune.regions import ingest, load_config
    from hoptune.tasks import app
    from hoptune.tasks.cli import follow, local_cluster, start_studies
    from hoptune.tasks.study import create_study  # where it was at --before too
    from hoptune.tasks.worker import Runtime

    try:
        config = load_config(_write(home, int(rows_per_shard * 2 / 0.95), epochs))
        region = config.region("bench")
        settings = Settings.from_env()
        manifest = ingest(region, Store(settings.store_url)).manifest
        rt = Runtime(settings, worker="bench")
        with local_cluster(settings, {"bench": 2}, 2):
            study = create_study(rt, region, manifest=manifest, configs=[dict(region.params)])
            started = time.monotonic()
            start_studies(app, [study])
            follow(rt, app, [study], progress=False, timeout=1800)
            wall = time.monotonic() - started
        hops = HopRecords(rt.db).all(study_id=study)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {"parts": _parts(hops), "wall_seconds": round(wall, 2)}


def _before_tree(rev: str) -> Path:
    """The package tree of revision ``rev``, laid out as ``hoptune.*`` for PYTHONPATH."""
    tree = Path(tempfile.mkdtemp(prefix="htbefore-"))
    src, pkg = tree / "src", tree / "pkg"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    shutil.copytree(src / "hoptune", pkg / "hoptune")
    for name in PACKAGES:
        (pkg / "hoptune" / name).symlink_to(src / name, target_is_directory=True)
    return tree



def _run(rows: int, epochs: int, tree: Path | None, store: str | None = None) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree / "pkg")
    where = ["--measure-store", f"{store.rstrip('/')}/hop-overhead-{uuid.uuid4().hex[:8]}"
             ] if store else []  # a prefix of its own: study ids restart in each run
    out = subprocess.run([sys.executable, "-P", __file__, "--measure", str(rows),
                          "--epochs", str(epochs), *where], env=env, check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 10 epochs: 10 hand-ons within an epoch for a long hop's dispatch median, 40 for a short
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--hop-seconds", default="0.04,1.0")
    # 4: on a shared 2-core machine the training rate of one run moved by half from the next
    # (0.69 s to 1.29 s for the same hop), and each part outside training with it
    parser.add_argument("--rounds", type=int, default=4,
                        help="runs of each side, alternating (default 4: before, after, before, "
                             "after, ...)")
    # the revision before shards = "auto" and the S3 store; an older one must read hops through
    # HopRecords as the measuring code does; "" measures this checkout alone
    parser.add_argument("--before", default="0017259")
    parser.add_argument("--store", default=None, metavar="URL",
                        help="also run with the store at URL (s3://BUCKET/PREFIX), side by side")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--measure-store", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure, args.epochs, args.measure_store)))
        return 0

    tree = _before_tree(args.before) if args.before else None
    results: dict = {"before": args.before, "store": args.store, "sizes": []}
    try:
        for seconds in (float(x) for x in args.hop_seconds.split(",")):
            # a short hop needs more of them for a steady median
            epochs = args.epochs if seconds >= 0.5 else args.epochs * 4
            home = Path(tempfile.mkdtemp(prefix="htcal-"))
            try:
                rows, parameters = _calibrate(home, seconds, epochs)
            finally:
                shutil.rmtree(home, ignore_errors=True)
            entry = {"hop_seconds": seconds, "rows_per_shard": rows, "parameters": parameters,
                     "rounds": args.rounds, "load_before": load_average()}
            # the sides alternate, round after round (before, after, before, after, ...), so
            # a drift of the machine's load weighs on both alike; each side's hops are pooled
            runs: dict[str, list[dict]] = {}
            for _ in range(args.rounds):
                if tree is not None:
                    runs.setdefault("before", []).append(_run(rows, epochs, tree))
                runs.setdefault("after", []).append(_run(rows, epochs, None))
                if args.store:
                    runs.setdefault("store", []).append(_run(rows, epochs, None, args.store))
            entry.update({side: _figures(side_runs) for side, side_runs in runs.items()})
            entry["load_after"] = load_average()
            results["sizes"].append(entry)
    finally:
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)
    _report(results)
    summary = {f"{'short' if e['hop_seconds'] < 0.5 else 'long'}_{side}_{k}": e[side][k]
               for e in results["sizes"] for side in ("before", "after", "store") if side in e
               for k in ("overhead_s", "overhead_share")}
    print(json.dumps({**summary, "results": results}))
    return 0


def _parts(hops: list[HopRow]) -> dict[str, list[float]]:
    """Each part of each hop, in seconds (dispatch: each hand-on within an epoch)."""
    by_key = {(h.epoch, h.position): h for h in hops}
    parts: dict[str, list[float]] = {k: [] for k in ("dispatch_s", "load_s", "train_s",
                                                     "save_s", "record_s")}
    for h in hops:
        total = (h.finished_at - h.started_at).total_seconds()
        parts["train_s"].append(h.train_seconds)
        parts["load_s"].append(h.load_seconds)
        parts["save_s"].append(h.save_seconds)
        parts["record_s"].append(total - h.train_seconds - h.load_seconds - h.save_seconds)
        before = by_key.get((h.epoch, h.position - 1))
        if before is not None:  # a hand-on within an epoch (not after a validation)
            parts["dispatch_s"].append((h.started_at - before.finished_at).total_seconds())
    return parts


def _figures(runs: list[dict]) -> dict:
    """Medians of each part of a hop over the hops of ``runs`` (one side's rounds), in
    seconds, and the share outside training."""
    pooled = {k: [x for r in runs for x in r["parts"][k]] for k in runs[0]["parts"]}
    med = {name: statistics.median(values) for name, values in pooled.items()}
    overhead = med["dispatch_s"] + med["load_s"] + med["save_s"] + med["record_s"]
    hop = overhead + med["train_s"]
    out = {k: round(v, 4) for k, v in med.items()}
    out.update(overhead_s=round(overhead, 4), hop_s=round(hop, 4),
               overhead_share=round(overhead / hop, 4), hops=len(pooled["train_s"]),
               wall_seconds=[r["wall_seconds"] for r in runs])
    return out


_PARTS = [("dispatch_s", "dispatch (hand-on to start on the next worker)"),
          ("load_s", "checkpoint load (model + optimizer rebuilt, previous checkpoint read)"),
          ("save_s", "checkpoint save"),
          ("record_s", "recording (study database)"),
          ("overhead_s", "**outside training, total**"),
          ("train_s", "training")]


def _side(side: str, results: dict) -> str:
    """A column's name: before, after (the store in a local folder), or the store's URL."""
    return f"after, store {results['store']}" if side == "store" else side


def _report(results: dict) -> None:
    sections = []
    for e in results["sizes"]:
        sides = [s for s in ("before", "after", "store") if s in e]
        head = " | ".join(f"{_side(s, results)} (s)" for s in sides)
        rows = "\n".join(f"| {label} | " + " | ".join(f"{e[s][k]:.4f}" for s in sides) + " |"
                         for k, label in _PARTS)
        share = ", ".join(f"{_side(s, results)} **{e[s]['overhead_share']:.1%}** "
                          f"({e[s]['hops']} hops)"
                          for s in sides)
        ratio = (f" Outside training, after against before: "
                 f"**{e['after']['overhead_s'] / e['before']['overhead_s']:.3f}x**."
                 if "before" in e else "")
        sections.append(f"""
### A ~{e['hop_seconds']:g} s hop ({e['rows_per_shard']:,} rows per shard)

Load average (1, 5, 15 min) before / after the pair: {e['load_before']} / {e['load_after']}.

| part of a hop (median) | {head} |
| --- |{' ---: |' * len(sides)}
{rows}

Share of a hop outside training: {share}.{ratio}
""")
    parameters = results["sizes"][0]["parameters"] if results["sizes"] else 0
    rounds = results["sizes"][0]["rounds"] if results["sizes"] else 0
    # a run with --store is its own section: the headline section stays the bench as shipped
    name, title = (("hop_overhead_store", "Hop overhead, the store on S3 against a folder")
                   if results["store"] else ("hop_overhead", "Hop overhead"))
    before = (f'"before" is revision `{results["before"]}` run side by side in the same '
              "invocation; " if results["before"] else "")
    store = ("" if not results["store"] else
             f" The third column runs this checkout with the store at `{results['store']}`, "
             "in a fresh prefix, through s3fs (an S3 API served where the standard AWS "
             "variables point: moto's server mode on this machine, so no network between "
             "the workers and the store; a bucket elsewhere adds its round trips).")
    write_section(name, f"""
## {title} (`bench/hop_overhead.py`)

Machine: {machine()}. Command: `{command()}`.
One trial of the rating model ({parameters:,} parameters, `fused_adamw`, which runs its
torch reference path on a CPU) hopping between 2 real workers (one shard each) on the
embedded Redis, SQLite study database and store folder; each side run {rounds} times,
alternating with the other; medians over the hops of its runs (dispatch over the hand-ons
within an epoch). {before}"after" is this checkout (a hop's checkpoint
laid out flat, a header and each tensor's raw bytes, instead of `torch.save`'s archive, and
loaded as views of the bytes read instead of copies; checksummed with XXH3-128 instead of
SHA-256 and torch's per-record CRC-32; laid out, checksummed and written behind its
hand-on, an epoch's last hop's too, by the worker's writer thread at nice 10, a MiB per
write call; the model rebuilt on the meta device without its values drawn, and not at
all where the worker trained the trial's last hop (that hop's model and optimizer train
on); the training process keeping the memory it
frees instead of faulting the next hop's buffers in afresh; the hop's checks of its message
read in one transaction that takes no write lock; the study database's statements on a
hop's path built once, run with their values; its progress event sent after the next
hop's message). A hop's rows are calibrated on the mean rate of the passes the run makes.
With
one trial on two single-shard workers a hop within an epoch always lands on the other
worker; the memory and the trained model pay at the epoch's first hop, placed back on the
worker that ran the last one.{store}
{''.join(sections)}""")


if __name__ == "__main__":
    sys.exit(main())
