"""Host work of one fused optimizer step on the kernel path: planned against unplanned.

On a GPU a step of FusedAdamW or FusedSGD is one kernel launch, and the Python
around it (which parameters have gradients, their state, the step counts, the
checks that every tensor can be addressed directly, the pointer table) runs on
the host before it. This bench measures that host work alone, on any machine:
the optimizers take their kernel path on CPU tensors and the launch itself does
nothing, so what is timed is everything a step does besides the kernel and
CuPy's call. Each optimizer steps with its plan (``kernels._plan``, as shipped)
and without (``planned = False``), taking turns, over parameters of 1e5
elements in 10 and in 100 tensors (the launch's size does not matter here);
medians over the steps, in microseconds.

Usage: python bench/host_step.py [--steps 400]
Writes its section of BENCHMARKS.md; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)  # run as a script: the repository root first, as the others do

from bench._report import command, machine, write_section  # noqa: E402
from hoptune import kernels  # noqa: E402

PARAMETERS = 100_000
TENSORS = (10, 100)
OPTIMIZERS = {
    "FusedAdamW": lambda ps: kernels.FusedAdamW(ps, lr=1e-3, weight_decay=1e-2),
    "FusedSGD": lambda ps: kernels.FusedSGD(ps, lr=1e-2, momentum=0.9, weight_decay=1e-2),
}


def host_seconds(name: str, tensors: int, steps: int) -> dict[str, float]:
    """Median seconds of one step's host work, planned and unplanned, taking turns."""
    made = {}
    for planned in (True, False):
        params = [torch.zeros(PARAMETERS // tensors, requires_grad=True)
                  for _ in range(tensors)]
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer = OPTIMIZERS[name](params)
        optimizer.planned = planned
        optimizer.step()  # the first step makes the state, and the plan
        made[planned] = optimizer
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(steps):
        for planned, optimizer in made.items():
            started = time.perf_counter()
            optimizer.step()
            times[planned].append(time.perf_counter() - started)
    return {"planned": statistics.median(times[True]),
            "unplanned": statistics.median(times[False])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with kernels.host_work_only():
        figures = {f"{name}/{t}": host_seconds(name, t, args.steps)
                   for name in OPTIMIZERS for t in TENSORS}
    rows = [f"| {key.split('/')[0]} | {key.split('/')[1]} | {f['unplanned'] * 1e6:.0f} | "
            f"{f['planned'] * 1e6:.0f} | {f['unplanned'] / f['planned']:.1f}x |"
            for key, f in figures.items()]
    write_section("host_step", "\n".join([
        "## Host work of a fused optimizer step (`bench/host_step.py`)", "",
        f"Machine: {machine()}, one torch thread. Command: `{command()}`.", "",
        "What a step of FusedAdamW or FusedSGD does on the host around its one kernel "
        "launch, the launch itself left out (CPU tensors on the kernel path, a launcher that "
        f"does nothing): {PARAMETERS:,} parameters in 10 and in 100 tensors, the optimizer "
        "with its step plan (as shipped) and without, taking turns; medians over "
        f"{args.steps} steps each, in microseconds.", "",
        "| optimizer | tensors | unplanned (us) | planned (us) | unplanned / planned |",
        "| --- | ---: | ---: | ---: | ---: |", *rows]))
    print(json.dumps({key: {k: round(v * 1e6, 1) for k, v in f.items()}
                      for key, f in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
