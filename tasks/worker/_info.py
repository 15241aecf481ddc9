"""What each worker trains on, and which kernel path it runs: its info, for status and Flower.

A worker's training process knows its device and its kernels' self-test
results; Celery's remote control runs in the worker's main process. So the
training process writes its info to a small file under
``HOPTUNE_HOME/workers/NODE.json`` (when it starts, and again at the end of each
hop delivery: its count of hops, a kernel's path that changed), and the main process
adds that file to its ``stats`` reply (a Celery bootstep's ``info``). ``hoptune
status`` and Flower (worker page, "stats") read it through
``app.control.inspect().stats()``, from any host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from celery import Celery, bootsteps

from hoptune.core import Settings

__all__ = ["WorkerInfoStep", "describe_workers", "info_file", "kernels_summary",
           "answering_workers", "publish_worker_info", "worker_info"]

_published: dict[str, str] = {}


def info_file(settings: Settings, node: str) -> Path:
    return settings.home / "workers" / f"{node}.json"


_SHORT = {"kernel": "CuPy kernel", "reference": "torch reference", "torch": "torch fused"}


def kernels_summary(report: dict[str, Any], paths: list[dict[str, str]]) -> str:
    """One line: the kernels setting, the path each kernel user took, and every fallback."""
    taken = ", ".join(sorted({f"{p['owner']} {_SHORT.get(p['path'], p['path'])}"
                              for p in paths})) or "no kernel used yet"
    line = f"{report.get('mode', '?')}: {taken}"
    fallbacks = report.get("fallbacks") or []
    if fallbacks:
        line += "; not trusted: " + ", ".join(f"{f['kernel']} on {f['device']} ({f['reason']})"
                                              for f in fallbacks)
    return line


def worker_info(rt: Any) -> dict[str, Any]:
    """This training process's info: device, kernels setting, self-tests, fallbacks, shards,
    and the hops it has trained."""
    from hoptune import kernels  # a training process's: torch is imported there anyway
    from hoptune.tasks.worker._device import describe_device

    report = kernels.kernel_report()
    return {
        "node": rt.worker,
        "pid": os.getpid(),
        "device": str(rt.device),
        "device_name": describe_device(rt.device),
        "shards": os.environ.get("HOPTUNE_WORKER_SHARDS", ""),
        "kernels": report["mode"],
        "kernel_summary": kernels_summary(report, kernels.paths_taken()),
        "fallbacks": report["fallbacks"],
        "self_tests": report["self_tests"],
        "hops_trained": rt.hops_trained,
    }


def publish_worker_info(rt: Any) -> dict[str, Any]:
    """Write this process's info to its file when it changed; returns the info."""
    info = worker_info(rt)
    text = json.dumps(info, sort_keys=True)
    if _published.get(rt.worker) != text:
        path = info_file(rt.settings, rt.worker)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
        _published[rt.worker] = text
    return info


class WorkerInfoStep(bootsteps.StartStopStep):
    """Adds the training process's info to the worker's ``stats`` (key ``hoptune``).

    Also names the training process after the Celery node, so its file is found.
    """

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.node = worker.hostname
        os.environ.setdefault("HOPTUNE_WORKER_NAME", self.node)

    def info(self, worker: Any) -> dict[str, Any]:
        node = os.environ.get("HOPTUNE_WORKER_NAME") or self.node
        try:
            return {"hoptune": json.loads(info_file(Settings.from_env(), node).read_text())}
        except (OSError, ValueError):
            return {"hoptune": {"node": node, "device": os.environ.get("HOPTUNE_DEVICE"),
                                "kernel_summary": "training process not started yet"}}


def describe_workers(app: Celery, timeout: float = 1.0) -> list[dict[str, Any]]:
    """One row per worker that answers: node, device, kernels, shards, and the hops its
    training process has trained (each member's of a cohort; the hops it ran on without a
    message too, which Celery's count of tasks leaves out)."""
    stats = app.control.inspect(timeout=timeout).stats() or {}
    rows = []
    for node, reply in sorted(stats.items()):
        info = reply.get("hoptune") or {}
        rows.append({"worker": node, "device": info.get("device_name") or info.get("device"),
                     "kernels": info.get("kernel_summary"), "shards": info.get("shards"),
                     "hops": info.get("hops_trained", 0)})
    return rows


def answering_workers(settings: Settings, app: Celery) -> tuple[list[dict[str, Any]], str]:
    """``describe_workers`` where a broker answers; else no rows and why, for ``hoptune status``."""
    from hoptune.tasks.worker._broker import ping, socket_url

    if not ping(settings.broker_url or socket_url(settings.embedded_socket)):
        return [], "no broker answers (start `hoptune up`, or set HOPTUNE_BROKER_URL)"
    rows = describe_workers(app)
    return rows, "" if rows else "none answers"
