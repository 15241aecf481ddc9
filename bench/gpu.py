"""GPU benchmarks: the fused AdamW kernel against torch's, and a hop on a GPU against a CPU.

Runs only where CUDA is: elsewhere it says so, leaves BENCHMARKS.md alone,
exits 0 and prints the JSON line with every figure null.

1. One AdamW step over n float32 parameters (1e5 to 1e8, in 10 tensors):
   FusedAdamW (the CuPy kernel, once its self-test passed) next to
   ``torch.optim.AdamW(fused=True)`` and ``(foreach=True)``: median ms per
   step (CUDA events), GB/s (28 bytes per parameter: param, grad, exp_avg,
   exp_avg_sq read, param, exp_avg, exp_avg_sq written) and that as a share of
   the device's copy bandwidth (a 1 GiB ``copy_``, read and write counted).
2. One trial of a ~1M-parameter rating model hopping between 2 real workers,
   on the GPU and then on the CPU, the same data: the medians of each part of
   a hop as ``bench/hop_overhead.py`` splits them (dispatch, load, train,
   save, recording).

Usage: python bench/gpu.py [--rows-per-shard 200000] [--epochs 3]
Writes its section of BENCHMARKS.md (on a GPU only); the last line is one JSON
object: device, adamw_1e8_vs_torch_fused (torch fused ms over FusedAdamW ms:
above 1, ours is faster), adamw_1e8_bandwidth_share, gpu_hop_overhead_share,
and the figures behind them.
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

ROOT = Path(__file__).resolve().parent.parent
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)  # run as a script: the repository root first, as the others do

import torch  # noqa: E402

from bench._report import command, machine, write_section  # noqa: E402

SIZES = (10**5, 10**6, 10**7, 10**8)
REPEATS = {10**5: 200, 10**6: 100, 10**7: 50, 10**8: 20}
BYTES_PER_PARAMETER = 28
KEYS = ("device", "adamw_1e8_vs_torch_fused", "adamw_1e8_bandwidth_share",
        "gpu_hop_overhead_share", "adamw_1e8_ms", "adamw_1e8_gbps", "copy_gbps",
        "gpu_hop_train_s", "cpu_hop_train_s", "cpu_hop_overhead_share", "fused_adamw_path")


def copy_bandwidth(device: torch.device, size: int = 2**28, repeats: int = 10) -> float:
    """GB/s of ``dst.copy_(src)`` on device, reads and writes counted (float32, 1 GiB)."""
    from bench.kernels import _time_step

    src = torch.ones(size, device=device)
    dst = torch.empty_like(src)

    class Copy:
        def step(self) -> None:
            dst.copy_(src)

    Copy().step()
    seconds = statistics.median(_time_step(Copy(), device) for _ in range(repeats))
    return 2 * 4 * size / seconds / 1e9


def adamw_seconds(device: torch.device, sizes: tuple[int, ...] = SIZES,
                  repeats: dict[int, int] | None = None) -> dict[int, dict[str, float]]:
    """Median seconds of one step per size and optimizer (FusedAdamW, torch fused, foreach)."""
    from bench.kernels import HYPER, Plan, step_seconds
    from hoptune import kernels

    optimizers = {
        "FusedAdamW": lambda p: kernels.make_optimizer("fused_adamw", p, **HYPER),
        "torch AdamW fused": lambda p: torch.optim.AdamW(p, fused=True, **HYPER),
        "torch AdamW foreach": lambda p: torch.optim.AdamW(p, foreach=True, **HYPER),
    }
    plan = Plan(device, sizes, repeats or REPEATS, optimizers)
    out = {}
    for n in sizes:
        out[n] = step_seconds(plan, n)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the next size's tensors need the memory
    return out


def fused_adamw_path(device: torch.device) -> str:
    """Which class make_optimizer("fused_adamw") builds on device, and why (self-test)."""
    from hoptune import kernels

    cls = kernels.optimizer_class("fused_adamw", device, torch.float32)
    taken = [p for p in kernels.paths_taken() if p["owner"] == "FusedAdamW"]
    reason = f": {taken[-1]['reason']}" if taken else ""
    return f"{cls.__name__}{reason}"


def hop_parts(home: Path, devices: list[str], rows_per_shard: int, epochs: int
              ) -> dict[str, float]:
    """One trial of the bench rating model hopping on 2 workers on ``devices``: hop medians."""
    from bench.hop_overhead import _figures, _parts, _write
    from hoptune.core import Settings, Store
    from hoptune.regions import ingest, load_config
    from hoptune.tasks import app
    from hoptune.tasks.cli import follow, local_cluster, start_studies
    from hoptune.tasks.study import create_study
    from hoptune.tasks.worker import Runtime

    region = load_config(_write(home, int(rows_per_shard * 2 / 0.95), epochs)).region("bench")
    settings = Settings.from_env()
    manifest = ingest(region, Store(settings.store_url)).manifest
    rt = Runtime(settings, worker="bench")
    try:
        with local_cluster(settings, {"bench": 2}, 2, devices=devices):
            study = create_study(rt, region, manifest=manifest, configs=[dict(region.params)])
            started = time.monotonic()
            start_studies(app, [study])
            follow(rt, app, [study], progress=False, timeout=3600)
            wall = time.monotonic() - started
        figures = _figures([{"parts": _parts(HopRecords(rt.db).all(study_id=study)),
                             "wall_seconds": round(wall, 2)}])
    finally:
        rt.db.dispose()
    return {**figures, "wall_seconds": round(wall, 2)}


def _no_gpu() -> int:
    print("bench/gpu.py: no CUDA device here (torch.cuda.is_available() is False): nothing "
          "measured, BENCHMARKS.md left alone", file=sys.stderr)
    print(json.dumps(dict.fromkeys(KEYS)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-shard", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        return _no_gpu()

    home = Path(tempfile.mkdtemp(prefix="htgpu-"))
    os.environ["HOPTUNE_HOME"] = str(home)
    os.environ.setdefault("HOPTUNE_TORCH_THREADS", "1")
    for key in ("HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL", "HOPTUNE_BROKER_URL"):
        os.environ.pop(key, None)
    device = torch.device("cuda", torch.cuda.current_device())
    from hoptune.tasks.worker import EmbeddedRedis

    # one embedded broker for both clusters: this process's Celery app keeps pooled
    # connections to it, which a second server on the same socket would break
    broker = EmbeddedRedis(home).start()
    try:
        path = fused_adamw_path(device)
        copy_gbps = copy_bandwidth(device)
        adamw = adamw_seconds(device)
        print(f"AdamW ({path}), copy {copy_gbps:.1f} GB/s: {json.dumps(adamw)}",
              file=sys.stderr, flush=True)
        hops = {}
        for kind in (str(device), "cpu"):
            hops[kind] = hop_parts(home, [kind, kind], args.rows_per_shard, args.epochs)
            print(f"hop on {kind}: {json.dumps(hops[kind])}", file=sys.stderr, flush=True)
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)
    figures = summary(device, path, copy_gbps, adamw, hops)
    write_section("gpu", report(device, path, copy_gbps, adamw, hops, args))
    print(json.dumps(figures))
    return 0


def summary(device: torch.device, path: str, copy_gbps: float,
            adamw: dict[int, dict[str, float]], hops: dict[str, dict[str, float]]
            ) -> dict[str, object]:
    largest = max(adamw)
    ours, fused = adamw[largest]["FusedAdamW"], adamw[largest]["torch AdamW fused"]
    gbps = BYTES_PER_PARAMETER * largest / ours / 1e9
    gpu, cpu = hops[str(device)], hops["cpu"]
    out = dict.fromkeys(KEYS)
    out.update(device=torch.cuda.get_device_name(device) if device.type == "cuda"
               else str(device),
               adamw_1e8_vs_torch_fused=round(fused / ours, 3),
               adamw_1e8_bandwidth_share=round(gbps / copy_gbps, 3),
               gpu_hop_overhead_share=gpu["overhead_share"],
               adamw_1e8_ms=round(ours * 1e3, 4), adamw_1e8_gbps=round(gbps, 1),
               copy_gbps=round(copy_gbps, 1), gpu_hop_train_s=gpu["train_s"],
               cpu_hop_train_s=cpu["train_s"], cpu_hop_overhead_share=cpu["overhead_share"],
               fused_adamw_path=path)
    return out


def _driver_version() -> str:
    """The NVIDIA driver's version, as nvidia-smi gives it (else CUDA's driver API version)."""
    import subprocess

    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    import cupy

    number = cupy.cuda.runtime.driverGetVersion()
    return f"CUDA driver API {number // 1000}.{number % 1000 // 10}"


def _label(n: int) -> str:
    return f"1e{len(str(n)) - 1}"


def report(device: torch.device, path: str, copy_gbps: float,
           adamw: dict[int, dict[str, float]], hops: dict[str, dict[str, float]],
           args: argparse.Namespace) -> str:
    import cupy

    name = torch.cuda.get_device_name(device)
    driver = _driver_version()
    lines = [
        "## GPU (`bench/gpu.py`)", "",
        f"Machine: {machine()}; GPU {name} (driver {driver}, torch CUDA {torch.version.cuda}, "
        f"CuPy {cupy.__version__}). Command: `{command()}`.", "",
        f"`fused_adamw` on this GPU builds {path}. Copy bandwidth (1 GiB `copy_`, read and "
        f"write): {copy_gbps:.0f} GB/s.", "",
        "One AdamW step over n float32 parameters in 10 tensors, median of CUDA-event timings "
        "after warm-up; GB/s counts the 28 bytes per parameter an update must move.", "",
        "| parameters | optimizer | median ms/step | GB/s | share of copy bandwidth |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for n, row in adamw.items():
        for optimizer, seconds in row.items():
            gbps = BYTES_PER_PARAMETER * n / seconds / 1e9
            lines.append(f"| {_label(n)} | {optimizer} | {seconds * 1e3:.3f} | {gbps:.0f} | "
                         f"{gbps / copy_gbps:.0%} |")
    lines += [
        "", f"One trial of the ~1M-parameter rating model of `bench/hop_overhead.py` hopping "
        f"between 2 real workers (embedded Redis, SQLite, store folder), "
        f"{args.rows_per_shard:,} rows per shard, {args.epochs} epochs, on the GPU and then on "
        "the CPU (one torch thread per worker); medians over the hops, in seconds.", "",
        "| part of a hop | GPU | CPU |", "| --- | ---: | ---: |",
    ]
    gpu, cpu = hops[str(device)], hops["cpu"]
    for key, label in (("dispatch_s", "dispatch"), ("load_s", "checkpoint load"),
                       ("save_s", "checkpoint save"), ("record_s", "recording"),
                       ("overhead_s", "outside training, total"), ("train_s", "training"),
                       ("overhead_share", "overhead share")):
        fmt = "{:.1%}" if key == "overhead_share" else "{:.4f}"
        lines.append(f"| {label} | {fmt.format(gpu[key])} | {fmt.format(cpu[key])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
