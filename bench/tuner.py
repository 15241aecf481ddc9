"""Benchmark of the tuner: sample efficiency and the cost of one batch proposal.

Sample efficiency: the median, over seeds, of the best value found after 20, 40
and 60 evaluations of Branin and Hartmann-6 (both minimised), for hoptune's
``propose`` (batches of 4, each told before the next is asked), random search
(``Space.sample``) and Optuna's TPE sampler as a baseline. Cost: the seconds
``propose`` takes for a batch of 8 with 50, 100 and 200 told points.

Writes its block of BENCHMARKS.md (between ``<!-- bench:tuner -->`` markers)
and prints, as its last line, one JSON object with the key figures. ``--quick``
is a smoke run: fewer seeds and repeats, and BENCHMARKS.md is left alone.

    python bench/tuner.py [--quick] [--seeds N] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and this file's
# name would shadow the tuner package: look in the repository root first.
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)

from bench._report import cpu_model, write_section  # noqa: E402
from hoptune.tuner import Space, parse_space, propose  # noqa: E402

CHECKPOINTS = (20, 40, 60)
BATCH = 4
TIMED_TOLD = (50, 100, 200)
TIMED_BATCH = 8

_HART6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_HART6_A = np.array(
    [
        [10, 3, 17, 3.5, 1.7, 8],
        [0.05, 10, 17, 0.1, 8, 14],
        [3, 3.5, 1.7, 10, 17, 8],
        [17, 8, 0.05, 10, 0.1, 14],
    ]
)
_HART6_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)


def branin(p: dict[str, Any]) -> float:
    """Branin-Hoo on [-5, 10] x [0, 15]; global minimum 0.397887."""
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def hartmann6(p: dict[str, Any]) -> float:
    """Hartmann-6 on [0, 1]^6; global minimum -3.32237."""
    x = np.array([p[f"x{i}"] for i in range(1, 7)])
    inner = np.sum(_HART6_A * (x - _HART6_P) ** 2, axis=1)
    return float(-np.sum(_HART6_ALPHA * np.exp(-inner)))


PROBLEMS: dict[str, tuple[Callable[[dict[str, Any]], float], Space, float]] = {
    "branin": (
        branin,
        parse_space(
            {
                "x1": {"type": "real", "low": -5.0, "high": 10.0},
                "x2": {"type": "real", "low": 0.0, "high": 15.0},
            },
            "bench: branin",
        ),
        0.397887,
    ),
    "hartmann6": (
        hartmann6,
        parse_space(
            {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(1, 7)},
            "bench: hartmann6",
        ),
        -3.32237,
    ),
}


def best_so_far(values: list[float]) -> list[float]:
    """The best value after 20, 40, 60 evaluations."""
    return [min(values[:k]) for k in CHECKPOINTS]


def run_hoptune(f: Callable[[dict[str, Any]], float], space: Space, seed: int) -> list[float]:
    told: list[tuple[dict[str, Any], float]] = []
    while len(told) < CHECKPOINTS[-1]:
        for params in propose(space, told, [], BATCH, seed):
            told.append((params, f(params)))
    return best_so_far([v for _, v in told])


def run_random(f: Callable[[dict[str, Any]], float], space: Space, seed: int) -> list[float]:
    points = space.sample(np.random.default_rng(seed), CHECKPOINTS[-1])
    return best_so_far([f(p) for p in points])


def run_tpe(f: Callable[[dict[str, Any]], float], space: Space, seed: int) -> list[float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))

    def objective(trial: optuna.Trial) -> float:
        params = {d.name: trial.suggest_float(d.name, d.low, d.high) for d in space.dimensions}
        return f(params)

    study.optimize(objective, n_trials=CHECKPOINTS[-1])
    return best_so_far([t.value for t in study.trials])


METHODS = {"hoptune": run_hoptune, "random": run_random, "optuna-tpe": run_tpe}


def sample_efficiency(seeds: int) -> dict[str, dict[str, list[float]]]:
    """Median best value at each checkpoint, per problem and method."""
    result: dict[str, dict[str, list[float]]] = {}
    for name, (f, space, _) in PROBLEMS.items():
        result[name] = {}
        for method, run in METHODS.items():
            started = time.perf_counter()
            runs = [run(f, space, seed) for seed in range(seeds)]
            result[name][method] = [statistics.median(col) for col in zip(*runs, strict=True)]
            took = time.perf_counter() - started
            print(f"{name:10s} {method:10s} {result[name][method]} ({took:.1f} s)", flush=True)
    return result


def proposal_seconds(repeats: int, sizes: tuple[int, ...]) -> dict[int, float]:
    """Median seconds of one batch proposal of 8 on Hartmann-6, per number of told points."""
    f, space, _ = PROBLEMS["hartmann6"]
    result = {}
    for size in sizes:
        times = []
        for r in range(repeats):
            told = [(p, f(p)) for p in space.sample(np.random.default_rng(1000 + r), size)]
            started = time.perf_counter()
            propose(space, told, [], TIMED_BATCH, r)
            times.append(time.perf_counter() - started)
        result[size] = statistics.median(times)
        print(f"batch of {TIMED_BATCH} at {size} told: {result[size]:.2f} s", flush=True)
    return result


def machine() -> str:
    cpu = cpu_model()
    libs = ", ".join(
        f"{lib} {metadata.version(lib)}"
        for lib in ("numpy", "scipy", "scikit-learn", "scikit-optimize", "optuna")
    )
    return f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}; {libs}"


def report(
    command: str, seeds: int, efficiency: dict[str, dict[str, list[float]]], cost: dict[int, float]
) -> str:
    lines = [
        "## Tuner",
        "",
        f"Machine: {machine()}.",
        f"Command: `{command}`.",
        "",
        f"Sample efficiency: median over {seeds} seeds of the best value after n evaluations "
        f"(minimisation; hoptune proposes batches of {BATCH}, each told before the next).",
        "",
        "| problem (optimum) | method | " + " | ".join(f"n={k}" for k in CHECKPOINTS) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in CHECKPOINTS) + " |",
    ]
    for name, methods in efficiency.items():
        optimum = PROBLEMS[name][2]
        for method, medians in methods.items():
            cells = " | ".join(f"{v:.4f}" for v in medians)
            lines.append(f"| {name} ({optimum}) | {method} | {cells} |")
    lines += [
        "",
        f"Cost of one proposal of a batch of {TIMED_BATCH} on Hartmann-6 (median seconds):",
        "",
        "| told points | seconds |",
        "| ---: | ---: |",
    ]
    lines += [f"| {size} | {seconds:.2f} |" for size, seconds in cost.items()]
    return "\n".join(lines)




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run; BENCHMARKS.md untouched")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default 15, quick 2)")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 15)
    efficiency = sample_efficiency(seeds)
    if args.quick:
        cost = proposal_seconds(1, (TIMED_TOLD[0], TIMED_TOLD[-1]))
    else:
        cost = proposal_seconds(3, TIMED_TOLD)
    command = " ".join(["python", "bench/tuner.py", *(sys.argv[1:] if argv is None else argv)])
    block = report(command, seeds, efficiency, cost)
    if args.quick:
        print(block)
    else:
        write_section("tuner", block, args.output)
    at40 = CHECKPOINTS.index(40)
    summary = {
        "batch8_at_200_s": round(cost[TIMED_TOLD[-1]], 3),
        "beats_random_at_40": {
            name: methods["hoptune"][at40] < methods["random"][at40]
            for name, methods in efficiency.items()
        },
        "median_best_at_40": {
            name: {method: round(v[at40], 4) for method, v in methods.items()}
            for name, methods in efficiency.items()
        },
        "seeds": seeds,
        "quick": args.quick,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
