"""Benchmark of fused cohorts: K trials trained as one model against K hops one at a time.

For cohorts of 1, 2, 4, 8 and 16 trials of two models, on the demo's shard
size (one of the demo's 2 shards: 15,000 rows, batch 256):

* the demo rating model (``rating_mf``, 400 users, 300 items, the demo's
  embedding size 16), the trials' learning rates and weight decays differing;
* the same with the trials' embedding sizes cycling through 16, 8, 32, 12,
  24, 4, 20, 28 (the demo's search range: a cohort pads to its largest);
* an MLP (``mlp``, 16 features, 2 layers, hidden widths cycling through 64,
  32, 48, 16; regression).

Each round trains, on fresh models, the K trials one after the other with
``train_pass`` (what K hops one at a time train) and then as one cohort with
``train_cohort_pass``; the two take turns every round so a change in the
machine's load affects them alike; figures are medians over the rounds.
Trial-epochs per second: K trials times one pass (half an epoch of the demo's
2 shards) over the seconds taken. Per-hop overhead of a cohort: its pass's
seconds outside the training loop (fusing, padding, moving optimizer states in
and out, the vmap probe), as a share of the pass. torch runs on one thread,
as a worker does on the shared CPU.

With a CUDA device the same runs on it (the GPU column); without one that
column says so and ``gpu_speedup_8`` is null. Writes its block of
BENCHMARKS.md (between ``<!-- bench:fusion -->`` markers) and prints, as its
last line, one JSON object with ``cpu_speedup_8`` (trial-epochs per second of a
cohort of 8 demo rating models over 8 single hops) and ``gpu_speedup_8``.
``--quick`` is a smoke run: 2 rounds, cohorts up to 4, BENCHMARKS.md left alone.

    python bench/fusion.py [--quick] [--rounds N] [--sizes 8,16] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)

from bench._report import BENCHMARKS, command, machine, write_section  # noqa: E402
from hoptune.regions import RegionConfig  # noqa: E402
from hoptune.tasks.hop import (  # noqa: E402  # noqa: E402
    Member,
    build_trial_model,
    make_trial_optimizer,
    train_cohort_pass,
    train_pass,
)

SIZES = (1, 2, 4, 8, 16)
ROWS, BATCH, SHARDS = 15_000, 256, 2
USERS, ITEMS, FEATURES = 400, 300, 16
DEMO_EMBEDDING = 16  # the demo region's embedding_dim
EMBEDDINGS = (16, 8, 32, 12, 24, 4, 20, 28)
HIDDEN = (64, 32, 48, 16)


def _models() -> dict[str, dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    ratings = {"user": torch.randint(0, USERS, (ROWS,), generator=g),
               "item": torch.randint(0, ITEMS, (ROWS,), generator=g),
               "rating": torch.randint(1, 6, (ROWS,), generator=g).float()}
    x = torch.randn(ROWS, FEATURES, generator=g)
    tabular = {"x": x, "y": x @ torch.randn(FEATURES, generator=g)}
    rating = {
        "region": {"family": "rating_mf", "rating_range": [1.0, 5.0]},
        "meta": {"n_users": USERS, "n_items": ITEMS, "rating_range": [1.0, 5.0],
                 "rating_mean": 3.0},
        "data": ratings,
    }
    return {
        "demo rating model": {
            **rating,
            "params": lambda i: {"embedding_dim": DEMO_EMBEDDING, "lr": 0.005 * (1 + i % 4),
                                 "weight_decay": 0.01 * (i % 3)},
        },
        "demo rating model, mixed sizes": {
            **rating,
            "params": lambda i: {"embedding_dim": EMBEDDINGS[i % len(EMBEDDINGS)],
                                 "lr": 0.005 * (1 + i % 4), "weight_decay": 0.01 * (i % 3)},
        },
        "MLP": {
            "region": {"family": "mlp", "task": "regression",
                       "columns": {"features": [f"f{j}" for j in range(FEATURES)],
                                   "label": "y"}},
            "meta": {"n_features": FEATURES, "label_mean": 0.0},
            "data": tabular,
            "params": lambda i: {"hidden": HIDDEN[i % len(HIDDEN)], "layers": 2,
                                 "lr": 0.001 * (1 + i % 4), "weight_decay": 0.01 * (i % 3)},
        },
    }


def _members(region: RegionConfig, spec: dict[str, Any], k: int, device: torch.device
             ) -> list[Member]:
    out = []
    for i in range(k):
        params = spec["params"](i)
        model = build_trial_model(region, params, 100 + i, spec["meta"], device)
        out.append(Member(100 + i, params, model, make_trial_optimizer(region, params, model)))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(name: str, spec: dict[str, Any], sizes: tuple[int, ...], rounds: int,
            device: torch.device) -> dict[int, dict[str, float]]:
    """Per cohort size: median seconds of K single passes, of one cohort pass, and of the
    cohort pass outside its training loop."""
    region = RegionConfig.model_validate({"name": "bench", "data": "x.csv",
                                          "batch_size": BATCH, "shards": SHARDS,
                                          **spec["region"]})
    data = {k: v.to(device) for k, v in spec["data"].items()}
    out = {}
    for k in sizes:
        single, cohort, overhead = [], [], []
        train_cohort_pass(region, _members(region, spec, k, device), data, epoch=0, shard=0,
                          position=0, meta=spec["meta"])  # warm-up: first calls, allocator
        for r in range(rounds):
            members = _members(region, spec, k, device)
            _sync(device)
            started = time.perf_counter()
            for m in members:
                train_pass(region, m.model, m.optimizer, data, seed=m.seed, epoch=r, shard=0,
                           position=0, params=m.params)
            _sync(device)
            single.append(time.perf_counter() - started)
            members = _members(region, spec, k, device)
            _sync(device)
            started = time.perf_counter()
            passes = train_cohort_pass(region, members, data, epoch=r, shard=0, position=0,
                                       meta=spec["meta"])
            _sync(device)
            wall = time.perf_counter() - started
            cohort.append(wall)
            overhead.append(max(wall - passes[0].seconds, 0.0) / wall)
        out[k] = {"single": statistics.median(single), "cohort": statistics.median(cohort),
                  "overhead": statistics.median(overhead)}
        print(f"{device.type} {name} K={k}: singles {out[k]['single']:.3f} s, cohort "
              f"{out[k]['cohort']:.3f} s, speedup {out[k]['single'] / out[k]['cohort']:.2f}",
              file=sys.stderr)
    return out


def _epochs_per_second(k: int, seconds: float) -> float:
    return k / SHARDS / seconds


def report(results: dict[str, dict[str, dict[int, dict[str, float]]]], rounds: int,
           loads: tuple[str, str], gpu_note: str) -> str:
    lines = [
        "## Fused cohorts (`bench/fusion.py`)",
        "",
        f"Machine: {machine()}; torch on {torch.get_num_threads()} thread(s). "
        f"Load average (1, 5, 15 min) before: {loads[0]}; after: {loads[1]} "
        "(the machine is shared: the figures are medians of turns taken side by side).",
        f"Command: `{command()}`.",
        "",
        f"One pass over one shard of the demo's size ({ROWS} rows, batch {BATCH}; half a "
        f"trial-epoch with {SHARDS} shards) for K trials: K single hops one at a time "
        "(`train_pass`) against one cohort hop (`train_cohort_pass`, one fused model). "
        f"Median over {rounds} rounds. Trial-epochs/s = K / {SHARDS} / seconds. Cohort "
        "overhead: the share of the cohort pass spent outside its training loop (fusing, "
        "padding, optimizer states in and out). Rating trials have the demo's embedding size "
        f"{DEMO_EMBEDDING}, or, for mixed sizes, {', '.join(map(str, EMBEDDINGS))} (padded to "
        f"the largest in the cohort); MLP hidden widths differ ({', '.join(map(str, HIDDEN))})."
        " Learning rates and weight decays differ between trials in every cohort.",
        "",
        "| model | device | K | single hops: trial-epochs/s | cohort: trial-epochs/s | "
        "speedup | cohort overhead |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for device, per_model in results.items():
        for name, per_k in per_model.items():
            for k, r in per_k.items():
                lines.append(
                    f"| {name} | {device} | {k} | {_epochs_per_second(k, r['single']):.2f} | "
                    f"{_epochs_per_second(k, r['cohort']):.2f} | "
                    f"{r['single'] / r['cohort']:.2f}x | {100 * r['overhead']:.1f}% |")
    if "cuda" not in results:
        lines.append("| both | GPU | - | no GPU at hand | | | |")
    lines += ["", gpu_note]
    return "\n".join(lines)


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=BENCHMARKS)
    parser.add_argument("--sizes", type=lambda t: tuple(int(k) for k in t.split(",")),
                        help="cohort sizes to run instead (a smoke run: nothing written)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sizes = args.sizes or ((1, 2, 4) if args.quick else SIZES)
    args.quick = args.quick or args.sizes is not None
    rounds = 2 if args.quick else args.rounds
    before = _load()
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices.append(torch.device("cuda", torch.cuda.current_device()))
    results: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    for device in devices:
        results[device.type] = {name: measure(name, spec, sizes, rounds, device)
                                for name, spec in _models().items()}

    def speedup(device: str, model: str = "demo rating model") -> float | None:
        per_k = results.get(device, {}).get(model, {})
        if 8 not in per_k:
            return None
        return round(per_k[8]["single"] / per_k[8]["cohort"], 2)

    cpu_8, gpu_8 = speedup("cpu"), speedup("cuda")
    gpu_note = (f"On the GPU a cohort of 8 demo rating models trains {gpu_8}x the "
                f"trial-epochs per second of 8 single hops (target: 8x)."
                if gpu_8 is not None else
                "No GPU was at hand for this run: the GPU figures are not measured.")
    if cpu_8 is not None:
        gpu_note = (f"On the CPU a cohort of 8 demo rating models trains {cpu_8}x the "
                    f"trial-epochs per second of 8 single hops (target: 3x). " + gpu_note)
    after = _load()
    if not args.quick:
        write_section("fusion", report(results, rounds, (before, after), gpu_note),
                      args.output)
    print(json.dumps({
        "cpu_speedup_8": cpu_8,
        "gpu_speedup_8": gpu_8,
        "cpu_speedup_8_mixed_sizes": speedup("cpu", "demo rating model, mixed sizes"),
        "mlp_cpu_speedup_8": speedup("cpu", "MLP"),
        "load_before": before,
        "load_after": after,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
