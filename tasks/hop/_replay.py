"""Replay a trial in one process from its recorded visit orders.

The check behind the reproducibility invariant: retraining a trial on the
runtime's device, epoch by epoch in the recorded orders, must give bitwise the
weights that the hops produced across workers on the same kind of device.
"""

from __future__ import annotations

import torch

from hoptune.tasks.hop._training import build_trial_model, make_trial_optimizer, train_pass
from hoptune.tasks.worker import Runtime, region_of, study_manifest

__all__ = ["replay_trial"]


def replay_trial(rt: Runtime, trial_id: int, epochs: int | None = None
                 ) -> dict[str, torch.Tensor]:
    """The trial's weights after its first ``epochs`` recorded epochs (all by default)."""
    trial = rt.db.trial(trial_id)
    study = rt.db.study(trial.study_id)
    region = region_of(study)
    manifest = study_manifest(rt, study)
    model = build_trial_model(region, trial.params, trial.seed, manifest["meta"],
                              rt.device)
    optimizer = make_trial_optimizer(region, trial.params, model)
    recorded = rt.db.epochs(trial_id)
    for record in recorded[: epochs if epochs is not None else len(recorded)]:
        for position, shard in enumerate(record.visit_order):
            train_pass(region, model, optimizer, rt.shard(manifest, shard),
                       seed=trial.seed, epoch=record.epoch, shard=shard,
                       position=position, params=trial.params)
    return model.state_dict()
