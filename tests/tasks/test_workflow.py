"""The tuning workflow without Celery: slots, pruning, warm starts, concurrent tune_step."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest
import torch

from hoptune.core import Settings, Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import (
    Runtime,
    checkpoint_key,
    create_study,
    load_checkpoint,
    replay_trial,
    run_inline,
    tune_step,
)
from hoptune.tasks.study._workflow import _pruned
from hoptune.tasks.worker import region_of
from hoptune.tasks.worker._messages import tune_step_dispatch
from hoptune.tuner import AshaPruner


def _region(make_config, rt, **kw):  # noqa: ANN001, ANN202
    region = load_config(make_config(**kw)).region("north")
    return region, ingest(region, Store(rt.settings.store_url)).manifest


def test_two_tune_steps_at_once_never_overfill_or_propose_twice(make_config, backend) -> None:
    rt = Runtime(Settings.from_env(), worker="test")
    region, manifest = _region(make_config, rt, trials=12, parallel=3)
    study = create_study(rt, region, manifest=manifest)
    results: list[list] = [[], []]
    runtimes = [Runtime(Settings.from_env(), worker=f"t{i}") for i in range(2)]
    barrier = threading.Barrier(2)

    def step(i: int) -> None:
        barrier.wait()
        results[i] = tune_step(runtimes[i], study)

    threads = [threading.Thread(target=step, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    trials = rt.db.trials(study)
    assert len(trials) == 3  # the parallel limit, not 6
    assert sum(t.state == "running" for t in trials) == 3
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 3
    assert len(results[0]) + len(results[1]) == 3  # one first hop per started trial
    # once more, with every slot taken: nothing new
    assert tune_step(rt, study) == []
    assert len(rt.db.trials(study)) == 3
    for r in (rt, *runtimes):
        r.db.dispose()


def test_a_study_spends_its_budget_and_prunes_at_the_rungs(make_config, rt) -> None:
    region, manifest = _region(make_config, rt, trials=8, parallel=2, epochs=4)
    study = create_study(rt, region, manifest=manifest)
    run_inline(rt, [tune_step_dispatch(study)])
    record = rt.db.study(study)
    assert record.state == "done"
    trials = rt.db.trials(study)
    assert len(trials) == 8
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 8
    pruner = AshaPruner.from_settings(region.pruner, 4)
    assert pruner.brackets == 3  # the default: trials take turns over first rungs 1, 2, 4
    pruned = [t for t in trials if t.state == "pruned"]
    done = [t for t in trials if t.state == "done"]
    assert pruned and done
    for t in done:
        assert t.epochs_done == 4
        assert [e.epoch for e in rt.db.epochs(t.id)] == [0, 1, 2, 3]
    for t in pruned:
        # stopped at a rung of its bracket, or at a later epoch end, judged again at one
        judged = [r for r in pruner.judged_at(t.number) if r <= t.epochs_done]
        assert judged
        metrics = [e.metric for e in rt.db.epochs(t.id)]
        # at one of those rungs, a trial that went on past it scored better than this one
        assert any(min((rt.db.epochs(o.id)[r - 1].metric for o in trials if o.epochs_done > r),
                       default=math.inf) < metrics[r - 1] for r in judged)
        # stopping only ends a trial: its weights replay bitwise in one process
        torch.set_num_threads(1)
        final = load_checkpoint(rt.store, checkpoint_key(study, t.id, t.epochs_done - 1,
                                                         region.shards - 1)).model
        replayed = replay_trial(rt, t.id)
        assert all(torch.equal(replayed[k], final[k]) for k in final)
    best = rt.db.trial(record.best_trial_id)
    assert best.last_metric == min(t.last_metric for t in done)
    # each trial carries the work of the tune_step that recorded it, one figure per step
    steps: dict = {}
    for t in trials:
        assert t.proposal_seconds > 0
        steps.setdefault(t.created_at, set()).add(t.proposal_seconds)
    assert len(steps) < len(trials) and all(len(v) == 1 for v in steps.values())


def test_the_workflow_judges_a_trial_again_at_the_rungs_it_passed(make_config, rt) -> None:
    """``end_of_epoch``'s decision reads the rungs from the database: epochs count from 0
    there, from 1 in the pruner."""
    path = make_config(trials=4, parallel=4, epochs=4)
    path.write_text(path.read_text().replace("reduction_factor = 2", "reduction_factor = 3"))
    region = load_config(path).region("north")  # rungs after epochs 1 and 3
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = rt.db.study(create_study(rt, region, manifest=manifest))
    first, *later = rt.db.create_trials(study.id, [({"lr": 0.01 * i}, i) for i in range(1, 5)])
    for tid, metric in zip(later, (0.5, 0.6, 0.7), strict=True):
        rt.db.start_epoch(tid, 0, [0, 1])
        rt.db.end_epoch(tid, 0, metric, minimize=True, outcome="continue", next_order=[1, 0])
    rt.db.start_epoch(first, 0, [0, 1])
    rt.db.end_epoch(first, 0, 0.9, minimize=True, outcome="continue", next_order=[1, 0])
    trial = rt.db.trial(first)
    # its second epoch: no rung, but rung 1 now holds 4 values and 0.9 is not the best
    assert _pruned(rt.db, region, study, trial, 1, 0.8)
    unchecked = region.model_copy(update={"pruner": region.pruner.model_copy(
        update={"recheck": False})})
    assert not _pruned(rt.db, unchecked, study, trial, 1, 0.8)
    assert not _pruned(rt.db, region, study, rt.db.trial(later[0]), 1, 0.45)  # the best
    # better now than every value at rung 1: judged again, it stands there with 0.45, not 0.9
    assert not _pruned(rt.db, region, study, trial, 1, 0.45)


def test_a_trial_is_judged_from_its_brackets_first_rung(make_config, rt) -> None:
    """Trial 1 of three brackets is judged first after epoch 2: its last place after epoch 1
    stops it only with one bracket, or in a study recorded before brackets (one, then)."""
    path = make_config(trials=4, parallel=4, epochs=4)
    region = load_config(path).region("north")  # rungs after epochs 1 and 2
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = rt.db.study(create_study(rt, region, manifest=manifest))
    assert region_of(study).pruner.brackets == 3
    tids = rt.db.create_trials(study.id, [({"lr": 0.01 * i}, i) for i in range(1, 5)])
    for tid, metric in zip((tids[0], *tids[2:]), (0.5, 0.6, 0.7), strict=True):
        rt.db.start_epoch(tid, 0, [0, 1])
        rt.db.end_epoch(tid, 0, metric, minimize=True, outcome="continue", next_order=[1, 0])
    second = rt.db.trial(tids[1])
    assert second.number == 1
    assert not _pruned(rt.db, region, study, second, 0, 0.9)
    plain = region.model_copy(update={"pruner": region.pruner.model_copy(
        update={"brackets": 1})})
    assert _pruned(rt.db, plain, study, second, 0, 0.9)
    # a study recorded before brackets existed: its pruner has no such field
    recorded = {**study.region_config, "pruner": {
        k: v for k, v in study.region_config["pruner"].items() if k != "brackets"}}
    assert region_of(dataclasses.replace(study, region_config=recorded)).pruner.brackets == 1
    assert region_of(study).pruner.recheck is True
    # one recorded before the pruner judged trials again has neither field: judged as then
    older = {**recorded, "pruner": {
        k: v for k, v in recorded["pruner"].items() if k != "recheck"}}
    assert region_of(dataclasses.replace(study, region_config=older)).pruner.recheck is False


def _seed_parent(rt, region, manifest, good_lr: float) -> int:  # noqa: ANN001
    """A finished study whose results say: the closer lr is to ``good_lr``, the better."""
    parent = create_study(rt, region, manifest=manifest, trials=20)
    entries = []
    for i in range(20):
        lr = 10 ** (-3 + 2.4 * i / 19)
        entries.append(({"lr": lr, "embedding_dim": 4 + (i * 7) % 13}, i))
    ids = rt.db.create_trials(parent, entries)
    for tid, (params, _) in zip(ids, entries, strict=True):
        rt.db.start_epoch(tid, 0, [0, 1])
        metric = 0.5 + (math.log10(params["lr"]) - math.log10(good_lr)) ** 2
        rt.db.end_epoch(tid, 0, metric, minimize=True, outcome="done")
    rt.db.finish_study(parent, "done")
    return parent


def test_a_warm_started_study_proposes_from_the_good_region(make_config, rt) -> None:
    region, manifest = _region(make_config, rt, trials=8, parallel=4)
    parent = _seed_parent(rt, region, manifest, good_lr=0.02)
    warm = create_study(rt, region, manifest=manifest, parent_id=parent)
    tune_step(rt, warm)
    rt.db.finish_study(warm, "done")  # a region runs one study at a time
    cold = create_study(rt, region, manifest=manifest)
    tune_step(rt, cold)

    def distance(study: int) -> list[float]:
        return [abs(math.log10(t.params["lr"]) - math.log10(0.02))
                for t in rt.db.trials(study)]

    assert len(distance(warm)) == 4
    assert max(distance(warm)) < 0.5  # every first proposal within ~3x of the good lr
    assert sum(distance(cold)) > sum(distance(warm))


@pytest.mark.parametrize("bad", ["low-high", "unknown-type"])
def test_a_bad_space_writes_no_study(make_config, rt, bad: str) -> None:
    from hoptune.core import ConfigError
    from hoptune.tasks.cli._tune import open_study

    path = make_config()
    text = path.read_text()
    if bad == "low-high":
        text = text.replace("low = 0.001, high = 0.3", "low = 0.3, high = 0.001")
    else:
        text = text.replace('type = "int"', 'type = "integer"')
    path.write_text(text)
    config = load_config(path)
    with pytest.raises(ConfigError):
        open_study(rt, config, config.region("north"))
    assert rt.db.studies() == []
    assert not (rt.settings.home / "store").exists()


def test_a_remote_store_is_cached_on_local_disk(make_config, home, monkeypatch) -> None:
    import uuid

    monkeypatch.setenv("HOPTUNE_STORE_URL", f"memory://hoptune-{uuid.uuid4().hex}")
    rt = Runtime(Settings.from_env(), worker="test")
    assert rt.disk_cache is not None
    region = load_config(make_config()).region("north")
    manifest = ingest(region, rt.store).manifest
    first = rt.shard(manifest, 1)
    cached = home / "cache" / manifest["files"]["shards"][1]
    assert cached.is_file()
    assert cached.read_bytes() == rt.store.read_bytes(manifest["files"]["shards"][1])
    # a restarted worker reads the shard from its disk, not from the store
    rt.store.delete(manifest["files"]["shards"][1])
    again = Runtime(Settings.from_env(), worker="test")
    assert again.shard(manifest, 1)["rating"].equal(first["rating"])
    rt.db.dispose()
    again.db.dispose()


def test_opening_a_study_twice_resumes_the_running_one(make_config, backend) -> None:
    """`hoptune tune` run again finds the region's running study instead of creating another."""
    from hoptune.tasks.cli._tune import open_study

    rt = Runtime(Settings.from_env(), worker="test")
    config = load_config(make_config(("north", "south")))
    first, resumed = open_study(rt, config, config.region("north"), trials=3)
    assert resumed is False
    assert open_study(rt, config, config.region("north")) == (first, True)
    other, resumed = open_study(rt, config, config.region("south"))
    assert other != first and resumed is False
    assert [(s.region, s.budget) for s in rt.db.studies()] == [("north", 3), ("south", 4)]
    rt.db.dispose()


def _study_setting(make_config, rt, setting: str) -> int:  # noqa: ANN001
    """A study of 4 trials, 2 at once, 3 epochs, with ``setting`` in its ``[defaults]``."""
    path = make_config(trials=4, parallel=2, epochs=3)
    path.write_text(path.read_text().replace("[defaults.params]",
                                             f"{setting}\n[defaults.params]"))
    region, manifest = _region(lambda **_: path, rt)
    return create_study(rt, region, manifest=manifest)


@pytest.mark.parametrize("tell_running", [False, True])
def test_a_running_trials_epochs_reach_the_optimizer_only_with_tell_running(
        make_config, rt, monkeypatch, tell_running: bool) -> None:
    from hoptune import tuner
    from hoptune.tasks.study._workflow import _proposals

    study = _study_setting(make_config, rt, f"tell_running = {str(tell_running).lower()}")
    (running,) = rt.db.create_trials(study, [({"lr": 0.05, "embedding_dim": 8}, 1)])
    rt.db.start_epoch(running, 0, [0, 1])
    rt.db.end_epoch(running, 0, 0.8, minimize=True, outcome="continue", next_order=[1, 0])
    seen = {}

    def spy(space, observed, pending, n, **kwargs):  # noqa: ANN001, ANN003, ANN202
        seen.update(observed=observed, pending=pending)
        return [{"lr": 0.01, "embedding_dim": 4}] * n

    monkeypatch.setattr(tuner, "propose", spy)
    _proposals(rt, rt.db.study(study), rt.db.trials(study))
    point = {"embedding_dim": 8, "lr": 0.05}
    assert seen["observed"] == ([(point, 0.8)] if tell_running else [])
    assert seen["pending"] == ([] if tell_running else [point])


@pytest.mark.parametrize("tell_epochs", [False, True])
def test_tell_epochs_gives_the_optimizer_each_results_fidelity(
        make_config, rt, monkeypatch, tell_epochs: bool) -> None:
    from hoptune import tuner
    from hoptune.tasks.study._workflow import _proposals

    study = _study_setting(make_config, rt, f"tell_epochs = {str(tell_epochs).lower()}")
    done, pruned = rt.db.create_trials(study, [({"lr": 0.05, "embedding_dim": 8}, 1),
                                               ({"lr": 0.01, "embedding_dim": 4}, 2)])
    for epoch in range(3):
        rt.db.start_epoch(done, epoch, [0, 1])
        rt.db.end_epoch(done, epoch, 1.0 - 0.1 * epoch, minimize=True,
                        outcome="continue" if epoch < 2 else "done", next_order=[1, 0])
    rt.db.start_epoch(pruned, 0, [0, 1])
    rt.db.end_epoch(pruned, 0, 0.7, minimize=True, outcome="pruned")
    seen = {}

    def spy(space, observed, pending, n, **kwargs):  # noqa: ANN001, ANN003, ANN202
        seen.update(observed=observed, fidelities=kwargs.get("fidelities"))
        return [{"lr": 0.02, "embedding_dim": 6}] * n

    monkeypatch.setattr(tuner, "propose", spy)
    _proposals(rt, rt.db.study(study), rt.db.trials(study))
    first, second = {"embedding_dim": 8, "lr": 0.05}, {"embedding_dim": 4, "lr": 0.01}
    if tell_epochs:  # the pruned trial's 0.7 after 1 of 3 epochs, as it is
        assert seen["observed"] == [(first, 0.8), (second, 0.7)]
        assert seen["fidelities"] == [1.0, 0.0]
    else:  # no better than the worst finished trial, as if final
        assert seen["observed"] == [(first, 0.8), (second, 0.8)]
        assert seen["fidelities"] is None


def test_a_one_shard_regions_epoch_goes_on_without_reading_where_other_hops_are(
        make_config, rt, monkeypatch) -> None:
    """One shard has one visit order: deciding an epoch reads neither the other trials'
    positions nor the shards' loads, which only place a hop among shards."""
    from hoptune.tuner import HopRecords

    region, manifest = _region(make_config, rt, shards=1, epochs=3, trials=2, parallel=2)
    study = create_study(rt, region, manifest=manifest)
    first = tune_step(rt, study)  # the trials' first hops are placed as always
    read = []
    for name in ("shard_loads", "running_positions"):
        real = getattr(HopRecords, name)
        monkeypatch.setattr(HopRecords, name, lambda self, *a, _n=name, _r=real, **k:
                            read.append(_n) or _r(self, *a, **k))
    monkeypatch.setattr("hoptune.tasks.study._workflow._fill_slots",
                        lambda *a, **k: [])  # no new trials: only epochs are decided
    run_inline(rt, first)
    orders = [e.visit_order for t in rt.db.trials(study) for e in rt.db.epochs(t.id)]
    assert len(orders) >= 4 and all(order == [0] for order in orders)  # epochs went on
    assert read == []


def test_a_trial_ending_while_others_run_on_a_spent_budget_sends_no_tune_step(
        make_config, rt, monkeypatch) -> None:
    """A tune_step is sent where it has work: a trial to propose or start, or the study to
    finish. The first of two trials to end, with the budget spent and the other running,
    sends none; the last one's ends the study."""
    from hoptune.tasks.study import _inline

    region, manifest = _region(make_config, rt, trials=2, parallel=2, epochs=1)
    study = create_study(rt, region, manifest=manifest)
    steps: list[tuple[dict, list]] = []  # each tune_step run: the trial states, what it sent

    def counted(rt_, study_id):  # noqa: ANN001, ANN202
        states = {t.number: t.state for t in rt_.db.trials(study_id)}
        sent = tune_step(rt_, study_id)
        steps.append((states, [d.task for d in sent]))
        return sent

    monkeypatch.setattr(_inline, "tune_step", counted)
    run_inline(rt, [tune_step_dispatch(study)])
    assert rt.db.study(study).state == "done"
    assert [t.state for t in rt.db.trials(study)] == ["done", "done"]
    assert steps == [({}, ["hoptune.hop", "hoptune.hop"]),  # proposes and starts both
                     ({0: "done", 1: "done"}, ["hoptune.promote"])]  # ends the study
