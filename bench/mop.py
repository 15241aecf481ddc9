"""Model hopping against task parallelism and one process, across region sizes, in one run.

For each region size (``--sizes``: training rows; default 10 thousand, 100 thousand, 1
million and 10 million), the same region data, the same trial configurations (fixed, so no
pruning changes the work), the same 2 real workers, four ways:

- hoptune as shipped, ``shards = "auto"``: the shard count chosen at ingest from the data
  size and the costs the study database has recorded so far (the sizes run smallest first,
  so each later size is chosen from the hops of the earlier ones; the first, with nothing
  recorded, by the rule from rows alone);
- hoptune with K = 2 forced: the data in 2 shards, one per worker; each trial hops between
  them;
- task parallelism through the same Celery cluster: the same data as one shard that both
  workers hold a full copy of (replicas of one queue), so each hop of a trial is a whole
  epoch on one worker;
- one process training the trials one after another, each in the visit order hoptune
  recorded for it with K = 2 (``replay_trial``): its final weights must be bitwise those
  hoptune's hops produced.

For each: wall time per epoch of the cohort (first trial started to last trial finished,
over the epochs), each worker's busy share (its recorded hop time over that span) and the
bytes of data each worker holds (the shards' tensors it owns). Sizes below ``--big`` run
the three cluster ways ``--rounds`` times (3), one way after another in each round, each
round in another order, and report medians: one run's figures moved by a fifth to a third
from run to run (two identical configurations read 1.10x and 1.38x of each other at 10
thousand rows, 1.25x at 1 million). Sizes from ``--big`` rows up train ``--big-trials``
trials for ``--big-epochs`` epochs (the same for every way), once, so the largest fits in
minutes on 2 cores. As many trials as the smaller sizes, not fewer: the
configurations differ in cost (embedding 32 against 16 and 8), and 2 trials on 2 workers
leave the one with the cheaper trial idle whatever the way (at 10 million rows, 2 trials
kept task parallelism's workers 71% and 100% busy, hopping's 84% and 86%).

Usage: python bench/mop.py [--sizes 10000,100000,1000000,10000000] [--trials 4] [--epochs 3]
                           [--big 5000000] [--big-trials 4] [--big-epochs 1] [--rounds 3]
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

from hoptune.tuner import HopRecords

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import command, load_average, machine, write_section  # noqa: E402
from bench.hop_overhead import N_ITEMS, N_USERS  # noqa: E402

VALIDATION_FRACTION = 0.05
CONFIG = """
[defaults]
epochs = {epochs}
batch_size = 1024
seed = 0
validation_fraction = {validation}
optimizer = "fused_adamw"
[defaults.params]
embedding_dim = 32
lr = 0.005
reg = 1e-5
[regions.auto_{size}]
shards = "auto"
{region}
[regions.hop_{size}]
shards = 2
{region}
[regions.task_{size}]
shards = 1
{region}
[regions.warm_{size}]
shards = 2
epochs = 1
{warm}
"""
REGION = """data = "{data}"
family = "rating_mf"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]"""
WAYS = ("auto", "hop", "task")

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
    deciding: dict[str, float] = {}
    for h in hops:
        busy[h.worker] = busy.get(h.worker, 0.0) + (
            h.finished_at - h.started_at).total_seconds()
    # an epoch's end is decided by the worker of its last hop, after that hop is recorded
    last = {(h.trial_id, h.epoch): h for h in sorted(hops, key=lambda h: h.position)}
    for t in trials:
        for e in rt.db.epochs(t.id):
            h = last.get((t.id, e.epoch))
            if h is not None and e.finished_at is not None:
                deciding[h.worker] = deciding.get(h.worker, 0.0) + max(
                    0.0, (e.finished_at - h.finished_at).total_seconds())
    return {"study": study, "trials": trials, "hops": len(hops), "span_s": span,
            "epoch_s": span / region.epochs,
            "busy": {w: round(b / span, 4) for w, b in sorted(busy.items())},
            "deciding": {w: round(deciding.get(w, 0.0) / span, 4) for w in sorted(busy)},
            "metrics": [t.last_metric for t in trials]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000,10000000",
                        help="training rows of each region size, comma-separated")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--big", type=int, default=5_000_000,
                        help="sizes from this many rows train --big-trials for --big-epochs")
    parser.add_argument("--big-trials", type=int, default=4)
    parser.add_argument("--big-epochs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each way for sizes below --big (medians reported)")
    args = parser.parse_args()
    try:
        sizes = sorted(int(x) for x in args.sizes.split(","))
    except ValueError:
        parser.error(f"--sizes: comma-separated integers, got {args.sizes!r}")
    if not sizes or sizes[0] < 1000:
        parser.error("--sizes: each size at least 1000 rows")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")

    home = Path(tempfile.mkdtemp(prefix="htmop-"))
    os.environ["HOPTUNE_HOME"] = str(home)
    os.environ["HOPTUNE_TORCH_THREADS"] = "1"
    for key in ("HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL", "HOPTUNE_BROKER_URL"):
        os.environ.pop(key, None)
    out: dict = {"sizes": {}, "load_before": load_average()}
    from hoptune.core import Settings
    from hoptune.tasks.worker import EmbeddedRedis

    broker = EmbeddedRedis(Settings.from_env().home).start()
    try:
        for size in sizes:
            big = size >= args.big
            trials, epochs = (args.big_trials, args.big_epochs) if big else (args.trials,
                                                                             args.epochs)
            rounds = 1 if big else args.rounds
            out["sizes"][str(size)] = _measure(home, size, trials, epochs, rounds)
            print(json.dumps({"size": size, **_summary(out["sizes"][str(size)])}), flush=True)
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)
    out["load_after"] = load_average()
    out["met"] = all(_met(f) for f in out["sizes"].values())
    _report(out, args)
    print(json.dumps(out))
    return 0


def _measure(home: Path, size: int, trials: int, epochs: int, rounds: int) -> dict:
    """The four ways on one region size's data, the cluster's ``rounds`` times: the figures
    (medians over the rounds) ``_report`` writes."""
    from hoptune.core import Settings, Store
    from hoptune.regions import ingest, load_config
    from hoptune.tasks.plan import ingest_region
    from hoptune.tasks.worker import Runtime

    configs = [CONFIGS[i % len(CONFIGS)] for i in range(trials)]
    config = load_config(_write_config(home, size, epochs))
    settings = Settings.from_env()
    store = Store(settings.store_url)
    rt = Runtime(settings, worker="bench")
    regions = {way: config.region(f"{way}_{size}") for way in (*WAYS, "warm")}
    manifests = {way: (ingest_region(rt, r, workers=2) if way == "auto" else
                       ingest(r, store)).manifest for way, r in regions.items()}
    runs = _on_the_cluster(rt, settings, regions, manifests, configs, rounds)
    ways = runs[0]
    serial, equal = _one_process(rt, store, ways["hop"], epochs, 2)
    held = {way: _held(store, manifests[way], ways[way]["owners"]) for way in WAYS}
    e = {way: statistics.median(r[way]["epoch_s"] for r in runs) for way in WAYS}
    ratio = {w: statistics.median(r[w]["epoch_s"] / r["task"]["epoch_s"] for r in runs)
             for w in ("auto", "hop")}
    busy, deciding = ({w: {worker: round(statistics.median(r[w][key].get(worker, 0.0)
                                                           for r in runs), 4)
                           for worker in ways[w]["busy"]} for w in WAYS}
                      for key in ("busy", "deciding"))
    return {
        "trials": trials, "epochs": epochs, "rows": size, "rounds": rounds,
        "auto_shards": manifests["auto"]["shards"],
        "auto_reason": manifests["auto"].get("shards_reason", ""),
        "epoch_s": {**{w: round(v, 3) for w, v in e.items()}, "serial": round(serial, 3)},
        "ratio": {w: round(v, 4) for w, v in ratio.items()},
        "busy": busy,
        "deciding": deciding,
        "runs": [{w: {"epoch_s": round(r[w]["epoch_s"], 4), "busy": r[w]["busy"]} for w in WAYS}
                 for r in runs],
        "held_bytes": held,
        "held_ratio": {w: round(max(held[w].values()) / max(held["task"].values()), 4)
                       for w in ("auto", "hop")},
        "hops": {w: ways[w]["hops"] for w in WAYS},
        "bitwise_equal": bool(equal),
        "metrics": {w: ways[w]["metrics"] for w in WAYS},
    }


def _summary(f: dict) -> dict:
    return {k: f[k] for k in ("auto_shards", "epoch_s", "ratio", "busy", "held_ratio")}


def _met(f: dict) -> bool:
    """The issue's targets for ``shards = "auto"`` at one size (the data-held one at 10M)."""
    ok = f["ratio"]["auto"] <= 1.10 and min(f["busy"]["auto"].values()) >= 0.9
    if f["rows"] >= 10_000_000:
        ok &= f["held_ratio"]["auto"] <= 0.5
    return ok


def _write_config(home: Path, size: int, epochs: int) -> Path:
    """The region's ratings and the configuration of its three ways; the configuration's
    path."""
    from hoptune.regions import write_ratings

    data = home / "data" / f"mop-{size}.csv"
    data.parent.mkdir(parents=True, exist_ok=True)
    write_ratings(data, n_users=N_USERS, n_items=N_ITEMS,
                  n_rows=round(size / (1 - VALIDATION_FRACTION)), rank=8, noise=0.3, seed=1)
    path = home / f"hoptune-{size}.toml"
    warm = home / "data" / "warm.csv"
    if not warm.exists():
        write_ratings(warm, n_users=N_USERS, n_items=N_ITEMS, n_rows=4000, rank=8, noise=0.3,
                      seed=2)
    path.write_text(CONFIG.format(epochs=epochs, size=size, validation=VALIDATION_FRACTION,
                                  region=REGION.format(data=data),
                                  warm=REGION.format(data=warm)))
    return path


def _on_the_cluster(rt, settings, regions: dict, manifests: dict,  # noqa: ANN001
                    configs: list[dict], rounds: int) -> list[dict]:
    """The three cluster ways, one after the other, ``rounds`` times, on the same 2 workers,
    placed as local clusters place shards (``assign_shards``: K = 1 a replica on each
    worker): one dict of the ways per round."""
    from hoptune.tasks import app
    from hoptune.tasks.cli import LocalCluster, assign_shards

    shards = {regions[w].name: int(manifests[w]["shards"]) for w in WAYS}
    warm = regions["warm"]
    shards[warm.name] = 2
    cluster = LocalCluster({}, 2, log_dir=settings.home / "logs")
    cluster.assignment = assign_shards(shards, 2)
    out = []
    try:
        cluster.start()
        cluster.wait_ready(app)
        # each worker's first hop pays its imports and first allocations: not a way's cost
        _way(rt, warm, manifests["warm"], CONFIGS[:2], app)
        for r in range(rounds):
            out.append({})
            for way in WAYS[r % len(WAYS):] + WAYS[:r % len(WAYS)]:  # each first once
                out[-1][way] = _way(rt, regions[way], manifests[way], configs, app)
                out[-1][way]["owners"] = [[k for r, k in owned if r == regions[way].name]
                                          for owned in cluster.assignment]
    finally:
        cluster.stop()
    return out


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


def _held(store, manifest: dict, owners: list[list[int]]) -> dict[str, int]:  # noqa: ANN001
    """Bytes of data each worker holds: the tensors of the shards it owns, as loaded."""
    from hoptune.regions import load_shard

    sizes = [sum(t.nbytes for t in load_shard(store, manifest, k).values())
             for k in range(int(manifest["shards"]))]
    return {f"w{i}": sum(sizes[k] for k in owned) for i, owned in enumerate(owners)}


HEADER = ("| rows | trials x epochs | auto K | auto | K = 2 | task | one process | busy, auto "
          "| busy, K = 2 | busy, task | data held, auto | data held, K = 2 | bitwise "
          "| auto's targets |\n"
          "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: "
          "| --- | --- |")


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def _report(out: dict, args: argparse.Namespace) -> None:
    rows = []
    for size, f in out["sizes"].items():
        e, b, h = f["epoch_s"], f["busy"], f["held_ratio"]
        busy = {w: ", ".join(f"{v:.1%}" for v in b[w].values()) for w in WAYS}
        rows.append(
            f"| {int(size):,} | {f['trials']} x {f['epochs']}, {f['rounds']} run(s) | "
            f"{f['auto_shards']} | "
            f"{e['auto']:.3f} ({f['ratio']['auto']:.3f}x) | {e['hop']:.3f} "
            f"({f['ratio']['hop']:.3f}x) | {e['task']:.3f} | {e['serial']:.3f} | "
            f"{busy['auto']} | {busy['hop']} | {busy['task']} | {h['auto']:.2f} | "
            f"{h['hop']:.2f} | {f['bitwise_equal']} | {_verdict(_met(f))} |")
    deciding = "\n".join(
        f"- {int(size):,} rows: " + "; ".join(
            f"{w} {', '.join(f'{v:.1%}' for v in f['deciding'][w].values())}" for w in WAYS)
        for size, f in out["sizes"].items())
    reasons = "\n".join(f"- {int(size):,} rows: {f['auto_shards']} shard(s), "
                         f"{f['auto_reason']}" for size, f in out["sizes"].items())
    write_section("mop", f"""
## Model hopping against task parallelism, across region sizes (`bench/mop.py`)

Machine: {machine()}. Command: `{command()}`.
Load average (1, 5, 15 min) before / after: {out['load_before']} / {out['load_after']}.
The rating model ({N_USERS:,} users, {N_ITEMS:,} items, embedding 32: about 1M
parameters), fixed trial configurations (no pruning); the same 2 real `hoptune worker`
processes on the embedded Redis serve every way of a size, one after the other. Sizes from
{args.big:,} rows train {args.big_trials} trials for {args.big_epochs} epoch(s), every way
alike. Task parallelism: the data as one shard both workers hold in full, each trial's hop
a whole epoch on one worker. Wall time per epoch of the cohort in seconds, with its ratio
to task parallelism; sizes below {args.big:,} rows run every way {args.rounds} times, one
way after another in each round, each round in another order, and show medians (the
ratio: the median of each round's); data held: the most bytes of data one worker holds, against task
parallelism's; one process: the trials one after another in hoptune's (K = 2) recorded
visit orders, bitwise equal to hoptune's final weights where "bitwise" says True.
Targets for `shards = "auto"`: at most 1.10x task parallelism's wall time per epoch and
every worker at least 90% busy at every size, and at 10 million rows each worker holding
at most half the data task parallelism holds.

{HEADER}
{chr(10).join(rows)}

Share of the span each worker then spent deciding epochs it ended (validation, the
pruner, the next epoch's placement, between its last hop's record and the epoch's), not
counted in the busy shares above (median over the runs; auto, K = 2, task):

{deciding}

Why `auto` chose its K (the manifest's reason):

{reasons}
""")


if __name__ == "__main__":
    sys.exit(main())
