"""Hopping on a GPU: two real workers share one GPU, and a replay there is bitwise the same.

Skipped without a CUDA device. The CPU side of the same code path is held by
tests/tasks/test_training_device.py and tests/tasks/test_hopping.py.
"""

from __future__ import annotations

import pytest
import torch

from hoptune.core import Settings, Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import Runtime, app, checkpoint_key, create_study, load_checkpoint, replay_trial
from hoptune.tasks.cli._cluster import LocalCluster
from hoptune.tasks.cli._follow import follow, start_studies
from hoptune.tasks.worker._checkpoint import LatestCheckpoints
from hoptune.tasks.worker._device import worker_device
from hoptune.tasks.worker._info import describe_workers
from hoptune.tuner import HopRecords

pytestmark = [pytest.mark.gpu, pytest.mark.integration,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def test_two_workers_hop_on_one_gpu_and_replay_bitwise(make_config, home, redis_url) -> None:
    region = load_config(make_config(shards=2, epochs=2, rows=4000)).region("north")
    settings = Settings.from_env()
    manifest = ingest(region, Store(settings.store_url)).manifest
    workers = LocalCluster({"north": 2}, 2, env={"HOPTUNE_BROKER_URL": redis_url},
                           log_dir=home / "logs", loglevel="INFO",
                           devices=["cuda:0", "cuda:0"])
    device = worker_device({"HOPTUNE_DEVICE": "cuda:0"})  # the workers' determinism, here too
    rt = Runtime(settings, worker="test", device=device)
    try:
        workers.start()
        workers.wait_ready(app)
        study = create_study(rt, region, manifest=manifest,
                             configs=[{"lr": 0.02}, {"lr": 0.05, "embedding_dim": 4}])
        start_studies(app, [study])
        follow(rt, app, [study], progress=False, timeout=300)
        assert rt.db.study(study).state == "done"
        # the workers' passes replayed a captured forward and backward (tasks.hop._steps)
        logs = "".join(f.read_text(errors="replace") for f in (home / "logs").iterdir())
        assert "CUDA graphs: each pass's gather, forward and backward captured" in logs
        assert "the capture failed" not in logs
        seen = describe_workers(app)
        assert {row["worker"] for row in seen} == set(workers.names)
        for row in seen:
            assert row["device"].startswith("cuda:0 ("), row
            assert "FusedAdamW CuPy kernel" in row["kernels"], row
            assert "not trusted" not in row["kernels"], row
        for trial in rt.db.trials(study):
            hops = HopRecords(rt.db).all(trial.id)
            assert len({h.worker for h in hops}) == 2  # the model moved
            replayed = replay_trial(rt, trial.id)
            final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1),
                                    device).model
            for name in final:
                assert final[name].device == device
                assert torch.equal(replayed[name], final[name]), name
    finally:
        workers.stop()
        rt.db.dispose()
        torch.use_deterministic_algorithms(False)  # as the other tests of this process expect


def test_a_checkpoint_loads_onto_the_gpu_with_its_step_counts_on_the_cpu(make_config,
                                                                          home) -> None:
    from hoptune.tasks import run_hop
    from hoptune.tasks.hop import wait_written
    from hoptune.tasks.study._workflow import tune_step

    region = load_config(make_config(shards=2, epochs=1, rows=1200)).region("north")
    rt = Runtime(worker="test", device=torch.device("cuda", 0))
    try:
        manifest = ingest(region, Store(rt.settings.store_url)).manifest
        study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.02}])
        (first,) = tune_step(rt, study)
        # the checkpoint is written behind the hop's hand-on: wait for it, as the task does
        wait_written(run_hop(rt, first.kwargs["trial"], 0, 0))
        saved = load_checkpoint(rt.store, checkpoint_key(study, first.kwargs["trial"], 0, 0),
                                rt.device)
        assert {t.device.type for t in saved.model.values()} == {"cuda"}
        from hoptune.tasks.hop._hop import restore_trial

        trial, record = rt.db.trial(first.kwargs["trial"]), rt.db.study(study)
        rt.latest = LatestCheckpoints(limit=0)  # read from the store, as another worker does
        model, optimizer = restore_trial(rt, region, record, trial, 0, 1, manifest["meta"])
        assert {p.device.type for p in model.parameters()} == {"cuda"}
        for state in optimizer.state.values():
            assert state["step"].device.type == "cpu"  # no wait for the GPU at every step
            assert state["exp_avg"].device.type == "cuda"
    finally:
        rt.db.dispose()
        torch.use_deterministic_algorithms(False)  # as the other tests of this process expect


def test_a_gpu_checkpoint_saved_behind_is_copied_to_the_host_on_the_hops_thread(tmp_path) -> None:
    """The writer lays out a host checkpoint on its own thread; one on the GPU is copied to
    host memory on the caller's thread and stream first, as the training left it, so the
    tensors' next in-place step can never race the copy. It reads back bitwise."""
    import threading

    from hoptune.tasks.worker import _checkpoint as module

    threads: list[int] = []
    real = module.encode_checkpoint

    def spy(checkpoint):
        threads.append(threading.get_ident())
        return real(checkpoint)

    weights = torch.randn(4096, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    mine = module.Checkpoint(model={"w": weights}, optimizer={"state": {0: {
        "step": torch.tensor(3.0), "exp_avg": weights * 2}}}, samples=5, loss=0.5)
    store = Store(str(tmp_path))
    original, module.encode_checkpoint = module.encode_checkpoint, spy
    try:
        digest = module.CheckpointWriter().save(store, "a.pt", mine).result()
    finally:
        module.encode_checkpoint = original
    assert threads == [threading.get_ident()]
    assert digest == real(mine)[1]
    back = load_checkpoint(store, "a.pt")
    assert torch.equal(back.model["w"], weights.cpu())
    assert torch.equal(back.optimizer["state"][0]["exp_avg"], (weights * 2).cpu())
