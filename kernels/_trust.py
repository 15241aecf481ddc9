"""Whether a kernel is trusted on a CUDA device: its self-test, the kernels setting, the cache.

The first time a process is about to run a CuPy kernel on a CUDA device, the
kernel's self-test runs there (``_selftest``) unless its result is cached: per
(kernel source hash, device name, CuPy version), in the worker's cache folder,
so a restarted worker does not repeat it. A kernel that fails is not trusted
on that device for the rest of the process: one WARNING on the "kernels"
logger names the kernel, the device, the CuPy and CUDA versions and the
largest error, and the torch path runs instead.

The kernels setting (``HOPTUNE_KERNELS``, ``hoptune worker --kernels``):
``auto`` (the CuPy kernels where their self-test passes), ``cupy`` (a kernel
that fails or cannot run is an error, ``KernelSelfTestError``), ``torch`` (the
torch path only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hoptune.core import ConfigError, HoptuneError
from hoptune.kernels import _cupy
from hoptune.kernels._selftest import SelfTestResult, run_self_test
from hoptune.kernels._source import KernelSpec, cuda_translation_unit

__all__ = [
    "MODES",
    "MODE_VARIABLE",
    "KernelSelfTestError",
    "Trust",
    "check_mode",
    "configure",
    "kernel_report",
    "mode",
    "require_kernels",
    "reset",
    "self_test",
    "trust",
]

logger = logging.getLogger("kernels")

MODES = ("auto", "cupy", "torch")
MODE_VARIABLE = "HOPTUNE_KERNELS"

Runner = Callable[[KernelSpec, torch.device], SelfTestResult]
Identify = Callable[[torch.device], dict[str, str]]


class KernelSelfTestError(HoptuneError):
    """With kernels = "cupy": a CuPy kernel failed its self-test on a device, or cannot run."""


@dataclass(frozen=True)
class Trust:
    """Whether the CuPy kernel runs on a device, and why (for logs and the worker's info)."""

    kernel: bool
    reason: str


def check_mode(value: str, where: str) -> str:
    """value if it is a kernels setting; ConfigError naming ``where`` otherwise."""
    if value not in MODES:
        raise ConfigError(f"{where}: expected one of {', '.join(MODES)}, got {value!r}")
    return value


class _State:
    """The process's settings and what it learnt; guarded by ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.mode: str | None = None
        self.cache_dir: Path | None = None
        self.runner: Runner = _default_runner
        self.identify: Identify = _cupy.identity
        self.results: dict[tuple[str, str], SelfTestResult] = {}
        self.trust: dict[tuple[str, str], Trust] = {}


def _default_runner(spec: KernelSpec, device: torch.device) -> SelfTestResult:
    return run_self_test(spec, device)


_state = _State()


def configure(*, mode: str | None = None, cache_dir: Path | None = None,
              runner: Runner | None = None, identify: Identify | None = None) -> None:
    """Set the kernels setting and the self-test cache folder; forget what was decided.

    ``mode`` None reads ``HOPTUNE_KERNELS``; ``cache_dir`` None caches nothing
    on disk. ``runner`` and ``identify`` (the self-test and what its cache key
    reads of a device) replace the real ones, for tests; None keeps the current.
    """
    with _state.lock:
        _state.mode = check_mode(mode, "--kernels") if mode is not None else None
        _state.cache_dir = cache_dir
        _state.runner = runner or _state.runner
        _state.identify = identify or _state.identify
        _state.results.clear()
        _state.trust.clear()


def reset() -> None:
    """Back to the defaults of a fresh process, the real self-test included."""
    configure(runner=_default_runner, identify=_cupy.identity)


def mode() -> str:
    """The kernels setting in force: as configured, else ``HOPTUNE_KERNELS``, else auto."""
    if _state.mode is not None:
        return _state.mode
    return check_mode(os.environ.get(MODE_VARIABLE) or "auto", MODE_VARIABLE)


def _versions(identity: dict[str, str]) -> str:
    return f"CuPy {identity.get('cupy', '?')}, CUDA {identity.get('cuda', '?')}"


def require_kernels(spec: KernelSpec, device: torch.device, reason: str) -> None:
    """With kernels = cupy, refuse a CUDA device where spec cannot run at all (no CuPy...)."""
    if mode() == "cupy":
        raise KernelSelfTestError(f"kernels = cupy, but {spec.name} cannot run on {device}: "
                                  f"{reason}")


def trust(spec: KernelSpec, device: torch.device) -> Trust:
    """Whether spec's CuPy kernel runs on device (CUDA); runs its self-test on first use."""
    key = (spec.name, str(device))
    with _state.lock:
        known = _state.trust.get(key)
        if known is not None:
            return known
        current = mode()
        if current == "torch":
            decided = Trust(False, f"kernels = torch ({MODE_VARIABLE} or --kernels)")
        else:
            result = self_test(spec, device)
            if result.passed:
                decided = Trust(True, f"self-test passed (largest error {result.max_error:.3g})")
            else:
                message = (f"{spec.name} on {device} ({result.versions.get('device_name', '?')}, "
                           f"{_versions(result.versions)}) failed its self-test: {result.reason}")
                if current == "cupy":
                    raise KernelSelfTestError(f"{message}; kernels = cupy makes this an error")
                logger.warning("%s; this process uses the torch path for it", message)
                decided = Trust(False, f"self-test failed: {result.reason}")
        _state.trust[key] = decided
        return decided


def self_test(spec: KernelSpec, device: torch.device, *, fresh: bool = False) -> SelfTestResult:
    """spec's self-test result on device: remembered, cached on disk, or run now.

    ``fresh`` runs it again (and caches the new result), as ``hoptune doctor`` does.
    """
    key = (spec.name, str(device))
    with _state.lock:
        if not fresh and key in _state.results:
            return _state.results[key]
        identity = _state.identify(device)
        path = _cache_path(spec, identity)
        result = None if fresh else _read(path)
        if result is None:
            result = _state.runner(spec, device)
            result = SelfTestResult(**{**result.to_json(), "versions": identity})
            _write(path, result)
        else:  # a GPU of the same model, perhaps another of this host's
            result = SelfTestResult(**{**result.to_json(), "device": str(device)})
        _state.results[key] = result
        return result


def _cache_path(spec: KernelSpec, identity: dict[str, str]) -> Path | None:
    if _state.cache_dir is None:
        return None
    source = cuda_translation_unit([spec]) + " ".join(_cupy.NVRTC_OPTIONS)
    key = "\n".join([source, identity.get("device_name", ""), identity.get("cupy", "")])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return _state.cache_dir / "kernels" / f"selftest-{spec.name}-{digest}.json"


def _read(path: Path | None) -> SelfTestResult | None:
    if path is None or not path.is_file():
        return None
    try:
        return SelfTestResult.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None  # a damaged cache entry is run again


def _write(path: Path | None, result: SelfTestResult) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(result.to_json(), sort_keys=True))
        os.replace(partial, path)
    except OSError as exc:
        logger.warning("could not cache the self-test of %s in %s: %s", result.kernel, path, exc)


def kernel_report() -> dict[str, Any]:
    """The kernels setting, every self-test result and every kernel not trusted, so far."""
    with _state.lock:
        return {
            "mode": mode(),
            "self_tests": [r.to_json() for r in _state.results.values()],
            "fallbacks": [{"kernel": k, "device": d, "reason": t.reason}
                          for (k, d), t in sorted(_state.trust.items()) if not t.kernel],
        }
