"""Benchmark of the fused AdamW step: its time and the memory bandwidth it achieves.

On a CUDA device: FusedAdamW (the CuPy kernel) next to torch.optim.AdamW with
``fused=True`` and with ``foreach=True``, for 1e6, 1e7 and 1e8 parameters,
timed with CUDA events. Without one it says so and measures the CPU path
instead: FusedAdamW (the torch reference) next to torch.optim.AdamW foreach
and single-tensor, for 1e5, 1e6 and 1e7 parameters. Every figure is the median
over repeated steps, after warm-up steps, the optimizers taking turns.

Bandwidth counts the bytes an AdamW update must move, 7 values per parameter
(param, grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written),
over the measured time. Ratios are torch's time over FusedAdamW's (above 1:
FusedAdamW is faster).

Writes its block of BENCHMARKS.md (between ``<!-- bench:kernels -->`` markers)
and prints, as its last line, one JSON object with the headline figures.
``--quick`` is a smoke run: smaller sizes, fewer repeats, BENCHMARKS.md left alone.
The CPU path runs on one torch thread unless ``--threads`` says otherwise.

    python bench/kernels.py [--quick] [--threads N] [--output BENCHMARKS.md]
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
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and this file's
# name would shadow the kernels package: look in the repository root first.
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)

from bench._report import cpu_model, write_section  # noqa: E402
from hoptune import kernels  # noqa: E402

TENSORS = 10  # the parameters are split into this many tensors, as a model's are
VALUES_MOVED = 7  # per parameter and AdamW step
WARMUP = 3
HYPER = {"lr": 1e-3, "weight_decay": 1e-2}


@dataclass(frozen=True)
class Plan:
    device: torch.device
    sizes: tuple[int, ...]
    repeats: dict[int, int]
    optimizers: dict[str, Callable[[list[torch.Tensor]], torch.optim.Optimizer]]
    tensors: int = TENSORS  # the parameters are split into this many tensors


def _fused_name(device: torch.device) -> str:
    """FusedAdamW's row name, saying which path it runs on device."""
    kernel = kernels.choose_path(device, torch.float32).path == kernels.KERNEL
    return "FusedAdamW (CuPy kernel)" if kernel else "FusedAdamW (torch reference)"


def plan(quick: bool) -> Plan:
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        sizes = (10**6, 10**7) if quick else (10**6, 10**7, 10**8)
        repeats = {10**6: 100, 10**7: 50, 10**8: 20}
        optimizers = {
            _fused_name(device): lambda p: kernels.FusedAdamW(p, **HYPER),
            "torch AdamW fused": lambda p: torch.optim.AdamW(p, fused=True, **HYPER),
            "torch AdamW foreach": lambda p: torch.optim.AdamW(p, foreach=True, **HYPER),
        }
        return Plan(device, sizes, repeats, optimizers)
    sizes = (10**5, 10**6) if quick else (10**5, 10**6, 10**7)
    repeats = {10**5: 40, 10**6: 15, 10**7: 7}
    if quick:
        repeats = {n: 3 for n in sizes}
    optimizers = {
        _fused_name(torch.device("cpu")): lambda p: kernels.FusedAdamW(p, **HYPER),
        "torch AdamW foreach": lambda p: torch.optim.AdamW(p, foreach=True, **HYPER),
        "torch AdamW single-tensor": lambda p: torch.optim.AdamW(p, foreach=False, **HYPER),
    }
    return Plan(torch.device("cpu"), sizes, repeats, optimizers)


def parameters(n: int, device: torch.device, tensors: int = TENSORS) -> list[torch.Tensor]:
    """n float32 parameters in ``tensors`` tensors, each with a fixed random gradient."""
    g = torch.Generator().manual_seed(0)
    sizes = [n // tensors + (1 if i < n % tensors else 0) for i in range(tensors)]
    params = []
    for size in sizes:
        p = torch.randn(size, generator=g).to(device).requires_grad_()
        p.grad = (torch.randn(size, generator=g) * 1e-2).to(device)
        params.append(p)
    return params


def step_seconds(p: Plan, n: int) -> dict[str, float]:
    """The median seconds of one step over n parameters, for each optimizer of the plan.

    The optimizers take turns, one timed step each per round, so a change in the
    machine's load during the run affects them alike.
    """
    optimizers = {name: make(parameters(n, p.device, p.tensors))
                  for name, make in p.optimizers.items()}
    for optimizer in optimizers.values():
        for _ in range(WARMUP):
            optimizer.step()
    times: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(p.repeats[n]):
        for name, optimizer in optimizers.items():
            times[name].append(_time_step(optimizer, p.device))
    return {name: statistics.median(t) for name, t in times.items()}


def _time_step(optimizer: torch.optim.Optimizer, device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        optimizer.step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    start_s = time.perf_counter()
    optimizer.step()
    return time.perf_counter() - start_s


def label(n: int) -> str:
    return f"1e{round(math.log10(n))}"


def machine(device: torch.device) -> str:
    cpu = cpu_model()
    text = (
        f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}; "
        f"torch {torch.__version__} (threads: {torch.get_num_threads()})"
    )
    if device.type == "cuda":
        return f"{text}; GPU {torch.cuda.get_device_name(device)}"
    return text


def path_note(device: torch.device) -> str:
    choice = kernels.choose_path(device, torch.float32)
    if device.type == "cuda":
        return f"FusedAdamW runs the {choice.path} path: {choice.reason}."
    return (
        "No CUDA device here (torch.cuda.is_available() is False): the CPU path is measured, "
        f"where FusedAdamW runs the torch reference ({choice.reason})."
    )


def report(command: str, p: Plan, seconds: dict[tuple[int, str], float]) -> str:
    names = list(p.optimizers)
    lines = [
        "## Fused AdamW step (`bench/kernels.py`)",
        "",
        f"Machine: {machine(p.device)}.",
        f"Command: `{command}`.",
        "",
        path_note(p.device),
        f"One AdamW step (lr {HYPER['lr']}, weight decay {HYPER['weight_decay']}) over n "
        f"float32 parameters in {TENSORS} tensors; median over "
        + ", ".join(f"{p.repeats[n]} steps at {label(n)}" for n in p.sizes)
        + f", after {WARMUP} warm-up steps. Bandwidth: the {VALUES_MOVED * 4} bytes per "
        "parameter an update must move, over the time. Ratio: torch's time over "
        "FusedAdamW's (above 1: FusedAdamW is faster).",
        "",
        "| parameters | optimizer | median ms/step | GB/s | torch / FusedAdamW |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for n in p.sizes:
        fused = seconds[(n, names[0])]
        for name in names:
            s = seconds[(n, name)]
            ratio = "" if name == names[0] else f"{s / fused:.2f}"
            gbps = VALUES_MOVED * 4 * n / s / 1e9
            lines.append(f"| {label(n)} | {name} | {s * 1e3:.3f} | {gbps:.1f} | {ratio} |")
    return "\n".join(lines)


def summary(p: Plan, seconds: dict[tuple[int, str], float]) -> dict[str, object]:
    names = list(p.optimizers)
    out: dict[str, object] = {"device": p.device.type}
    for n in p.sizes:
        fused = seconds[(n, names[0])]
        out[f"fused_adamw_ms_{label(n)}"] = round(fused * 1e3, 4)
        out[f"fused_adamw_gbps_{label(n)}"] = round(VALUES_MOVED * 4 * n / fused / 1e9, 2)
        for name in names[1:]:
            key = name.removeprefix("torch AdamW ").replace("-tensor", "")
            out[f"fused_adamw_vs_torch_{key}_{label(n)}"] = round(seconds[(n, name)] / fused, 3)
    return out




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run; BENCHMARKS.md untouched")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads on the CPU path (default 1: steady figures on a shared machine; "
        "0 keeps torch's default)",
    )
    args = parser.parse_args(argv)
    p = plan(args.quick)
    if p.device.type != "cuda":
        print("no CUDA device: measuring the CPU path", file=sys.stderr)
    if p.device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    seconds = {}
    for n in p.sizes:
        for name, s in step_seconds(p, n).items():
            seconds[(n, name)] = s
            print(f"{label(n)} {name}: {s * 1e3:.3f} ms", file=sys.stderr)
    command = " ".join(["python", "bench/kernels.py", *(sys.argv[1:] if argv is None else argv)])
    block = report(command, p, seconds)
    if args.quick:
        print(block)
    else:
        write_section("kernels", block, args.output)
    print(json.dumps(summary(p, seconds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
