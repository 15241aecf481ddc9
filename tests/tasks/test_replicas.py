"""Several workers owning the same shards share its queues: they split the hops, none twice.

docs/operations/cluster.md: "Several workers may own the same shard (replicas);
they share its queue." Two real workers here own both shards of the region, so both consume
both hop queues; the study still trains every hop of every epoch exactly once.
"""

from __future__ import annotations

from collections import Counter

import pytest

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import app, create_study
from hoptune.tasks.cli._cluster import LocalCluster
from hoptune.tasks.cli._follow import follow, start_studies
from hoptune.tuner import HopRecords

pytestmark = pytest.mark.integration


def test_two_workers_on_one_shards_queues_share_its_hops(make_config, rt, redis_url,
                                                         home) -> None:
    region = load_config(make_config(shards=2, epochs=2, trials=4, parallel=2,
                                     rows=4000)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    replicas = LocalCluster({"north": 2}, 2, env={"HOPTUNE_BROKER_URL": redis_url},
                            log_dir=home / "logs", loglevel="INFO")
    replicas.assignment = [[("north", 0), ("north", 1)]] * 2  # both own both shards
    replicas.start()
    try:
        replicas.wait_ready(app)
        study = create_study(rt, region, manifest=manifest)
        start_studies(app, [study])
        follow(rt, app, [study], progress=False, timeout=240)
    finally:
        replicas.stop()

    assert rt.db.study(study).state == "done"
    trials = rt.db.trials(study)
    assert len(trials) == 4 and {t.state for t in trials} <= {"done", "pruned"}
    hops = HopRecords(rt.db).all(study_id=study)
    for trial in trials:
        mine = [h for h in hops if h.trial_id == trial.id]
        per_epoch = Counter((h.epoch, h.shard) for h in mine)
        assert per_epoch == Counter((e, k) for e in range(trial.epochs_done) for k in (0, 1))
    # every hop trained once, by one delivery: replicas never took the same message
    assert {(h.state, h.deliveries, h.interrupted) for h in hops} == {("done", 1, 0)}
    # and both replicas took their share of the queues
    assert set(Counter(h.worker for h in hops)) == set(replicas.names)
