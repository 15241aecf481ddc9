"""Benchmark of the champion on rows hoptune never saw: before, after, and random search.

For each data set, 10% of the ratings (drawn with a fixed seed) are held out;
the rest is one region's table. Three runs tune it with the same budget
(``--trials`` trials of up to ``--epochs`` epochs, the same space over lr,
embedding_dim and reg, 2 shards, 4 trials at a time), each in its own process
with the study run inline (no Celery, the same workflow functions):

- ``before``: hoptune as of commit ``--before`` (default 928476f), read with
  ``git archive`` into a temporary folder and used from there;
- ``after``: this checkout (``select = "best"``, the pruned-trial rule);
- ``random``: this checkout, the same number of trials drawn at random from
  the space and trained for all epochs (no pruning), ``select = "best"``.

Each run's champion is scored on the held-out rows by this checkout's serving
path (``Predictor``: the champion's own id maps, the rating model's fallback
for ids it never saw), so all three are scored alike; predicting the training
mean is the floor. Data sets: the demo's ``north`` region (synthetic), and
MovieLens 100k when ``--ml100k`` names its ratings (``ml-100k.inter`` as the
``recbole`` wheel ships it, or ``u.data``).

Writes its block of BENCHMARKS.md and prints one JSON object as its last line.
``--quick`` is a smoke run (4 trials of 2 epochs; BENCHMARKS.md untouched).

    python bench/held_out.py [--quick] [--ml100k FILE] [--trials 16] [--epochs 8] [--jobs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)

from bench._report import command, machine, write_section  # noqa: E402

SPACE = """
[defaults.space]
lr = { type = "real", low = 1e-3, high = 0.3, prior = "log" }
embedding_dim = { type = "int", low = 4, high = 64 }
reg = { type = "real", low = 1e-5, high = 1e-1, prior = "log" }
"""

CONFIG = """
[defaults]
shards = 2
epochs = {epochs}
batch_size = 256
seed = 0
trials = {trials}
parallel = 4
[defaults.pruner]
reduction_factor = 3
min_epochs = 1
{space}
[regions.bench]
data = "table.csv"
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [{low}, {high}]
"""

# The child: tune the region in HOPTUNE_HOME and copy its champion out. It uses only names
# that both the old and the new hoptune have.
CHILD = """
import json, shutil, sys
from pathlib import Path
import numpy as np, torch
torch.set_num_threads(1)
from hoptune.core import Settings, Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import Runtime, create_study, run_inline, tune_step
mode, config, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
rt = Runtime(Settings.from_env(), worker="bench")
region = load_config(config).region("bench")
manifest = ingest(region, Store(rt.settings.store_url)).manifest
configs = None
if mode == "random":
    from hoptune.tuner import parse_space
    space = parse_space(region.space, "space")
    configs = space.sample(np.random.default_rng(0), region.trials)
study = create_study(rt, region, manifest=manifest, configs=configs)
run_inline(rt, tune_step(rt, study))
record = rt.db.study(study)
version = record.promotion["version"]
store = Store(rt.settings.store_url)
out.mkdir(parents=True, exist_ok=True)
for name in ("weights.pt", "card.json", "ids.json"):
    (out / name).write_bytes(store.read_bytes(f"models/bench/{version}/{name}"))
trials = rt.db.trials(study)
(out / "run.json").write_text(json.dumps({
    "trials": len(trials), "pruned": sum(t.state == "pruned" for t in trials),
    "epochs": sum(t.epochs_done for t in trials),
    "validation": record.promotion["challenger_metric"]}))
"""


def read_ratings(path: Path) -> pd.DataFrame:
    """user_id, item_id, rating from a MovieLens file: RecBole's .inter or the original u.data."""
    if path.suffix == ".inter":
        table = pd.read_csv(path, sep="\t")
        table.columns = [c.split(":")[0] for c in table.columns]
    else:
        table = pd.read_csv(path, sep="\t", names=["user_id", "item_id", "rating", "timestamp"])
    return table[["user_id", "item_id", "rating"]].astype({"user_id": str, "item_id": str,
                                                          "rating": float})


def demo_ratings(folder: Path) -> pd.DataFrame:
    from hoptune.regions import write_demo

    write_demo(folder, regions=("north",))
    return pd.read_csv(folder / "data" / "north.csv", dtype={"user_id": str, "item_id": str})


def split(table: pd.DataFrame, seed: int = 7) -> tuple[pd.DataFrame, pd.DataFrame]:
    held = np.random.default_rng(seed).random(len(table)) < 0.1
    return table[~held].reset_index(drop=True), table[held].reset_index(drop=True)


def before_tree(commit: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def run(mode: str, code: Path, work: Path, table: pd.DataFrame, trials: int, epochs: int
        ) -> tuple[Path, float]:
    """Tune in a child process with hoptune from ``code``; the champion's folder, seconds.

    Called from threads (``--jobs``): it only waits on its own child process.
    """
    home = work / mode
    home.mkdir(parents=True)
    table.to_csv(home / "table.csv", index=False)
    low, high = float(table["rating"].min()), float(table["rating"].max())
    text = CONFIG.format(epochs=epochs, trials=trials, space=SPACE, low=low, high=high)
    if mode != "before":  # the old hoptune has no select (it always took the last epoch)
        text = text.replace("parallel = 4\n", 'parallel = 4\nselect = "best"\n')
    (home / "hoptune.toml").write_text(text)
    env = {**os.environ, "HOPTUNE_HOME": str(home / ".hoptune"), "PYTHONPATH": str(code),
           "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "random" if mode == "random" else "tune",
                           str(home / "hoptune.toml"), str(home / "champion")],
                          cwd=home, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the run failed:\n{done.stderr[-3000:]}")
    return home / "champion", time.perf_counter() - started


def held_out_rmse(champion: Path, held: pd.DataFrame) -> float:
    """The champion's RMSE on the held-out rows, through this checkout's serving path."""
    import torch

    from hoptune.regions import RegionConfig, encode_rows, get_family

    card = json.loads((champion / "card.json").read_text())
    ids = json.loads((champion / "ids.json").read_text())
    region = RegionConfig.model_validate({
        "name": "bench", "data": "table.csv", "family": "rating_mf", "task": "rating",
        "rating_range": card["meta"]["rating_range"]})
    model = get_family(region).build(card["params"], card["meta"])
    model.load_state_dict(torch.load(champion / "weights.pt", weights_only=True))
    data = encode_rows(held, region, card["meta"], ids)
    with torch.no_grad():
        predicted = model.eval()(data).double()
    return float((predicted - data["rating"].double()).pow(2).mean().sqrt())


def bench(name: str, table: pd.DataFrame, code: dict[str, Path], work: Path, trials: int,
          epochs: int, jobs: int) -> dict:
    train, held = split(table)
    out = {"rows": len(table), "held_out": len(held),
           "mean_rmse": float(np.sqrt(((held["rating"] - train["rating"].mean()) ** 2).mean()))}
    modes = ("before", "after", "random")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = dict(zip(modes, pool.map(
            lambda mode: run(mode, code[mode], work / name, train, trials, epochs), modes),
            strict=True))
    for mode, (champion, seconds) in runs.items():
        facts = json.loads((champion / "run.json").read_text())
        out[mode] = {"held_out_rmse": held_out_rmse(champion, held), "seconds": seconds,
                     **facts}
    return out


def report(results: dict, args: argparse.Namespace, load: str) -> str:
    lines = [
        "## Champion on held-out rows (`bench/held_out.py`)", "",
        f"Machine: {machine()}; load average before the run {load}; {args.jobs} run(s) at "
        f"once, each on one thread (the cores are shared with other work: seconds are "
        f"indicative only).", "",
        f"Command: `{command()}`", "",
        f"Budget per run: {args.trials} trials of up to {args.epochs} epochs, 2 shards, 4 at a "
        f"time; space lr (log 1e-3..0.3), embedding_dim (4..64), reg (log 1e-5..0.1). "
        f"10% of each data set's ratings are held out (seed 7) and never ingested; each "
        f"champion is scored on them through the serving path (its own id maps, the rating "
        f"model's fallback for ids it never saw). `before` is hoptune at commit "
        f"{args.before}; `after` this checkout; `random` this checkout training the same "
        f"number of random configurations for every epoch, without pruning.", "",
        "| data set | rows | held out | predict the mean | before | after | random search "
        "| after / random |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['rows']} | {r['held_out']} | {r['mean_rmse']:.4f} "
            f"| {r['before']['held_out_rmse']:.4f} | {r['after']['held_out_rmse']:.4f} "
            f"| {r['random']['held_out_rmse']:.4f} "
            f"| {r['after']['held_out_rmse'] / r['random']['held_out_rmse']:.3f} |")
    lines += ["", "Held-out RMSE (lower is better). Per run: trials pruned, epochs trained, "
              "seconds:", ""]
    for name, r in results.items():
        parts = [f"{m} {r[m]['pruned']} pruned, {r[m]['epochs']} epochs, "
                 f"{r[m]['seconds']:.0f} s" for m in ("before", "after", "random")]
        lines.append(f"- {name}: " + "; ".join(parts))
    if "movielens-100k" not in results:
        lines += ["", "MovieLens 100k was not given (`--ml100k`)."]
    else:
        lines += ["", "MovieLens 100k: `ml-100k.inter` from the `recbole` 1.2.1 wheel on PyPI "
                  "(`pip download --no-deps recbole`, then unzip "
                  "`recbole/dataset_example/ml-100k/ml-100k.inter`)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run; BENCHMARKS.md untouched")
    parser.add_argument("--ml100k", type=Path, default=None, metavar="FILE")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--before", default="928476f")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once (each trains on one thread)")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.epochs = 4, 2
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path(
        "/proc/loadavg").exists() else "unknown"
    work = Path(tempfile.mkdtemp(prefix="held-out-"))
    try:
        code = {"before": before_tree(args.before, work / "before-code"), "after": ROOT,
                "random": ROOT}
        data = {"demo north": demo_ratings(work / "demo")}
        if args.ml100k is not None:
            data["movielens-100k"] = read_ratings(args.ml100k)
        results = {name: bench(name.replace(" ", "-"), table, code, work, args.trials,
                               args.epochs, args.jobs) for name, table in data.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    block = report(results, args, load)
    if args.quick:
        print(block)
    else:
        write_section("held_out", block, args.output)
    print(json.dumps({name: {m: round(r[m]["held_out_rmse"], 4) for m in
                             ("before", "after", "random")} | {"mean": round(r["mean_rmse"], 4)}
                      for name, r in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
