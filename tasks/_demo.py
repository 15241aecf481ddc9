"""``hoptune demo``: three synthetic regions trained by hopping across two local workers.

Everything runs for real on one machine: the embedded Redis (or
``HOPTUNE_BROKER_URL``), ``hoptune worker`` processes owning the shards, the
SQLite study database and the store folder under ``HOPTUNE_HOME``.
"""

from __future__ import annotations

import time

from regions import Settings, Store, ingest, load_config, write_demo
from tasks._broker import EmbeddedRedis
from tasks._cluster import LocalCluster
from tasks._driver import follow, format_table, start_studies, study_table
from tasks._runtime import Runtime
from tasks._workflow import create_study

__all__ = ["run_demo", "DEMO_CONFIGS"]

#: The fixed configurations every demo region trains.
DEMO_CONFIGS = [
    {"lr": 0.003, "embedding_dim": 8, "reg": 1e-4},
    {"lr": 0.01, "embedding_dim": 16, "reg": 1e-4},
    {"lr": 0.03, "embedding_dim": 16, "reg": 1e-3},
    {"lr": 0.1, "embedding_dim": 32, "reg": 1e-3},
    {"lr": 0.02, "embedding_dim": 24, "reg": 3e-4},
    {"lr": 0.05, "embedding_dim": 8, "reg": 3e-3},
]


def run_demo(settings: Settings, *, workers: int = 2, trials: int = 4, epochs: int = 3,
             progress: bool = True) -> int:
    started = time.monotonic()
    config = load_config(write_demo(settings.home / "demo"))
    store = Store(settings.store_url)
    manifests = {}
    for region in config.regions.values():
        manifests[region.name] = ingest(region, store).manifest
    broker = None if settings.broker_url else EmbeddedRedis(settings.home).start()
    from tasks._app import app

    rt = Runtime(settings, worker="demo")
    cluster = LocalCluster({r.name: r.shards for r in config.regions.values()}, workers,
                           log_dir=settings.home / "logs")
    try:
        cluster.start()
        cluster.wait_ready(app)
        study_ids = [
            create_study(rt, region.model_copy(update={"epochs": epochs}),
                         manifest=manifests[region.name],
                         configs=(DEMO_CONFIGS * (trials // len(DEMO_CONFIGS) + 1))[:trials])
            for region in config.regions.values()
        ]
        start_studies(app, study_ids)
        follow(rt, app, study_ids, progress=progress)
    finally:
        cluster.stop()
        if broker is not None:
            broker.stop()
    rows = [row for s in study_ids for row in study_table(rt, s)]
    print(format_table(rows, ["region", "trial", "params", "metric", "epochs", "hops",
                              "seconds"]))
    failed = [r for r in rows if r["state"] != "done"]
    print(f"{len(rows)} trials in {len(study_ids)} regions, {time.monotonic() - started:.0f} s"
          + (f"; {len(failed)} did not finish" if failed else ""))
    return 1 if failed else 0
