"""``hoptune plan REGION --calibrate``: record hop costs where the cluster has none.

The planner fits a hop's cost per (family, device kind, host class) from
recorded hops. A family never trained on this kind of host has none, so
calibration trains a few trials of the region's model for one epoch, on the
local workers (``--local-workers``) or the cluster's, and the hops they record
are observations like any others. The trials spread over the region's search
space (a Latin hypercube, seeded by the region's seed), so the batch sizes and
model sizes the cost model separates vary; a region without a space trains
its configured parameters.

It is a study of kind ``calibration``: never promoted, never the warm start of
a later study, not the study ``hoptune status`` ranks nor the one a report
shows. A host class that already has a cost for the family is left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hoptune.core import Settings
from hoptune.regions import Config, RegionConfig, ingest
from hoptune.tasks._costs import recorded_observations
from hoptune.tasks._runtime import Runtime
from hoptune.tuner import fit_costs, parse_space

__all__ = ["CALIBRATION_TRIALS", "calibrate", "calibration_configs"]

CALIBRATION_TRIALS = 4


def calibration_configs(region: RegionConfig, trials: int = CALIBRATION_TRIALS
                        ) -> list[dict[str, Any]]:
    """``trials`` points spread over the region's space (each dimension's range cut in
    ``trials`` strata, one point in each), or its configured parameters ``trials`` times."""
    from scipy.stats import qmc

    if not region.space:
        return [{} for _ in range(trials)]
    space = parse_space(region.space, f"regions.{region.name}.space")
    u = qmc.LatinHypercube(d=len(space.dimensions), scramble=False,
                           rng=np.random.default_rng(region.seed)).random(trials)
    return space.from_unit(u)


def calibrate(settings: Settings, config: Config, name: str, *,
              local_workers: int | None, trials: int = CALIBRATION_TRIALS) -> int | None:
    """Train the calibration study of region ``name``; its id, or None when this host class
    already has a cost for the region's family (nothing to calibrate)."""
    from hoptune.tasks._app import app
    from hoptune.tasks._cluster import local_cluster
    from hoptune.tasks._driver import follow, start_studies
    from hoptune.tasks._liveness import host_class
    from hoptune.tasks._validate import check_region
    from hoptune.tasks._workflow import create_study

    region = config.region(name)
    check_region(config, region, tuned=False)
    rt = Runtime(settings, worker="cli")
    host = host_class()
    if any(k.family == region.family and k.host == host
           for k in fit_costs(recorded_observations(rt.db))):
        return None
    manifest = ingest(region, rt.store).manifest
    with local_cluster(settings, {region.name: region.shards}, local_workers):
        study_id = create_study(rt, region.model_copy(update={"epochs": 1}), manifest=manifest,
                                configs=calibration_configs(region, trials),
                                parallel=min(region.parallel, trials), kind="calibration")
        start_studies(app, [study_id])
        follow(rt, app, [study_id], progress=False)
    return study_id
