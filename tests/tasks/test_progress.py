"""The progress bar's total: the hops that will run, a pruned trial's remaining ones left out."""

from __future__ import annotations

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import create_study, run_inline
from hoptune.tasks.cli._follow import planned_hops
from hoptune.tasks.worker._messages import tune_step_dispatch
from hoptune.tuner import HopRecords


def test_the_total_is_what_runs_and_pruned_trials_leave_it(make_config, rt) -> None:
    region = load_config(make_config(epochs=3, trials=4, parallel=2, rows=1200)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study_id = create_study(rt, region, manifest=manifest)
    study = rt.db.study(study_id)
    whole = study.budget * study.epochs * region.shards
    assert planned_hops(study, rt.db.trials(study_id)) == whole  # nothing known yet
    run_inline(rt, [tune_step_dispatch(study_id)])
    study, trials = rt.db.study(study_id), rt.db.trials(study_id)
    pruned = [t for t in trials if t.state == "pruned"]
    assert pruned, [t.state for t in trials]  # reduction_factor 2: the rung prunes
    # at the end the total is exactly the hops that ran: the bar ends full, with no jump
    assert planned_hops(study, trials) == HopRecords(rt.db).done_count(study_id)
    assert planned_hops(study, trials) == whole - sum(
        (study.epochs - t.epochs_done) * region.shards for t in pruned)
