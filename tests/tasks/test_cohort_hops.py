"""Cohort hops through the hop path: claimed, recorded, handed on and replayed per trial.

The error bound of every comparison here is zero, derived as in
tests/tasks/test_cohort.py: a rating_mf cohort runs each trial's single-trial
arithmetic (padding adds exact zeros, vmap keeps each trial's reductions and
their order, the gradient of the summed losses reaches each trial with the
factor 1.0, the cohort optimizers apply each trial's scalars elementwise), so
a trial trained in a cohort is bitwise the trial trained alone: its weights,
its recorded losses and its validation metrics.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from hoptune.core import Store
from hoptune.regions import get_family, ingest, load_config
from hoptune.tasks import checkpoint_key, create_study, load_checkpoint, replay_trial
from hoptune.tasks.hop._cohort_hop import run_cohort_hop
from hoptune.tasks.study._inline import run_inline
from hoptune.tasks.study._workflow import hand_on_cohort, tune_step
from hoptune.tasks.worker._messages import (
    BadMessage,
    CohortMessage,
    cohort_dispatch,
    parse_cohort,
)
from hoptune.tasks.worker._runtime import region_of
from hoptune.tuner import HopRecords, WorkerRecords

CONFIGS = [
    {"lr": 0.05, "weight_decay": 0.0, "embedding_dim": 8},
    {"lr": 0.01, "weight_decay": 0.1, "embedding_dim": 16},
    {"lr": 0.2, "weight_decay": 0.01, "embedding_dim": 4},
    {"lr": 0.03, "weight_decay": 0.05, "embedding_dim": 12},
]


def fused_config(path: Path, fuse: int | str) -> Path:
    """The test configuration at ``path`` with ``fuse`` set for every region."""
    path.write_text(path.read_text().replace("[defaults]\n", f"[defaults]\nfuse = {fuse}\n", 1))
    return path


def one_worker(rt, region) -> None:  # noqa: ANN001
    """Record this process as the one live worker owning every shard of ``region``: trials
    starting together then form one cohort (``cohort_size``: one idle worker)."""
    WorkerRecords(rt.db).register(rt.holder, name=rt.worker, host="box", pid=1,
                                  shards=[[region.name, k] for k in range(region.shards)])


def _setup(make_config, rt, fuse: int | str = 4, **kw):  # noqa: ANN001, ANN202
    region = load_config(fused_config(make_config(**kw), fuse)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    one_worker(rt, region)
    return region, manifest


def assert_as_alone(rt, study: int) -> None:  # noqa: ANN001
    """Every trial of ``study``: its last weights and every recorded epoch metric are
    bitwise those of the trial replayed alone, in this process, in its recorded order."""
    torch.set_num_threads(1)
    study_row = rt.db.study(study)
    region = region_of(study_row)
    family = get_family(region)
    validation = rt.validation(study_row.manifest)
    for trial in rt.db.trials(study):
        epochs = [e for e in rt.db.epochs(trial.id) if e.finished_at is not None]
        assert epochs, trial
        for record in epochs:
            weights = replay_trial(rt, trial.id, epochs=record.epoch + 1)
            model = family.build(trial.params, study_row.manifest["meta"])
            model.load_state_dict(weights)
            assert float(family.evaluate(model, validation)) == record.metric, (trial, record)
        last = epochs[-1].epoch
        final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, last,
                                                         region.shards - 1)).model
        replayed = replay_trial(rt, trial.id, epochs=last + 1)
        for name in final:
            assert torch.equal(replayed[name], final[name]), (trial.id, name)


def test_a_cohort_message_is_parsed_as_strictly_as_a_hop() -> None:
    good = cohort_dispatch("north", 1, [3, 4], [2, 0], 1, 2)
    assert good.task == "hoptune.cohort_hop" and good.queue == "hop.north.2"
    message = parse_cohort(good.kwargs, "hop.north.2")
    assert message.trials == (3, 4) and message.epochs == (2, 0) and message.position == 1
    bad = [
        ({**good.kwargs, "trials": [3, 3]}, "named twice"),
        ({**good.kwargs, "trials": []}, "1 to 64 ids"),
        ({**good.kwargs, "trials": [3, True]}, "ints >= 0"),
        ({**good.kwargs, "trials": [3, "4"]}, "ints >= 0"),
        ({**good.kwargs, "trials": "3,4"}, "expected list"),
        ({**good.kwargs, "epochs": [0, -1]}, "epochs must be ints >= 0"),
        ({**good.kwargs, "epochs": [0]}, "one per trial, got 1 for 2"),
        ({**good.kwargs, "epochs": 0}, "expected list"),
        ({**good.kwargs, "position": -1}, "must be >= 0"),
        ({**good.kwargs, "epoch": 0}, "unknown ['epoch']"),
        ({**good.kwargs, "trial": 3}, "unknown ['trial']"),
        ({k: v for k, v in good.kwargs.items() if k != "shard"}, "missing ['shard']"),
    ]
    for kwargs, expected in bad:
        with pytest.raises(BadMessage, match=expected.replace("[", r"\[").replace("]", r"\]")):
            parse_cohort(kwargs, "hop.north.2")
    with pytest.raises(BadMessage, match="received on queue hop.north.1"):
        parse_cohort(good.kwargs, "hop.north.1")


def test_a_cohort_message_queued_before_per_member_epochs_is_read_as_one_epoch_for_all() -> None:
    """A message of the earlier form (one ``epoch``) still in a queue across an upgrade
    trains, as each member at that epoch; it is checked as strictly as ever."""
    old = {"region": "north", "study": 1, "trials": [3, 4], "epoch": 2, "position": 1,
           "shard": 2}
    message = parse_cohort(old, "hop.north.2")
    assert message.trials == (3, 4) and message.epochs == (2, 2)
    with pytest.raises(BadMessage, match="'epoch': must be >= 0"):
        parse_cohort({**old, "epoch": -1}, "hop.north.2")
    with pytest.raises(BadMessage, match="expected list, got int 3"):
        parse_cohort({**old, "trials": 3}, "hop.north.2")


def test_new_trials_start_as_one_cohort_and_train_as_each_would_alone(make_config, rt) -> None:
    region, manifest = _setup(make_config, rt, fuse=4, shards=3, epochs=2, parallel=4)
    study = create_study(rt, region, manifest=manifest, configs=CONFIGS)
    first = tune_step(rt, study)
    assert [d.task for d in first] == ["hoptune.cohort_hop"]
    ran: list[str] = []
    run_inline(rt, first, on_hop=lambda r: ran.append(r.skipped or "trained"))
    assert ran.count("trained") == 4 * 3 * 2
    trials = rt.db.trials(study)
    assert [t.state for t in trials] == ["done"] * 4
    # one cohort: every hop of the four trials took the same shard, as one pass
    by_hop = defaultdict(list)
    for trial in trials:
        for hop in HopRecords(rt.db).all(trial.id):
            by_hop[hop.epoch, hop.position].append(hop)
    assert len(by_hop) == 2 * 3
    for hops in by_hop.values():
        assert len({h.shard for h in hops}) == 1
        assert len({h.train_seconds for h in hops}) == 1  # the fused pass's seconds
    assert_as_alone(rt, study)


def test_fuse_one_keeps_every_hop_single(make_config, rt) -> None:
    region, manifest = _setup(make_config, rt, fuse=1, parallel=4)
    study = create_study(rt, region, manifest=manifest, configs=CONFIGS)
    first = tune_step(rt, study)
    assert [d.task for d in first] == ["hoptune.hop"] * 4


def test_fuse_auto_is_the_cpu_cohort_on_a_cpu_and_what_a_gpus_memory_holds() -> None:
    from hoptune.regions import fuse_limit
    from hoptune.regions._fusion import CPU_FUSE, MAX_FUSE

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert fuse_limit(4, device=gpu) == 4 and fuse_limit(1, device=cpu) == 1
    assert fuse_limit("auto", device=cpu) == CPU_FUSE == 16
    # 80 GiB: the demo's ~1M-parameter model fills the bound; 1e8 parameters (1.6 GB of
    # weights, gradients and moments each) 13 in a quarter of it; 1e9, one at a time
    assert fuse_limit("auto", device=gpu, parameters=10**6, memory=80 * 2**30) == MAX_FUSE
    assert fuse_limit("auto", device=gpu, parameters=10**8, memory=80 * 2**30) == 13
    assert fuse_limit("auto", device=gpu, parameters=10**9, memory=80 * 2**30) == 1
    with pytest.raises(ValueError, match="needs the model's parameters"):
        fuse_limit("auto", device=gpu)


def test_fuse_auto_on_a_cpu_worker_starts_new_trials_as_one_cohort(make_config, rt) -> None:
    """The decision runs where the cohort forms, on this (CPU) worker's device: the CPU's
    cohort size, the data's meta never read."""
    from hoptune.tasks.hop import fuse_size

    region, manifest = _setup(make_config, rt, fuse='"auto"', shards=2, epochs=1, parallel=4)
    assert region.fuse == "auto" and region.fuses
    assert fuse_size(region, CONFIGS[0], lambda: pytest.fail("meta read on a CPU")) == 16
    study = create_study(rt, region, manifest=manifest, configs=CONFIGS)
    first = tune_step(rt, study)
    assert [d.task for d in first] == ["hoptune.cohort_hop"]
    assert len(first[0].kwargs["trials"]) == 4
    run_inline(rt, first)
    assert [t.state for t in rt.db.trials(study)] == ["done"] * 4
    assert_as_alone(rt, study)


def test_fuse_auto_on_a_gpu_worker_sizes_the_cohort_from_its_memory_and_the_model(
        make_config, rt, monkeypatch) -> None:
    """The GPU branch, through the same code on this CPU: the device and its memory as a
    GPU worker would report them, the trial's model counted on the meta device."""
    import types

    import hoptune.tasks.worker
    from hoptune.tasks.hop import fuse_size

    region, manifest = _setup(make_config, rt, fuse='"auto"')
    monkeypatch.setattr(hoptune.tasks.worker, "worker_device", lambda: torch.device("cuda", 0))
    memory = {"bytes": 0}
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(total_memory=memory["bytes"]))
    params = {**get_family(region).default_params, **region.params, **CONFIGS[0]}
    model = get_family(region).build(params, manifest["meta"])
    n = sum(p.numel() for p in model.parameters())
    memory["bytes"] = 4 * 16 * n * 10  # a quarter of it holds 10 trials' 16 bytes a parameter
    assert fuse_size(region, params, lambda: manifest["meta"]) == 10
    memory["bytes"] = 80 * 2**30
    assert fuse_size(region, params, lambda: manifest["meta"]) == 64


def test_a_redelivered_cohort_trains_no_member_twice(make_config, rt) -> None:
    region, manifest = _setup(make_config, rt, fuse=4, shards=2, epochs=1, parallel=4)
    study = create_study(rt, region, manifest=manifest, configs=CONFIGS[:3])
    (message,) = tune_step(rt, study)
    k = message.kwargs
    reports = run_cohort_hop(rt, k["trials"], k["epochs"], 0, k["shard"])
    assert [r.trained for r in reports] == [True] * 3
    sent = hand_on_cohort(rt, reports)
    assert [d.task for d in sent] == ["hoptune.cohort_hop"]  # one shared next shard
    again = run_cohort_hop(rt, k["trials"], k["epochs"], 0, k["shard"])
    assert [r.trained for r in again] == [False] * 3
    assert {r.skipped for r in again} == {"output checkpoint exists"}
    assert hand_on_cohort(rt, again) == sent  # the successors still wait: the same message
    run_inline(rt, sent)
    for trial in rt.db.trials(study):
        assert trial.state == "done"
        assert [h.deliveries for h in HopRecords(rt.db).all(trial.id)] == [2, 1]
    assert_as_alone(rt, study)


def test_a_member_no_longer_running_drops_out_and_the_others_are_unchanged(make_config,
                                                                          rt) -> None:
    region, manifest = _setup(make_config, rt, fuse=4, shards=2, epochs=2, parallel=4)
    study = create_study(rt, region, manifest=manifest, configs=CONFIGS)
    (message,) = tune_step(rt, study)
    k = message.kwargs
    reports = run_cohort_hop(rt, k["trials"], k["epochs"], 0, k["shard"])
    gone = k["trials"][1]
    assert rt.db.end_trial(gone, "pruned")
    run_inline(rt, hand_on_cohort(rt, reports))
    states = {t.id: t.state for t in rt.db.trials(study)}
    assert states == {t: ("pruned" if t == gone else "done") for t in k["trials"]}
    # its next hop was queued with the cohort's before it ended, and never trained
    assert [h.state for h in HopRecords(rt.db).all(gone)] == ["done", "queued"]
    torch.set_num_threads(1)
    for trial in rt.db.trials(study):
        if trial.id == gone:
            continue
        final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1)).model
        replayed = replay_trial(rt, trial.id)
        for name in final:
            assert torch.equal(replayed[name], final[name]), name


def _passes(rt, trial_id: int, epoch: int) -> list[tuple[int, int, float]]:  # noqa: ANN001
    """(position, shard, train seconds) of each hop of the trial's epoch: a cohort's pass
    gives every member its seconds, so equal rows are one shared pass."""
    return [(h.position, h.shard, h.train_seconds) for h in HopRecords(rt.db).all(trial_id)
            if h.epoch == epoch]


def test_a_trial_filling_a_freed_slot_joins_the_cohort_at_its_epoch_boundary(make_config,
                                                                             rt) -> None:
    """Of a cohort of four, trial A ends after its one epoch (its own ``epochs``) and frees
    a slot for pending trial E. One worker owns both shards, and the cohort's next pass
    waits for it: no shard has an idle owner, so E starts its first epoch in the cohort's
    message for the others' second epoch, and again beside their third: the same passes,
    epochs apart. Every trial, E too, is bitwise itself trained alone in its recorded
    order."""
    region, manifest = _setup(make_config, rt, fuse=4, shards=2, epochs=3, parallel=4)
    epochs = [1, 3, 3, 3, 2]
    configs = [{**c, "epochs": e} for c, e in zip([*CONFIGS, CONFIGS[0]], epochs, strict=True)]
    configs[4] = {**configs[4], "lr": 0.07}
    study = create_study(rt, region, manifest=manifest, configs=configs)
    first = tune_step(rt, study)
    assert [d.task for d in first] == ["hoptune.cohort_hop"]
    run_inline(rt, first)

    trials = rt.db.trials(study)
    assert [(t.state, t.epochs_done) for t in trials] == [("done", e) for e in epochs]
    assert rt.db.study(study).state == "done"
    a, b, c, d, e = (t.id for t in trials)
    assert _passes(rt, b, 0) == _passes(rt, c, 0) == _passes(rt, d, 0) == _passes(rt, a, 0)
    for epoch in (0, 1):  # E's epochs in the others' second and third passes
        assert (_passes(rt, e, epoch) == _passes(rt, b, epoch + 1) == _passes(rt, c, epoch + 1)
                == _passes(rt, d, epoch + 1))
    assert_as_alone(rt, study)


def test_a_member_recorded_on_another_shard_is_set_aside(make_config, rt) -> None:
    """Its hop was placed on another shard: the message is stale or rewritten, the member's
    own message went there already, and this worker may not train that shard's data."""
    region, manifest = _setup(make_config, rt, fuse=4, shards=2, epochs=1, parallel=4)
    study = create_study(rt, region, manifest=manifest, configs=CONFIGS[:2])
    (message,) = tune_step(rt, study)
    k = message.kwargs
    other = 1 - k["shard"]
    reports = run_cohort_hop(rt, k["trials"], k["epochs"], 0, other)
    assert not any(r.trained for r in reports)
    assert [d for r in reports for d in r.dispatch] == []
    assert [r.set_aside for r in reports] == [
        f"hop of trial {t} epoch 0 position 0: placed on shard {k['shard']}, not {other}"
        for t in k["trials"]]
    assert [h.deliveries for t in k["trials"] for h in HopRecords(rt.db).all(t)] == [0, 0]


def test_a_cohort_message_is_checked_against_the_study_database(make_config, rt) -> None:
    """A member the database does not have is set aside alone and the others train; a
    message of a study that is not of its region is set aside whole, nobody claimed."""
    region, manifest = _setup(make_config, rt, fuse=4, shards=2, epochs=1, parallel=4)
    study = create_study(rt, region, manifest=manifest, configs=CONFIGS[:2])
    (message,) = tune_step(rt, study)
    k = message.kwargs
    trials, epochs = (*k["trials"], 99999), (*k["epochs"], 0)
    south = CohortMessage("south", study, trials, epochs, 0, k["shard"])
    reports = run_cohort_hop(rt, trials, epochs, 0, k["shard"], message=south)
    reason = (f"cohort hop of trials {list(trials)} position 0: study {study} is of region "
              f"north, not south")
    assert [(r.trial_id, r.set_aside, r.trained) for r in reports] == [
        (t, reason, False) for t in trials]
    assert [h.deliveries for t in k["trials"] for h in HopRecords(rt.db).all(t)] == [0, 0]

    north = CohortMessage("north", study, trials, epochs, 0, k["shard"])
    reports = run_cohort_hop(rt, trials, epochs, 0, k["shard"], message=north)
    by_trial = {r.trial_id: r for r in reports}
    assert by_trial[99999].set_aside == "hop of trial 99999 epoch 0 position 0: no trial 99999"
    assert [by_trial[t].trained for t in k["trials"]] == [True, True]
    assert all(by_trial[t].set_aside is None for t in k["trials"])


TABULAR = """
[defaults]
shards = 2
epochs = 2
batch_size = 32
seed = 3
parallel = 3
fuse = 3
optimizer = "fused_adamw"

[regions.north]
data = "data/north.csv"
family = "tests.tasks.cohort_factory:{factory}"
task = "regression"
metric = "rmse"
columns = {{ features = ["a", "b", "c"], label = "y" }}
"""


def _tabular(home: Path, factory: str) -> Path:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(400, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(400, generator=g)
    (home / "data").mkdir(exist_ok=True)
    lines = ["a,b,c,y"] + [",".join(f"{v:.6f}" for v in (*row.tolist(), t))
                           for row, t in zip(x, y.tolist(), strict=True)]
    (home / "data" / "north.csv").write_text("\n".join(lines) + "\n")
    (home / "hoptune.toml").write_text(TABULAR.format(factory=factory))
    return home / "hoptune.toml"


def test_a_factory_vmap_cannot_run_trains_unfused_through_the_hop_path(home, rt, caplog,
                                                                        monkeypatch) -> None:
    from hoptune.regions import _fusion

    monkeypatch.setattr(_fusion, "_logged", set())  # "once" is once per worker process
    region = load_config(_tabular(home, "itemizing")).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    one_worker(rt, region)
    study = create_study(rt, region, manifest=manifest,
                         configs=[{"lr": 0.01}, {"lr": 0.1, "weight_decay": 0.1},
                                  {"lr": 0.03}])
    first = tune_step(rt, study)
    assert [d.task for d in first] == ["hoptune.cohort_hop"]  # it may fuse, by its key
    with caplog.at_level(logging.WARNING, logger="hoptune.regions._fusion"):
        run_inline(rt, first)
    unfused = [r.getMessage() for r in caplog.records if "unfused" in r.getMessage()]
    assert len(unfused) == 1, unfused  # logged once for all its cohort passes
    assert "torch.func.vmap cannot run its forward" in unfused[0]
    assert "cohort_factory:itemizing" in unfused[0]
    trials = rt.db.trials(study)
    assert [t.state for t in trials] == ["done"] * 3
    assert all(math.isfinite(t.last_metric) for t in trials)
    torch.set_num_threads(1)
    for trial in trials:
        final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1)).model
        replayed = replay_trial(rt, trial.id)
        for name in final:
            assert torch.equal(replayed[name], final[name]), name


@pytest.mark.integration
def test_cohorts_across_two_workers_train_each_trial_as_alone_and_asha_shrinks_them(
        make_config, rt, cluster) -> None:
    """Eight proposed trials (different lr, weight decay, embedding size) start as two
    cohorts of four on two real workers, one each (``cohort_size``: two idle workers);
    each cohort hops across both; ASHA prunes some mid-way and the cohorts go on smaller.
    Every trial, pruned or not, is bitwise itself trained alone in its recorded order."""
    from hoptune.tasks import app
    from hoptune.tasks.cli._follow import follow, start_studies

    path = make_config(shards=2, epochs=3, trials=8, parallel=8)
    path.write_text(path.read_text().replace(
        'embedding_dim = { type = "int", low = 4, high = 16 }',
        'embedding_dim = { type = "int", low = 4, high = 16 }\n'
        'weight_decay = { type = "real", low = 0.0, high = 0.1 }'))
    region = load_config(fused_config(path, 4)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    cluster({"north": 2}, workers=2)
    study = create_study(rt, region, manifest=manifest)
    start_studies(app, [study])
    follow(rt, app, [study], progress=False, timeout=300)

    assert rt.db.study(study).state == "done"
    trials = rt.db.trials(study)
    assert len(trials) == 8
    for name in ("lr", "weight_decay", "embedding_dim"):
        assert len({t.params[name] for t in trials}) >= 6, name
    pruned = [t for t in trials if t.state == "pruned"]
    assert pruned and all(t.epochs_done < 3 for t in pruned)
    assert any(t.state == "done" and t.epochs_done == 3 for t in trials)
    passes = defaultdict(list)  # one pass: its shard, worker and seconds, shared
    for trial in trials:
        for hop in HopRecords(rt.db).all(trial.id):
            if hop.state == "done":
                passes[hop.epoch, hop.position, hop.shard, hop.worker,
                       hop.train_seconds].append(trial.id)
    first = sorted(len(ids) for (epoch, position, *_), ids in passes.items()
                   if (epoch, position) == (0, 0))
    assert first == [4, 4]  # two cohorts of four, one on each worker
    assert len({worker for (_, _, _, worker, _) in passes}) == 2
    cohorts = {frozenset(ids) for (epoch, position, *_), ids in passes.items()
               if (epoch, position) == (0, 0)}
    for (epoch, *_), ids in passes.items():  # a cohort, however small, trains as one pass
        if epoch == 0:
            assert any(set(ids) <= cohort for cohort in cohorts), ids
    for cohort in cohorts:  # and hops from one worker to the other
        assert len({worker for (epoch, _, _, worker, _), ids in passes.items()
                    if epoch == 0 and set(ids) <= cohort}) == 2
    assert_as_alone(rt, study)


@pytest.mark.integration
def test_on_one_real_worker_a_trial_filling_a_freed_slot_trains_in_the_cohorts_next_passes(
        make_config, rt, cluster) -> None:
    """One worker process owns both shards: at a cohort's epoch boundary it is busy with
    the cohort's next pass, so the trial filling the slot that trial A freed joins that
    pass, its first epoch beside the others' second, through the real task path. Every
    trial is bitwise itself trained alone."""
    from hoptune.tasks import app
    from hoptune.tasks.cli._follow import follow, start_studies

    region = load_config(fused_config(make_config(shards=2, epochs=2, parallel=3), 4)
                         ).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    cluster({"north": 2}, workers=1)
    configs = [{**CONFIGS[0], "epochs": 1}, CONFIGS[1], CONFIGS[2], CONFIGS[3]]
    study = create_study(rt, region, manifest=manifest, configs=configs)
    start_studies(app, [study])
    follow(rt, app, [study], progress=False, timeout=300)

    assert rt.db.study(study).state == "done"
    a, b, c, d = (t.id for t in rt.db.trials(study))
    assert [t.epochs_done for t in rt.db.trials(study)] == [1, 2, 2, 2]
    assert _passes(rt, a, 0) == _passes(rt, b, 0) == _passes(rt, c, 0)
    assert _passes(rt, d, 0) == _passes(rt, b, 1) == _passes(rt, c, 1)
    assert_as_alone(rt, study)
