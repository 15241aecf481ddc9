"""Recording a study: what a command does before any worker is involved.

Kept apart from the workflow (``_workflow``), which trains and so imports
torch: the command that starts a study records it and sends its first
``tune_step`` without importing torch, so the first hop starts seconds sooner.
"""

from __future__ import annotations

from typing import Any

from hoptune.regions import RegionConfig, get_family, resolved_region
from hoptune.tasks.hop import trial_seed
from hoptune.tasks.worker import Runtime
from hoptune.tuner import parse_space

__all__ = ["create_study"]


def create_study(rt: Runtime, region: RegionConfig, *, manifest: dict[str, Any],
                 configs: list[dict[str, Any]] | None = None, trials: int | None = None,
                 parallel: int | None = None, parent_id: int | None = None,
                 where: str | None = None, nightly_run_id: int | None = None,
                 kind: str = "tune") -> int:
    """Record a study of ``region``: fixed ``configs``, or tuned over the region's space.

    With ``configs`` every trial is recorded now (pending) and the budget is
    their number; otherwise ``tune_step`` proposes trials over the space.
    ``where`` names the space in errors (default ``regions.NAME.space``).
    """
    # the study keeps the K its data was sharded into and the batch size of its rows
    region = resolved_region(region, manifest)
    family = get_family(region)
    where = where or f"regions.{region.name}.space"
    space = None if configs is not None else parse_space(region.space, where).to_json()
    budget = len(configs) if configs is not None else (trials or region.trials)
    study_id = rt.db.create_study(
        region=region.name, budget=budget, parallel=parallel or region.parallel,
        epochs=region.epochs, seed=region.seed, space=space,
        region_config=region.model_dump(mode="json"), data_hash=manifest["hash"],
        manifest=manifest, nightly_run_id=nightly_run_id, kind=kind,
        parent_id=parent_id, minimize=family.scoring(manifest["meta"], region.params)[1])
    if configs is not None:
        defaults = {**family.default_params, **region.params}
        rt.db.create_trials(study_id, [({**defaults, **c}, trial_seed(region.seed, i))
                                       for i, c in enumerate(configs)])
    return study_id
