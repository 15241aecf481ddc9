"""``hoptune plan REGION --calibrate``: record hop costs where the cluster has none.

The planner fits a hop's cost per (family, device kind, host class) from
recorded hops. A family never trained on this kind of host has none, so
calibration trains a few trials of the region's model for one epoch, on the
local workers (``--local-workers``) or the cluster's, and the hops they record
are observations like any others. The trials are proposed by the optimizer's
initial design (a scrambled Sobol' sequence: spread over the region's search
space), so the batch sizes and model sizes the cost model separates vary; a
region without a space trains its configured parameters.

On its own local workers it first waits until they have warmed up: a fresh
worker's first hop and first ``tune_step`` wait for what it loads in the
background (about a second each on a 2-core host), which a running cluster,
the one the planner predicts for, has long loaded.

It is a study of kind ``calibration``: never promoted, never the warm start of
a later study, not the study ``hoptune status`` ranks nor the one a report
shows. A host class (``HOPTUNE_HOST_CLASS``, by default the host name: the
local workers' class) that already has a cost for the family is left alone.
"""

from __future__ import annotations

from hoptune.core import Settings
from hoptune.regions import Config
from hoptune.tasks.plan import recorded_observations
from hoptune.tasks.worker import Runtime
from hoptune.tuner import fit_costs

__all__ = ["CALIBRATION_TRIALS", "calibrate"]

#: 8 one-epoch trials: 16 hops with the usual 2 shards. A host's speed drifts over seconds
#: (on a shared 2-core host one pass of a fixed model took 0.21 to 0.37 s, its median
#: 0.29 s, over a minute), so a cost fitted from a few seconds of hops can sit 15% off
#: the host's mean; the fit's error falls with the square root of the hops it averages.
CALIBRATION_TRIALS = 8


def calibrate(settings: Settings, config: Config, name: str, *,
              local_workers: int | None, trials: int = CALIBRATION_TRIALS) -> int | None:
    """Train the calibration study of region ``name``; its id, or None when this host class
    already has a fitted cost of the region's family (nothing to calibrate)."""
    from hoptune.tasks import app
    from hoptune.tasks.cli._cluster import default_workers, local_cluster
    from hoptune.tasks.cli._follow import follow, start_studies
    from hoptune.tasks.plan import ingest_region
    from hoptune.tasks.study import check_region, create_study
    from hoptune.tasks.worker import host_class

    region = config.region(name)
    check_region(config, region, tuned=bool(region.space))
    rt = Runtime(settings, worker="cli")
    host = host_class()
    if any(k.family == region.family and k.host == host
           for k in fit_costs(recorded_observations(rt.db))):
        return None
    workers = None if local_workers is None else local_workers or default_workers()
    manifest = ingest_region(rt, region, workers).manifest
    with local_cluster(settings, {region.name: int(manifest["shards"])},
                       local_workers) as cluster:
        if cluster is not None:  # its own workers: record them warm, as a running cluster's
            cluster.wait_warm(rt.db)
        # tuned over the space as any study is (its first tune_step included), with no
        # warm start: the optimizer's initial design spreads the trials over the space
        # single hops (fuse = 1): a cohort's pass is no hop's cost (tasks/plan/_costs.py)
        study_id = create_study(rt, region.model_copy(update={"epochs": 1, "fuse": 1}),
                                manifest=manifest,
                                configs=None if region.space else [{}] * trials,
                                trials=trials, parallel=min(region.parallel, trials),
                                kind="calibration")
        start_studies(app, [study_id])
        follow(rt, app, [study_id], progress=False)
    return study_id
