"""Which device a worker trains on: the one place in ``tasks`` that names CUDA.

``plan_worker_device`` runs in ``hoptune worker`` before Celery starts (it
counts GPUs through NVML, which does not initialise CUDA, so the prefork pool
can still fork); ``worker_device`` runs once in the worker process that
trains, and sets that device up for reproducible training. ``to_device`` moves
a shard there once, through pinned memory on a GPU.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hoptune.core import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEVICE_VARIABLE",
    "WorkerDevicePlan",
    "describe_device",
    "gpu_info",
    "gpus",
    "local_devices",
    "parse_device",
    "plan_worker_device",
    "to_device",
    "train_deterministically",
    "visible_gpus",
    "worker_device",
    "worker_environment",
]

#: The environment variable that hands ``hoptune worker``'s device to its training process.
DEVICE_VARIABLE = "HOPTUNE_DEVICE"
_SPEC = re.compile(r"(cpu|cuda)(?::(\d+))?")
# cuBLAS is deterministic only with a fixed workspace: one of these two configurations.
_CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")


def visible_gpus() -> int:
    """How many CUDA devices this process may use, counted without initialising CUDA.

    A Linux host without the NVIDIA driver has none, which is known without
    importing torch: a command that only starts local workers (``hoptune tune
    --local-workers``) does not pay torch's import before spawning them.
    """
    if sys.platform.startswith("linux") and not _nvidia_driver():
        return 0
    import torch

    return torch.cuda.device_count()


def _nvidia_driver(root: Path = Path("/")) -> bool:
    """Whether the NVIDIA kernel driver is loaded or its device files are present."""
    return (root / "proc/driver/nvidia").exists() or any((root / "dev").glob("nvidia[0-9]*"))


def parse_device(text: str, *, gpus: int, option: str = "--device") -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N`` as a device of this host; ConfigError naming ``option``.

    ``cuda`` is the first visible GPU. A GPU that is not visible is refused
    here, with how many there are, rather than at the first hop.
    """
    import torch

    match = _SPEC.fullmatch(text.strip().lower())
    if match is None or (match.group(1) == "cpu" and match.group(2) is not None):
        raise ConfigError(f"{option}: expected cpu, cuda or cuda:N, got {text!r}")
    if match.group(1) == "cpu":
        return torch.device("cpu")
    index = int(match.group(2) or 0)
    if index >= gpus:
        raise ConfigError(f"{option} {text}: {_no_such_gpu(index, gpus)}")
    return torch.device("cuda", index)


def _no_such_gpu(index: int, gpus: int) -> str:
    import torch

    if gpus == 0:
        build = "" if torch.version.cuda else f" (torch {torch.__version__} is built without CUDA)"
        return f"no CUDA device is visible{build}"
    return f"no GPU {index} (this host has {gpus} visible: 0..{gpus - 1})"


@dataclass(frozen=True)
class WorkerDevicePlan:
    """What ``hoptune worker`` hands its training process: the device, and GPU visibility.

    ``visible`` is the ``CUDA_VISIBLE_DEVICES`` value to set (None: leave it).
    """

    device: str
    visible: str | None = None

    def environ(self) -> dict[str, str]:
        env = {DEVICE_VARIABLE: self.device}
        if self.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible
        return env


def plan_worker_device(device: str | None, gpu: int | None, *, gpus: int,
                       visible: str | None = None) -> WorkerDevicePlan:
    """The device of a worker started with ``--device`` and/or ``--gpu``, on a host with ``gpus``.

    ``--device`` decides when given; ``--gpu N`` trains on the N-th visible GPU
    and shows the worker only that GPU (as its ``cuda:0``), so nothing of it
    lands on the others; with neither, the first visible GPU, or the CPU where
    there is none. ``visible`` is the current ``CUDA_VISIBLE_DEVICES``, through
    which N is counted.
    """
    if device is not None:
        return WorkerDevicePlan(str(parse_device(device, gpus=gpus)))
    if gpu is not None:
        if gpu < 0 or gpu >= gpus:
            raise ConfigError(f"--gpu {gpu}: {_no_such_gpu(gpu, gpus)}")
        listed = [v.strip() for v in (visible or "").split(",") if v.strip()]
        return WorkerDevicePlan("cuda:0", visible=listed[gpu] if gpu < len(listed) else str(gpu))
    return WorkerDevicePlan("cuda:0" if gpus else "cpu")


def worker_environment(device: str | None, gpu: int | None, kernels: str | None
                       ) -> dict[str, str]:
    """The variables ``hoptune worker --device/--gpu/--kernels`` hands its training process.

    Checked here, before Celery starts, so a bad option is one line and exit
    status 2 rather than a training process that fails at every start.
    """
    from hoptune.kernels import MODE_VARIABLE, check_mode

    plan = plan_worker_device(device, gpu, gpus=visible_gpus(),
                              visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    env = plan.environ()
    if kernels is None:
        kernels = check_mode(os.environ.get(MODE_VARIABLE) or "auto", MODE_VARIABLE)
    else:
        env[MODE_VARIABLE] = kernels
    if kernels == "cupy" and plan.device == "cpu":
        raise ConfigError("--kernels cupy: this worker trains on the CPU, where the CuPy "
                          "kernels cannot run (give it a GPU, or use auto)")
    return env


def local_devices(workers: int, gpus: int) -> list[str]:
    """The devices of ``workers`` local workers: the visible GPUs in turn, or the CPU."""
    return [f"cuda:{i % gpus}" if gpus else "cpu" for i in range(workers)]


def worker_device(environ: Mapping[str, str] | None = None) -> torch.device:
    """The device this worker process trains on, set up; called once per worker process.

    Reads ``HOPTUNE_DEVICE`` (default: the first visible GPU, else the CPU). On
    a GPU it makes that GPU current and asks for deterministic algorithms (and
    the cuBLAS workspace they need), so a hop replays bitwise on the same kind of
    device; replays across device kinds (CPU vs GPU, or two GPU models) are
    close but not bitwise, since the kernels round differently.
    """
    env = os.environ if environ is None else environ
    gpus = visible_gpus()
    spec = env.get(DEVICE_VARIABLE) or ("cuda" if gpus else "cpu")
    device = parse_device(spec, gpus=gpus, option=DEVICE_VARIABLE)
    return train_deterministically(device)


def train_deterministically(device: torch.device) -> torch.device:
    """Set this process up to train on ``device`` so that a hop replays bitwise there.

    On a GPU: that GPU made current, deterministic algorithms asked for (and the
    cuBLAS workspace they need), cuDNN's autotuner off. Every process that trains
    on a GPU goes through here: a worker through ``worker_device``, any other
    through its ``Runtime`` (a replay in a notebook, an inline study in a test),
    so a trial trained in one and replayed in the other agrees bit for bit.
    Nothing changes on the CPU.
    """
    import torch

    if device.type == "cuda":
        if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in _CUBLAS_DETERMINISTIC:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = _CUBLAS_DETERMINISTIC[0]
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        torch.cuda.set_device(device)
    return device


def gpus() -> list[torch.device]:
    """Every visible GPU, as a device."""
    import torch

    return [torch.device("cuda", i) for i in range(visible_gpus())]


def gpu_info(device: torch.device) -> dict[str, object]:
    """A GPU's index, name, memory (GiB) and compute capability, as torch sees them."""
    import torch

    props = torch.cuda.get_device_properties(device)
    return {"index": device.index, "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "compute_capability": f"{props.major}.{props.minor}"}


def describe_device(device: torch.device) -> str:
    """``cpu``, or ``cuda:0 (NVIDIA H100 80GB HBM3)``: for logs and worker info."""
    import torch

    if device.type != "cuda":
        return str(device)
    return f"{device} ({torch.cuda.get_device_name(device)})"


def to_device(data: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """``data``'s tensors on ``device``, copied once (from pinned memory to a GPU, asynchronously).

    The copies are queued on the current stream, so training on that stream
    sees them complete; the pinned buffers are kept by torch until they have.
    """
    if device.type != "cuda":
        return {name: tensor.to(device) for name, tensor in data.items()}
    return {name: tensor.pin_memory().to(device, non_blocking=True)
            for name, tensor in data.items()}
