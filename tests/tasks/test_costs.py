"""The cost model's observations come from a real study's recorded hops."""

from __future__ import annotations

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import create_study, run_inline, tune_step
from hoptune.tasks.plan._costs import parameter_count, recorded_observations
from hoptune.tuner import CostKey, HopRecords, WorkerRecords, fit_costs


def test_every_trained_hop_is_one_observation_keyed_by_its_worker(make_config, rt) -> None:
    region = load_config(make_config(shards=2, epochs=2, trials=2, parallel=2,
                                     batch_size=64)).region("north")
    WorkerRecords(rt.db).register(rt.holder, name=rt.worker, host="box", pid=1, shards=[],
                                  info={"device": "cpu", "host_class": "small"})
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest,
                         configs=[{"lr": 0.03}, {"lr": 0.01, "embedding_dim": 16}])
    run_inline(rt, tune_step(rt, study))
    record = rt.db.study(study)
    observations = recorded_observations(rt.db)
    hops = [h for t in rt.db.trials(study) for h in HopRecords(rt.db).all(t.id)]
    assert len(observations) == len(hops) == 2 * 2 * 2  # trials x epochs x shards
    assert {o.key for o in observations} == {CostKey("rating_mf", "cpu", "small")}
    assert sorted(o.rows for o in observations) == sorted(h.samples for h in hops)
    assert {o.batch_size for o in observations} == {64}
    sizes = {parameter_count(record.region_config, record.manifest, t.params)
             for t in rt.db.trials(study)}
    assert {o.parameters for o in observations} == sizes and len(sizes) == 2
    assert all(o.seconds > 0 for o in observations)
    (cost,) = fit_costs(observations).values()
    assert cost.hops + cost.outliers == 8


def test_a_stopped_worker_s_hops_keep_the_class_of_the_process_that_ran_them(make_config, rt
                                                                            ) -> None:
    from hoptune.tasks.monitor._status import health_sections
    from hoptune.tasks.worker._liveness import live_after

    region = load_config(make_config(shards=2, epochs=1, trials=1, parallel=1)
                         ).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    records = WorkerRecords(rt.db)
    # two processes under one name, one after the other, on hosts of two classes
    for number, host_class in enumerate(("small", "large")):
        holder = f"{rt.worker}/{number}/x"
        records.register(holder, name=rt.worker, host="box", pid=number, shards=[],
                         info={"device": "cpu", "host_class": host_class})
        study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
        run_inline(rt, tune_step(rt, study))
        records.retire(holder)  # stopped cleanly
        assert not records.beat(holder)  # a retired row is never touched again
    assert records.live(live_after()) == []
    keys = [o.key.host for o in recorded_observations(rt.db)]
    assert keys == ["small", "small", "large", "large"]
    # retired processes are history, not heartbeats to show
    assert not [s for s in health_sections(rt.db, rt.settings, []) if "heartbeat" in s[0]]


def test_a_models_parameter_count_is_built_once_a_process(make_config, rt) -> None:
    import numpy as np

    from hoptune.tasks.plan._costs import _parameter_count

    region = load_config(make_config()).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    config = region.model_dump(mode="json")
    _parameter_count.cache_clear()
    small = parameter_count(config, manifest, {**region.params, "embedding_dim": 4})
    large = parameter_count(config, manifest, {**region.params, "embedding_dim": 8})
    assert small < large and _parameter_count.cache_info().misses == 2
    # the same params again, in another order or as numpy scalars: no second build
    again = {"embedding_dim": np.int64(8), **{k: v for k, v in region.params.items()
                                              if k != "embedding_dim"}}
    assert parameter_count(config, manifest, again) == large
    assert _parameter_count.cache_info().misses == 2


def test_a_cohort_pass_is_no_hops_cost_but_a_trial_that_trained_alone_is(make_config, rt
                                                                         ) -> None:
    """Each member of a cohort records the whole pass's seconds (``fuse``): no single hop
    took that long, so those hops are no observations. A member that trained alone, in a
    pass of its own, is one."""
    path = make_config(shards=2, epochs=2, trials=2, parallel=2, batch_size=64)
    path.write_text(path.read_text().replace("[defaults]\n", "[defaults]\nfuse = 2\n", 1))
    region = load_config(path).region("north")
    WorkerRecords(rt.db).register(rt.holder, name=rt.worker, host="box", pid=1,
                                  shards=[["north", 0], ["north", 1]],
                                  info={"device": "cpu", "host_class": "small"})
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest,
                         configs=[{"lr": 0.03, "epochs": 1}, {"lr": 0.01}])
    run_inline(rt, tune_step(rt, study))
    a, b = (HopRecords(rt.db).all(t.id) for t in rt.db.trials(study))
    # epoch 0: one pass per shard for both trials; epoch 1: the second trial alone
    assert [h.train_seconds for h in a] == [h.train_seconds for h in b[:2]]
    alone = b[2:]
    observations = recorded_observations(rt.db)
    assert len(observations) == len(alone) == 2
    assert sorted(o.rows for o in observations) == sorted(h.samples for h in alone)
