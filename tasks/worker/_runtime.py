"""What a worker process holds between tasks: store, study database, device, shard cache.

One ``Runtime`` per process, built lazily from the environment, with the
device the worker trains on. Shards and validation sets are moved to that
device once and cached there by (region, data hash, part), so a re-ingested
region is loaded afresh and an unchanged one is read from the store once. The
cache is bounded: whenever it loads something new, it drops the entries of
every data hash that no running study uses. Where the store is remote
(``s3://…``), the shard files are also kept on local disk under
``HOPTUNE_HOME/cache``: their keys contain the data hash, so a cached copy
never goes stale, and a restarted worker does not download its shards again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING, Any

from hoptune.core import Settings, Store
from hoptune.regions import RegionConfig, read_manifest
from hoptune.tasks.worker._checkpoint import CheckpointWriter, LatestCheckpoints
from hoptune.tuner import StudyDB, StudyRow

if TYPE_CHECKING:
    import torch

__all__ = ["Runtime", "runtime", "parse_shard_spec", "region_of", "study_manifest"]

log = logging.getLogger(__name__)


class Runtime:
    """The per-process state a hop needs; safe to share between threads.

    ``device`` is where hops train and data is cached (default: the CPU).
    """

    def __init__(self, settings: Settings | None = None, worker: str | None = None,
                 device: torch.device | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.worker = worker or os.environ.get("HOPTUNE_WORKER_NAME") or socket.gethostname()
        # this process, as the holder of the hops it claims (its heartbeat row's id)
        self.holder = f"{self.worker}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        if device is not None and device.type == "cuda":
            from hoptune.tasks.worker._device import train_deterministically

            train_deterministically(device)  # as a worker: trials replay bitwise between the two
        self._device = device
        self.store = Store(self.settings.store_url)
        self.disk_cache = None if self.store.local else Store(str(self.settings.cache_dir))
        self.db = StudyDB(self.settings.database_url)
        self.latest = LatestCheckpoints()  # each trial's latest checkpoint written here
        self.writer = CheckpointWriter()  # hops' checkpoints written behind their hand-on
        # hops trained here (a cohort member's each), whether by message or run on without
        # one: what `hoptune status` and the demo say each worker trained
        self.hops_trained = 0
        self._cache: dict[tuple[str, str, str], dict[str, torch.Tensor]] = {}
        self._lock = threading.Lock()

    @property
    def device(self) -> torch.device:
        """Where this process trains; the CPU unless a device was given.

        torch is imported on first use, so a command that only records and
        dispatches (``hoptune tune`` before its first hop) never imports it.
        """
        if self._device is None:
            import torch

            self._device = torch.device("cpu")
        return self._device

    def manifest(self, region: str) -> dict[str, Any]:
        return read_manifest(self.store, region)

    def shard(self, manifest: dict[str, Any], k: int, *, prune: bool = True
              ) -> dict[str, torch.Tensor]:
        """Shard ``k`` on this worker's device; ``prune=False`` loads it without dropping any."""
        from hoptune.regions import load_shard

        files = manifest["files"]["shards"]
        return self._cached(manifest, str(k), lambda: load_shard(
            self._nearby(files[k] if 0 <= k < len(files) else None), manifest, k), prune)

    def validation(self, manifest: dict[str, Any]) -> dict[str, torch.Tensor]:
        from hoptune.regions import load_validation

        return self._cached(manifest, "validation", lambda: load_validation(
            self._nearby(manifest["files"]["validation"]), manifest))

    def _nearby(self, key: str | None) -> Store:
        """The store to read ``key`` from: the store itself, or its copy on local disk."""
        if self.disk_cache is None or key is None:
            return self.store
        if not self.disk_cache.exists(key):
            self.disk_cache.write_bytes(key, self.store.read_bytes(key))
        return self.disk_cache

    def _cached(self, manifest: dict[str, Any], part: str, load: Any, prune: bool = True
                ) -> dict[str, torch.Tensor]:
        from hoptune.tasks.worker._device import to_device

        key = (manifest["region"], manifest["hash"], part)
        with self._lock:
            if key not in self._cache:
                if prune:
                    self._drop_unused(keep=manifest["hash"])
                self._cache[key] = to_device(load(), self.device)
            return self._cache[key]

    def _drop_unused(self, keep: str) -> None:
        """Forget the cached data of every hash but ``keep`` that no running study uses."""
        if not self._cache:
            return
        used = self.db.data_hashes_in_use() | {keep}
        for key in [k for k in self._cache if k[1] not in used]:
            del self._cache[key]

    def cached(self) -> list[tuple[str, str, str]]:
        """The (region, data hash, part) of what is cached now."""
        with self._lock:
            return sorted(self._cache)

    def preload(self, shards: list[tuple[str, int]]) -> None:
        """Load the shards this worker owns, so the first hop does not pay for it."""
        for region, k in shards:
            try:
                self.shard(self.manifest(region), k, prune=False)
            except Exception as exc:  # noqa: BLE001 - a missing shard is reported at hop time
                log.warning("could not preload shard %s:%d: %s", region, k, exc)


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """This worker process's runtime, built on first use with the worker's device."""
    from hoptune.tasks.worker._device import worker_device

    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(device=worker_device())
        return _runtime


#: The pruner's fields a study recorded before they existed lacks, as it judged then: every
#: trial from the first rung (one bracket), each rung once (no judging again).
_RECORDED_BEFORE = {"brackets": 1, "recheck": False}


def region_of(study: StudyRow) -> RegionConfig:
    """The region configuration a study was started with (snapshotted in the database)."""
    config = study.region_config
    pruner = config.get("pruner")
    if isinstance(pruner, dict) and not _RECORDED_BEFORE.keys() <= pruner.keys():
        # recorded before the pruner had these fields: it judges as it did then
        config = {**config, "pruner": {**_RECORDED_BEFORE, **pruner}}
    return RegionConfig.model_validate(config)


def study_manifest(rt: Runtime, study: StudyRow) -> dict[str, Any]:
    """The data a study trains on: its manifest as of its start, even if re-ingested since."""
    return study.manifest or rt.manifest(study.region)


def parse_shard_spec(spec: str) -> list[tuple[str, int]]:
    """``"north:0,north:1"`` -> ``[("north", 0), ("north", 1)]``; ConfigError on bad input."""
    from hoptune.core import ConfigError

    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in spec.split(",")):
        region, sep, index = part.partition(":")
        if not sep or not region or not index.isdigit():
            raise ConfigError(f"--shards: expected REGION:INDEX[,REGION:INDEX…], got {part!r}")
        out.append((region, int(index)))
    if not out:
        raise ConfigError("--shards: no shard given")
    return out
