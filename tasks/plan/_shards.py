"""``shards = "auto"``: a region's shard count from its data size and the measured costs.

Model hopping pays a fixed cost on every hop besides training (the message, the
checkpoint's load and save, the recording): it pays off only where a pass over a
shard is long against that cost. The policy (``choose_shards``) takes the
largest K, up to the live workers, whose hop spends at most
``MAX_OVERHEAD_SHARE`` of its time outside training, but at least the K whose
shards each take at most ``MEMORY_SHARE`` of a worker's memory. K = 1 is task
parallelism: one shard that every worker holds (replicas of one queue), each
trial's epoch a single hop.

The costs are the planner's: ``fit_costs`` over ``recorded_observations`` for the
region's family (this host class's where it has some), the per-row cost at the
region's batch size and model size, and as the hop's fixed cost the fitted
``overhead`` plus the median message gap (``median_gaps``). Without recorded
costs: one shard per ``AUTO_ROWS_PER_SHARD`` training rows, up to the workers.

The choice is made when ingest writes new shards (``ingest_region``); the same
data and settings again keep it, and a study records the K of its manifest in
its region configuration when it is created, so a running study is never
re-sharded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hoptune.regions import (
    AUTO_ROWS_PER_SHARD,
    RegionConfig,
    ShardChooser,
    ingest,
    region_batch_size,
)

if TYPE_CHECKING:
    from hoptune.regions import IngestResult
    from hoptune.tasks.worker import Runtime

__all__ = ["MAX_OVERHEAD_SHARE", "MEMORY_SHARE", "choose_shards", "current_manifest",
           "ingest_region", "known_shards", "live_workers", "local_shards",
           "shard_chooser", "shard_line"]

log = logging.getLogger(__name__)

MAX_OVERHEAD_SHARE = 0.03  # of a hop's time outside training, at most
MEMORY_SHARE = 0.25  # of a worker's memory one shard's rows may take, at most


def choose_shards(rows: int, row_bytes: int, cost_per_row: float | None,
                  hop_fixed_seconds: float | None, workers: int, worker_memory: int
                  ) -> tuple[int, str]:
    """The shard count for ``rows`` training rows of ``row_bytes`` each, and why.

    ``cost_per_row``: seconds of training a row takes; ``hop_fixed_seconds``: what a hop
    costs outside training (both None without recorded costs: the rule from rows alone);
    ``workers``: the live workers; ``worker_memory``: bytes of one worker's memory.
    """
    workers = max(1, workers)
    data = rows * row_bytes
    by_memory = max(1, math.ceil(data / max(1.0, MEMORY_SHARE * worker_memory)))
    if cost_per_row is None or hop_fixed_seconds is None:
        k = max(1, min(workers, math.ceil(rows / AUTO_ROWS_PER_SHARD)))
        why = (f"no recorded costs: one shard per {AUTO_ROWS_PER_SHARD:,} rows, "
               f"{rows:,} rows, {workers} worker(s)")
    else:
        k = 1
        for candidate in range(workers, 0, -1):
            if _outside(rows / candidate, cost_per_row, hop_fixed_seconds) <= MAX_OVERHEAD_SHARE:
                k = candidate
                break
        hop = rows / k * cost_per_row
        why = (f"a hop of {hop:.3g} s would spend "
               f"{_outside(rows / k, cost_per_row, hop_fixed_seconds):.0%} outside training "
               f"({hop_fixed_seconds:.3g} s a hop), {workers} worker(s)")
        if k < workers:
            more = rows / (k + 1) * cost_per_row
            why += (f"; {k + 1} shards would spend "
                    f"{_outside(rows / (k + 1), cost_per_row, hop_fixed_seconds):.0%} "
                    f"(a hop of {more:.3g} s), over {MAX_OVERHEAD_SHARE:.0%}")
    if by_memory > k:
        return by_memory, (f"auto: {data / 2**30:.2f} GiB of rows, at most "
                           f"{MEMORY_SHARE:.0%} of a worker's {worker_memory / 2**30:.1f} GiB "
                           f"a shard; {why}")
    return k, f"auto: {why}"


def _outside(rows: float, cost_per_row: float, fixed: float) -> float:
    """The share of a hop of ``rows`` rows spent outside training."""
    return fixed / max(fixed + rows * cost_per_row, 1e-12)


def _memory() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def live_workers(rt: Runtime) -> int:
    """The live workers, from their heartbeats (at least one)."""
    from hoptune.tasks.worker import live_after
    from hoptune.tuner import WorkerRecords

    return max(1, len(WorkerRecords(rt.db).live(live_after())))


def shard_chooser(rt: Runtime | Callable[[], Runtime], region: RegionConfig,
                  workers: int | None = None) -> ShardChooser:
    """The choice ingest makes for ``region`` with ``workers`` (default: the live ones),
    from the costs the study database recorded for its family; ``rt`` may be a function
    that makes the runtime, called only once the data is read and valid."""
    from hoptune.regions import get_family
    from hoptune.tasks.plan._costs import parameter_count, recorded_observations
    from hoptune.tasks.plan._history import median_gaps
    from hoptune.tasks.worker import region_of
    from hoptune.tuner import fit_costs

    def choose(rows: int, row_bytes: int, meta: dict[str, Any]) -> tuple[int, str]:
        # the study database is read only here, once the data is read and valid: bad data
        # leaves no database behind
        nonlocal rt
        rt = rt() if callable(rt) else rt
        count = live_workers(rt) if workers is None else workers
        costs = [c for k, c in fit_costs(recorded_observations(rt.db)).items()
                 if k.family == region.family]
        from hoptune.tasks.worker import host_class

        host = host_class()
        cost = max(costs, key=lambda c: (c.key.host == host, c.hops)) if costs else None
        if cost is None:
            return choose_shards(rows, row_bytes, None, None, count, _memory())
        params = {**get_family(region).default_params, **region.params}
        batch = int(params.get("batch_size", region_batch_size(region, rows)))
        parameters = parameter_count(region.model_dump(mode="json"), {"meta": meta}, params)
        per_row = cost.seconds(1, batch, parameters) - cost.overhead
        finished = [s for s in rt.db.studies() if s.state != "running"]
        family = [s for s in finished if region_of(s).family == region.family]
        dispatch = median_gaps(rt.db, family, beside=finished).dispatch if family else 0.0
        return choose_shards(rows, row_bytes, per_row, cost.overhead + dispatch, count,
                             _memory())

    return choose


def ingest_region(rt: Runtime, region: RegionConfig, workers: int | None = None
                  ) -> IngestResult:
    """``ingest`` with ``shards = "auto"`` resolved by ``shard_chooser``; the choice is
    logged at INFO when new shards are written."""
    if region.shards != "auto":
        return ingest(region, rt.store)
    result = ingest(region, rt.store, shard_chooser(rt, region, workers))
    if result.changed:
        log.info("%s: shards: %d (%s)", region.name, result.manifest["shards"],
                 result.manifest.get("shards_reason", ""))
    return result


def current_manifest(rt: Runtime, name: str) -> dict[str, Any] | None:
    """The manifest of region ``name``'s latest ingest, None where it was never ingested."""
    from hoptune.core import StoreError

    try:
        return rt.manifest(name)
    except StoreError:
        return None


def shard_line(manifest: dict[str, Any] | None) -> str:
    """``shards: K (why)`` for the data a manifest describes."""
    if not manifest:
        return "shards: not ingested yet"
    why = manifest.get("shards_reason") or "set in the configuration"
    return f"shards: {len(manifest['rows'])} ({why})"


def known_shards(rt: Runtime, region: RegionConfig) -> int | None:
    """``region``'s K without ingesting: forced, its running study's, or its current
    manifest's; None where its data was never ingested."""
    from hoptune.core import StoreError

    if region.shards != "auto":
        return region.shards
    running = rt.db.latest_study(region.name, state="running")
    if running is not None:
        return int(running.region_config["shards"])
    try:
        return int(rt.manifest(region.name)["shards"])
    except StoreError:
        return None


def local_shards(rt: Runtime, region: RegionConfig, workers: int) -> int:
    """The K that local workers serve for ``region``: its running study's, else that of its
    data as ingested now for ``workers`` workers (a no-op where the data did not change)."""
    if region.shards != "auto":
        return region.shards
    running = rt.db.latest_study(region.name, state="running")
    if running is not None:
        return int(running.region_config["shards"])
    return int(ingest_region(rt, region, workers).manifest["shards"])
