"""GPU benchmarks: the fused AdamW kernel against torch's, and a hop on a GPU against a CPU.

Runs only where CUDA is: elsewhere it says so, leaves BENCHMARKS.md alone,
exits 0 and prints the JSON line with every figure null.

1. The optimizer sweep: one step over n float32 parameters (1e4 to 1e8, in 10
   and in 100 tensors), hoptune's fused AdamW and SGD (the CuPy kernels, once
   their self-tests passed) next to torch's own, ``fused=True`` and
   ``foreach=True``: median ms per step (CUDA events), GB/s (AdamW moves 28
   bytes per parameter: param, grad, exp_avg, exp_avg_sq read, param,
   exp_avg, exp_avg_sq written; SGD with momentum 20: param, grad, buffer
   read, param, buffer written) and that as a share of the device's copy
   bandwidth (a 1 GiB ``copy_``, read and write counted).
2. Trial-epochs per second of the demo rating model (``bench/fusion.py``'s
   pass over one shard): single hops one after another and cohorts of 8, 32
   and 64 fused trials on the GPU, against single hops on one CPU thread.
3. One trial of a ~1M-parameter rating model hopping between 2 real workers,
   on the GPU (its passes captured in CUDA graphs, the default, then eager)
   and then on the CPU, the same data: the medians of each part of a hop as
   ``bench/hop_overhead.py`` splits them (dispatch, load, train, save,
   recording).
4. The GPU's busy share during a pass of the demo rating model, a single hop's
   and a cohort of 32's: the share of the pass's wall time (from its start to
   the device's last work of it) that kernels or copies ran on the device,
   their intervals taken from torch's profiler (CUPTI's timestamps of every
   kernel, on the same clock as the pass's range); the host's own ranges
   (``record_function``), which the profiler also records on the device, are
   left out.
5. The same passes with their gather, forward and backward and their
   optimizer steps captured in CUDA graphs (``HOPTUNE_CUDA_GRAPHS=auto``), the
   forward and backward alone (``backward``) and eager (``off``), taking turns.
6. ``python -m pytest -q -m gpu tests``'s summary line and ``hoptune doctor``'s
   verdicts, run by this bench on the same machine, so the section records
   which checks passed beside the figures.

Usage: python bench/gpu.py [--hop-seconds 1] [--rows-per-shard N] [--epochs 3]
                           [--rounds 5] [--skip-checks]
Writes its section of BENCHMARKS.md (on a GPU only); the last line is one JSON
object: device, adamw_1e8_vs_torch_fused (torch fused ms over FusedAdamW ms:
above 1, ours is faster), adamw_1e8_bandwidth_share, the least such ratio over
the sweep from 1e5 parameters (``adamw_slowest_vs_torch_fused``, and SGD's),
gpu_hop_overhead_share, the single hops' and the cohort of 32's trial-epochs per
second over one CPU thread's, the GPU's busy share during a single hop's pass and a
cohort of 32's, captured over eager passes, the eager GPU hop's training and overhead
share, the pytest summary, doctor's verdicts, and the figures behind them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from hoptune.tuner import HopRecords

ROOT = Path(__file__).resolve().parent.parent
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)  # run as a script: the repository root first, as the others do

import torch  # noqa: E402

from bench._report import command, machine, write_section  # noqa: E402

SIZES = (10**4, 10**5, 10**6, 10**7, 10**8)
TENSORS = (10, 100)
REPEATS = {10**4: 200, 10**5: 200, 10**6: 100, 10**7: 50, 10**8: 20}
BYTES_PER_PARAMETER = 28
#: bytes an update must move per parameter (see the docstring)
BYTES = {"AdamW": 28, "SGD": 20}
SGD_HYPER = {"lr": 1e-2, "momentum": 0.9, "weight_decay": 1e-2}
COHORTS = (1, 8, 32, 64)
KEYS = ("device", "adamw_1e8_vs_torch_fused", "adamw_1e8_bandwidth_share",
        "gpu_hop_overhead_share", "adamw_1e8_ms", "adamw_1e8_gbps", "copy_gbps",
        "gpu_hop_train_s", "cpu_hop_train_s", "cpu_hop_overhead_share", "fused_adamw_path",
        "adamw_slowest_vs_torch_fused", "sgd_slowest_vs_torch_fused",
        "sgd_1e8_bandwidth_share", "single_hops_vs_cpu_thread", "cohort_32_vs_cpu_thread",
        "pytest_gpu", "doctor", "gpu_busy_single_pass", "gpu_busy_cohort_32_pass",
        "captured_over_eager_single", "captured_over_eager_cohort_32",
        "captured_over_backward_single", "captured_over_backward_cohort_32",
        "gpu_eager_hop_train_s", "gpu_eager_hop_overhead_share", "fuse_auto_demo")
#: HOPTUNE_CUDA_GRAPHS's modes a pass is timed in, side by side (``graph_rates``)
GRAPH_MODES = ("auto", "backward", "off")
#: the cohort sizes whose pass's busy share is measured (1: a single hop's pass)
BUSY_SIZES = (1, 32)


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


def optimizer_sweep(device: torch.device, sizes: tuple[int, ...] = SIZES,
                    tensors: tuple[int, ...] = TENSORS,
                    repeats: dict[int, int] | None = None) -> list[dict[str, object]]:
    """Median seconds of one step per optimizer (AdamW, SGD), tensor count, size and
    implementation: hoptune's (``ours``), torch's ``fused`` and ``foreach``."""
    from bench.kernels import HYPER, Plan, step_seconds
    from hoptune import kernels

    families = {
        "AdamW": {"ours": lambda p: kernels.make_optimizer("fused_adamw", p, **HYPER),
                  "torch fused": lambda p: torch.optim.AdamW(p, fused=True, **HYPER),
                  "torch foreach": lambda p: torch.optim.AdamW(p, foreach=True, **HYPER)},
        "SGD": {"ours": lambda p: kernels.make_optimizer("fused_sgd", p, **SGD_HYPER),
                "torch fused": lambda p: torch.optim.SGD(p, fused=True, **SGD_HYPER),
                "torch foreach": lambda p: torch.optim.SGD(p, foreach=True, **SGD_HYPER)},
    }
    rows: list[dict[str, object]] = []
    for family, optimizers in families.items():
        for count in tensors:
            plan = Plan(device, sizes, repeats or REPEATS, optimizers, tensors=count)
            for n in sizes:
                for by, seconds in step_seconds(plan, n).items():
                    rows.append({"optimizer": family, "tensors": count, "parameters": n,
                                 "by": by, "seconds": seconds})
                if device.type == "cuda":
                    torch.cuda.empty_cache()  # the next size's tensors need the memory
    return rows


def adamw_table(rows: list[dict[str, object]], tensors: int = 10
                ) -> dict[int, dict[str, float]]:
    """The sweep's AdamW rows in ``tensors`` tensors: per size, seconds by optimizer name."""
    names = {"ours": "FusedAdamW", "torch fused": "torch AdamW fused",
             "torch foreach": "torch AdamW foreach"}
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        if r["optimizer"] == "AdamW" and r["tensors"] == tensors:
            out.setdefault(int(r["parameters"]), {})[names[str(r["by"])]] = float(r["seconds"])
    return out


def slowest_ratio(rows: list[dict[str, object]], optimizer: str, smallest: int = 10**5
                  ) -> float:
    """The least of torch fused's seconds over ours, over the sweep's sizes from ``smallest``
    and its tensor counts (at least 1: ours no slower anywhere)."""
    seconds = {(r["tensors"], r["parameters"], r["by"]): r["seconds"] for r in rows
               if r["optimizer"] == optimizer and r["parameters"] >= smallest}
    return min(seconds[t, n, "torch fused"] / seconds[t, n, "ours"]
               for t, n, by in seconds if by == "ours")


def _demo(device: torch.device) -> tuple[dict, object, dict[str, torch.Tensor]]:
    """The demo rating model's spec (``bench/fusion.py``), its region and its data on
    ``device``."""
    from bench import fusion

    spec = fusion._models()["demo rating model"]
    region = fusion.RegionConfig.model_validate({"name": "bench", "data": "x.csv",
                                                 "batch_size": fusion.BATCH,
                                                 "shards": fusion.SHARDS, **spec["region"]})
    return spec, region, {k: v.to(device) for k, v in spec["data"].items()}


def fuse_auto(device: torch.device) -> int:
    """The cohort size ``fuse = "auto"`` picks for the demo rating model on ``device``."""
    from bench import fusion
    from hoptune.regions import fuse_limit

    spec, region, _ = _demo(torch.device("cpu"))
    (member,) = fusion._members(region, spec, 1, torch.device("cpu"))
    memory = (torch.cuda.get_device_properties(device).total_memory
              if device.type == "cuda" else None)
    return fuse_limit("auto", device=device, memory=memory,
                      parameters=sum(p.numel() for p in member.model.parameters()))


def cohort_rates(device: torch.device, sizes: tuple[int, ...] = COHORTS, rounds: int = 5
                 ) -> dict[str, object]:
    """Trial-epochs per second of the demo rating model on ``device``: K single hops one
    after another and one cohort of K (``bench/fusion.py``'s pass), and single hops on one
    CPU thread."""
    from bench import fusion

    spec = fusion._models()["demo rating model"]
    on_device = fusion.measure("demo rating model", spec, sizes, rounds, device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cpu = fusion.measure("demo rating model", spec, (1,), rounds, torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    return {"sizes": {k: {"single": fusion._epochs_per_second(k, r["single"]),
                          "cohort": fusion._epochs_per_second(k, r["cohort"])}
                      for k, r in on_device.items()},
            "cpu_thread": fusion._epochs_per_second(1, cpu[1]["single"]),
            "fuse_auto": fuse_auto(device)}


def busy_share(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """The share of [start, end] that the union of ``intervals`` covers (each clipped to it)."""
    if end <= start:
        return 0.0
    covered, reach = 0.0, start
    for a, b in sorted((max(a, start), min(b, end)) for a, b in intervals):
        if b <= reach:
            continue
        covered += b - max(a, reach)
        reach = b
    return covered / (end - start)


#: the profiler's range around one measured pass
PASS_RANGE = "hoptune.bench.pass"


def pass_busy(device: torch.device, sizes: tuple[int, ...] = BUSY_SIZES
              ) -> dict[int, float | str]:
    """Per cohort size K (1: a single hop's pass), the device's busy share during one pass of
    the demo rating model: the union of the kernels' and copies' intervals that torch's
    profiler records over the pass's range, which ends once the device has done its work.
    On a CPU no device work is recorded (0.0). A size whose measurement fails gets the
    error's one line instead, so the rest of the bench still runs."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    from bench import fusion

    spec, region, data = _demo(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    out: dict[int, float | str] = {}
    for k in sizes:
        try:
            members = fusion._members(region, spec, k, device)
            _one_pass(region, members, data, spec, epoch=0)  # warm-up: first calls, allocator
            fusion._sync(device)
            with profile(activities=activities) as prof:
                with record_function(PASS_RANGE):
                    _one_pass(region, members, data, spec, epoch=1)
                    fusion._sync(device)
            events = prof.events()
            (span,) = [e.time_range for e in events if e.name == PASS_RANGE
                       and e.device_type == DeviceType.CPU]
            work = device_work(events)
            if device.type == "cuda" and not work:
                raise RuntimeError("the profiler recorded no work on the device")
            out[k] = round(busy_share(work, span.start, span.end), 4)
            # where the host's time in the pass went, for the log (not the section): a pass
            # bound by its host is read from this table
            print(f"pass of K={k}: {(span.end - span.start) / 1e3:.1f} ms, the host's busiest "
                  "operations:\n" + prof.key_averages().table(
                      sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60),
                  file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 - one figure lost, not the GPU session
            out[k] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return out


@contextlib.contextmanager
def graphs_mode(mode: str) -> Iterator[None]:
    """``HOPTUNE_CUDA_GRAPHS`` set to ``mode`` in this process (and the workers it starts),
    put back after."""
    from hoptune.tasks.hop import GRAPHS_VARIABLE

    before = os.environ.get(GRAPHS_VARIABLE)
    os.environ[GRAPHS_VARIABLE] = mode
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(GRAPHS_VARIABLE, None)
        else:
            os.environ[GRAPHS_VARIABLE] = before


def graph_rates(device: torch.device, sizes: tuple[int, ...] = BUSY_SIZES, rounds: int = 3
                ) -> dict[int, dict[str, float]]:
    """Per cohort size K (1: a single hop's pass), trial-epochs per second of one pass of the
    demo rating model with its forward and backward and its optimizer steps captured in CUDA
    graphs (``HOPTUNE_CUDA_GRAPHS=auto``, the default), with its forward and backward only
    (``backward``: the optimizer steps from Python) and eager (``off``): side by side, each
    round in another order, medians over ``rounds``."""
    from bench import fusion

    spec, region, data = _demo(device)
    out: dict[int, dict[str, float]] = {}
    for k in sizes:
        members = fusion._members(region, spec, k, device)
        seconds: dict[str, list[float]] = {mode: [] for mode in GRAPH_MODES}
        epoch = 0
        for r in range(rounds + 1):  # round 0 warms every mode up
            for mode in GRAPH_MODES[r % 3:] + GRAPH_MODES[:r % 3]:
                with graphs_mode(mode):
                    fusion._sync(device)
                    started = time.perf_counter()
                    _one_pass(region, members, data, spec, epoch=epoch)
                    fusion._sync(device)
                if r:
                    seconds[mode].append(time.perf_counter() - started)
                epoch += 1
        out[k] = {name: fusion._epochs_per_second(k, statistics.median(seconds[mode]))
                  for name, mode in zip(("captured", "backward", "eager"), GRAPH_MODES,
                                        strict=True)}
    return out


def device_work(events) -> list[tuple[float, float]]:  # noqa: ANN001 - profiler events
    """The intervals of the kernels, copies and sets that ran on the device, from the
    profiler's events. A range named on the host (``record_function``, an optimizer's
    step) is also recorded on the device, as a user annotation spanning from its first
    kernel to its last, gaps included: counted, the pass's own range made every pass look
    99% busy on an H200 whose kernels ran 4.5 ms of a 228 ms pass."""
    from torch.autograd import DeviceType

    return [(e.time_range.start, e.time_range.end) for e in events
            if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]


def _one_pass(region, members, data, spec, *, epoch: int) -> None:  # noqa: ANN001
    """One pass over the shard: the single member's own, or the cohort's fused one."""
    from hoptune.tasks.hop import train_cohort_pass, train_pass

    if len(members) == 1:
        (m,) = members
        train_pass(region, m.model, m.optimizer, data, seed=m.seed, epoch=epoch, shard=0,
                   position=0, params=m.params)
    else:
        train_cohort_pass(region, members, data, epoch=epoch, shard=0, position=0,
                          meta=spec["meta"])


def gpu_checks(timeout: float = 1800) -> dict[str, object]:
    """``python -m pytest -q -m gpu tests``'s summary line and ``hoptune doctor``'s verdicts
    (its lines that start with ok, warn or fail), each run here, in the repository."""
    import subprocess

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, env=os.environ.copy())

    tests = run("-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rfE", "tests")
    doctor = run("-m", "hoptune.tasks.cli", "doctor")
    # the whole output in the bench's log: a failure's traceback is what the next fix needs
    print(f"pytest -m gpu (exit {tests.returncode}):\n{tests.stdout[-20000:]}{tests.stderr[-4000:]}"
          f"\nhoptune doctor (exit {doctor.returncode}):\n{doctor.stdout}{doctor.stderr}",
          file=sys.stderr, flush=True)
    return {"pytest_gpu": pytest_summary(tests.stdout) or f"no summary (exit {tests.returncode})",
            "pytest_exit": tests.returncode, "doctor": doctor_verdicts(doctor.stdout),
            "doctor_exit": doctor.returncode}


def pytest_summary(stdout: str) -> str | None:
    """pytest's last summary line (``3 passed, 1 skipped in 4.2s``), its rule stripped."""
    import re

    lines = [line.strip("= ") for line in stdout.splitlines()
             if re.search(r"\d+ (passed|failed|skipped|errors?|deselected)\b", line)]
    return lines[-1] if lines else None


def doctor_verdicts(stdout: str) -> list[str]:
    """``hoptune doctor``'s versions line and its verdicts (lines starting ok, warn or fail)."""
    return [line.strip() for line in stdout.splitlines()
            if line.split(" ", 1)[0] in ("ok", "warn", "fail") or line.startswith("versions")]


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
    parser.add_argument("--hop-seconds", type=float, default=1.0,
                        help="the GPU hop's training time its rows per shard are set for")
    parser.add_argument("--rows-per-shard", type=int, default=None,
                        help="rows per shard of the hop runs (default: calibrated on the GPU "
                             "for a hop of --hop-seconds)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the cohort passes")
    parser.add_argument("--skip-checks", action="store_true",
                        help="leave out `pytest -m gpu` and `hoptune doctor` (their keys null)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        return _no_gpu()

    home = Path(tempfile.mkdtemp(prefix="htgpu-"))
    os.environ["HOPTUNE_HOME"] = str(home)
    os.environ.setdefault("HOPTUNE_TORCH_THREADS", "1")
    for key in ("HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL", "HOPTUNE_BROKER_URL"):
        os.environ.pop(key, None)
    device = torch.device("cuda", torch.cuda.current_device())
    # the checks first: a run cut short by its machine's time still says what passed
    checks = None if args.skip_checks else gpu_checks()
    from hoptune.tasks.worker import EmbeddedRedis

    # one embedded broker for both clusters: this process's Celery app keeps pooled
    # connections to it, which a second server on the same socket would break
    broker = EmbeddedRedis(home).start()
    try:
        path = fused_adamw_path(device)
        copy_gbps = copy_bandwidth(device)
        sweep = optimizer_sweep(device)
        adamw = adamw_table(sweep)
        print(f"AdamW ({path}), copy {copy_gbps:.1f} GB/s: {json.dumps(adamw)}",
              file=sys.stderr, flush=True)
        cohorts = cohort_rates(device, rounds=args.rounds)
        print(f"cohorts: {json.dumps(cohorts)}", file=sys.stderr, flush=True)
        busy = pass_busy(device)
        print(f"busy share of a pass: {json.dumps(busy)}", file=sys.stderr, flush=True)
        graphs = graph_rates(device)
        print(f"captured against backward only and eager: {json.dumps(graphs)}",
              file=sys.stderr, flush=True)
        if args.rows_per_shard is None:  # a ~1 s hop on the GPU, as issue 34 measures it
            from bench.hop_overhead import _calibrate

            args.rows_per_shard = _calibrate(home, args.hop_seconds, args.epochs,
                                             str(device))[0]
        hops = {}
        # the GPU's hop with its passes captured (the default) and eager, then the CPU's
        for key, kind, mode in ((str(device), str(device), "auto"),
                                (f"{device} eager", str(device), "off"), ("cpu", "cpu", "auto")):
            with graphs_mode(mode):
                hops[key] = hop_parts(home, [kind, kind], args.rows_per_shard, args.epochs)
            print(f"hop on {key}: {json.dumps(hops[key])}", file=sys.stderr, flush=True)
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)
    figures = summary(device, path, copy_gbps, adamw, hops, sweep=sweep, cohorts=cohorts,
                      checks=checks, busy=busy, graphs=graphs)
    write_section("gpu", report(device, path, copy_gbps, adamw, hops, args, sweep=sweep,
                                cohorts=cohorts, checks=checks, busy=busy, graphs=graphs))
    print(json.dumps(figures))
    return 0


def summary(device: torch.device, path: str, copy_gbps: float,
            adamw: dict[int, dict[str, float]], hops: dict[str, dict[str, float]], *,
            sweep: list[dict[str, object]] | None = None,
            cohorts: dict[str, object] | None = None,
            checks: dict[str, object] | None = None,
            busy: dict[int, float | str] | None = None,
            graphs: dict[int, dict[str, float]] | None = None) -> dict[str, object]:
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
    eager = hops.get(f"{device} eager")
    if eager is not None:
        out.update(gpu_eager_hop_train_s=eager["train_s"],
                   gpu_eager_hop_overhead_share=eager["overhead_share"])
    if sweep:
        sgd = {r["by"]: r["seconds"] for r in sweep if r["optimizer"] == "SGD"
               and r["tensors"] == 10 and r["parameters"] == largest}
        smallest = min(10**5, largest)  # the sizes, or the largest of a smaller sweep
        out.update(adamw_slowest_vs_torch_fused=round(slowest_ratio(sweep, "AdamW", smallest),
                                                      3),
                   sgd_slowest_vs_torch_fused=round(slowest_ratio(sweep, "SGD", smallest), 3),
                   sgd_1e8_bandwidth_share=round(
                       BYTES["SGD"] * largest / sgd["ours"] / 1e9 / copy_gbps, 3))
    if cohorts:
        per = cohorts["sizes"]
        thread = cohorts["cpu_thread"]
        out.update(fuse_auto_demo=cohorts.get("fuse_auto"),
                   single_hops_vs_cpu_thread=round(per[min(per)]["single"] / thread, 2),
                   cohort_32_vs_cpu_thread=round(per[32]["cohort"] / thread, 2)
                   if 32 in per else None)
    if checks:
        out.update(pytest_gpu=checks["pytest_gpu"], doctor=checks["doctor"])
    if busy:
        out.update(gpu_busy_single_pass=busy.get(1), gpu_busy_cohort_32_pass=busy.get(32))
    if graphs:
        for base in ("eager", "backward"):
            out.update({f"captured_over_{base}_{'single' if k == 1 else f'cohort_{k}'}":
                        round(r["captured"] / r[base], 2) for k, r in graphs.items()
                        if base in r})
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
           args: argparse.Namespace, *, sweep: list[dict[str, object]] | None = None,
           cohorts: dict[str, object] | None = None,
           checks: dict[str, object] | None = None,
           busy: dict[int, float | str] | None = None,
           graphs: dict[int, dict[str, float]] | None = None) -> str:
    import cupy

    name = torch.cuda.get_device_name(device)
    driver = _driver_version()
    lines = [
        "## GPU (`bench/gpu.py`)", "",
        f"Machine: {machine()}; GPU {name} (driver {driver}, torch CUDA {torch.version.cuda}, "
        f"CuPy {cupy.__version__}). Command: `{command()}`.", "",
        f"`fused_adamw` on this GPU builds {path}. Copy bandwidth (1 GiB `copy_`, read and "
        f"write): {copy_gbps:.0f} GB/s.",
    ]
    lines += sweep_lines(sweep, copy_gbps) if sweep else adamw_lines(adamw, copy_gbps)
    if cohorts:
        lines += cohort_lines(cohorts)
    if busy:
        lines += ["", "The GPU's busy share during one pass of the demo rating model (kernels "
                  "and copies over the pass's wall time, from torch's profiler): " + "; ".join(
                      f"{'a single hop' if k == 1 else f'a cohort of {k}'} "
                      f"{v:.1%}" if isinstance(v, float) else f"{k}: not measured ({v})"
                      for k, v in busy.items()) + "."]
    if graphs:
        lines += ["", "One pass of the demo rating model with its gather, forward and backward "
                  "and its optimizer steps captured in CUDA graphs and replayed "
                  "(`HOPTUNE_CUDA_GRAPHS=auto`, the default), against the forward and backward "
                  "alone captured (`backward`: the optimizer steps from Python) and against "
                  "eager steps (`off`), side by side, medians of 3 turns each, in trial-epochs "
                  "per second: " + "; ".join(
                      f"{'a single hop' if k == 1 else f'a cohort of {k}'} {r['captured']:.2f} "
                      f"against {r['backward']:.2f} and {r['eager']:.2f} "
                      f"({r['captured'] / r['eager']:.1f}x eager)"
                      for k, r in graphs.items()) + "."]
    lines += [
        "", f"One trial of the ~1M-parameter rating model of `bench/hop_overhead.py` hopping "
        f"between 2 real workers (embedded Redis, SQLite, store folder), "
        f"{args.rows_per_shard:,} rows per shard (for a hop of about {args.hop_seconds:g} s on "
        f"the GPU), {args.epochs} epochs, on the GPU (its passes "
        "captured, the default, then eager: `HOPTUNE_CUDA_GRAPHS=off`) and then on the CPU "
        "(one torch thread per worker); medians over the hops, in seconds.", "",
    ]
    columns = [(k, label) for k, label in ((str(device), "GPU"),
                                           (f"{device} eager", "GPU, eager"), ("cpu", "CPU"))
               if k in hops]
    lines += ["| part of a hop | " + " | ".join(label for _, label in columns) + " |",
              "| --- |" + " ---: |" * len(columns)]
    for key, label in (("dispatch_s", "dispatch"), ("load_s", "checkpoint load"),
                       ("save_s", "checkpoint save"), ("record_s", "recording"),
                       ("overhead_s", "outside training, total"), ("train_s", "training"),
                       ("overhead_share", "overhead share")):
        fmt = "{:.1%}" if key == "overhead_share" else "{:.4f}"
        lines.append(f"| {label} | " + " | ".join(fmt.format(hops[k][key]) for k, _ in columns)
                     + " |")
    if checks:
        lines += ["", f"`python -m pytest -q -m gpu tests` in the same run: "
                  f"{checks['pytest_gpu']} (exit {checks['pytest_exit']}). `hoptune doctor` "
                  f"(exit {checks['doctor_exit']}):", ""]
        lines += [f"- {line}" for line in checks["doctor"]]
    return "\n".join(lines)


def adamw_lines(adamw: dict[int, dict[str, float]], copy_gbps: float) -> list[str]:
    lines = [
        "", "One AdamW step over n float32 parameters in 10 tensors, median of CUDA-event "
        "timings after warm-up; GB/s counts the 28 bytes per parameter an update must move.",
        "", "| parameters | optimizer | median ms/step | GB/s | share of copy bandwidth |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for n, row in adamw.items():
        for optimizer, seconds in row.items():
            gbps = BYTES_PER_PARAMETER * n / seconds / 1e9
            lines.append(f"| {_label(n)} | {optimizer} | {seconds * 1e3:.3f} | {gbps:.0f} | "
                         f"{gbps / copy_gbps:.0%} |")
    return lines


def sweep_lines(sweep: list[dict[str, object]], copy_gbps: float) -> list[str]:
    lines = [
        "", "One optimizer step over n float32 parameters, median of CUDA-event timings after "
        "warm-up (AdamW: lr 1e-3, weight decay 1e-2; SGD: lr 1e-2, momentum 0.9, weight "
        "decay 1e-2). GB/s and its share of the copy bandwidth are hoptune's, counting the "
        "bytes an update must move (AdamW 28 a parameter, SGD with momentum 20); the last "
        "column is torch fused's time over hoptune's (at least 1: hoptune's no slower).", "",
        "| optimizer | tensors | parameters | hoptune ms | torch fused ms | torch foreach ms "
        "| hoptune GB/s | share of copy | torch fused / hoptune |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    table: dict[tuple[str, int, int], dict[str, float]] = {}
    for r in sweep:
        key = (str(r["optimizer"]), int(r["tensors"]), int(r["parameters"]))
        table.setdefault(key, {})[str(r["by"])] = float(r["seconds"])
    for (optimizer, tensors, n), t in table.items():
        gbps = BYTES[optimizer] * n / t["ours"] / 1e9
        lines.append(f"| {optimizer} | {tensors} | {_label(n)} | {t['ours'] * 1e3:.3f} | "
                     f"{t['torch fused'] * 1e3:.3f} | {t['torch foreach'] * 1e3:.3f} | "
                     f"{gbps:.0f} | {gbps / copy_gbps:.0%} | "
                     f"{t['torch fused'] / t['ours']:.2f} |")
    return lines


def cohort_lines(cohorts: dict[str, object]) -> list[str]:
    thread = cohorts["cpu_thread"]
    lines = [
        "", "Trial-epochs per second of the demo rating model (`bench/fusion.py`'s pass over "
        "one shard: half a trial-epoch with 2 shards), median over the rounds: K single hops "
        f"one after another and one cohort of K fused trials on the GPU; single hops on one "
        f"CPU thread: {thread:.2f} trial-epochs/s.", "",
        "| K | single hops on the GPU | cohort on the GPU | single hops over one CPU thread "
        "| cohort over one CPU thread |", "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for k, r in cohorts["sizes"].items():
        lines.append(f"| {k} | {r['single']:.2f} | {r['cohort']:.2f} | "
                     f"{r['single'] / thread:.1f}x | {r['cohort'] / thread:.1f}x |")
    if cohorts.get("fuse_auto") is not None:
        lines += ["", f"`fuse = \"auto\"` fuses cohorts of up to {cohorts['fuse_auto']} trials "
                  "of this model on this device (`regions.fuse_limit`)."]
    return lines


if __name__ == "__main__":
    sys.exit(main())
