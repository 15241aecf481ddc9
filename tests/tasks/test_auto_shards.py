"""``shards = "auto"``: the shard count from the data size and the measured costs."""

from __future__ import annotations

from hoptune.core import Store
from hoptune.regions import AUTO_ROWS_PER_SHARD, ingest, load_config
from hoptune.tasks.plan import MAX_OVERHEAD_SHARE, choose_shards

GIB = 2**30


def test_small_data_is_one_shard_that_every_worker_holds() -> None:
    # 10,000 rows at 10 us a row: 0.1 s of training against 0.05 s a hop outside it
    k, why = choose_shards(10_000, 20, 1e-5, 0.05, workers=4, worker_memory=16 * GIB)
    assert k == 1
    assert why.startswith("auto: a hop of 0.1 s would spend 33% outside training")


def test_large_data_is_one_shard_per_worker() -> None:
    k, why = choose_shards(10_000_000, 20, 1e-5, 0.05, workers=4, worker_memory=16 * GIB)
    assert k == 4 and "4 worker(s)" in why


def test_the_largest_count_whose_hops_keep_the_overhead_share() -> None:
    # a hop of rows/K * 1e-5 s against 0.05 s: K = 3 keeps it under 3%, K = 4 does not
    rows = 600_000
    k, why = choose_shards(rows, 20, 1e-5, 0.05, workers=8, worker_memory=16 * GIB)
    assert k == 3
    share = 0.05 / (0.05 + rows / 3 * 1e-5)
    assert share <= MAX_OVERHEAD_SHARE < 0.05 / (0.05 + rows / 4 * 1e-5)
    assert "4 shards would spend" in why


def test_memory_forces_more_shards() -> None:
    # 100 million rows of 20 bytes, 2 GiB a worker: a quarter of it is 0.5 GiB a shard
    k, why = choose_shards(100_000_000, 20, 1e-9, 0.05, workers=2, worker_memory=2 * GIB)
    assert k == 4 and "of a worker's 2.0 GiB" in why


def test_without_costs_the_rule_from_rows() -> None:
    k, why = choose_shards(AUTO_ROWS_PER_SHARD * 3 + 1, 20, None, None, workers=8,
                           worker_memory=64 * GIB)
    assert k == 4 and "no recorded costs" in why
    assert choose_shards(AUTO_ROWS_PER_SHARD * 3, 20, None, None, workers=2,
                         worker_memory=64 * GIB)[0] == 2
    assert choose_shards(1000, 20, None, None, workers=2, worker_memory=64 * GIB)[0] == 1


def _config(tmp_path, shards: str) -> object:  # noqa: ANN001
    data = tmp_path / "north.csv"
    data.write_text("user_id,item_id,rating\n" + "".join(
        f"u{i % 7},i{i % 5},{1 + i % 5}\n" for i in range(200)))
    path = tmp_path / "hoptune.toml"
    path.write_text(f'[regions.north]\ndata = "north.csv"\nfamily = "rating_mf"\n'
                    f"rating_range = [1, 5]\n{shards}")
    return load_config(path).region("north")


def test_auto_is_the_default_and_ingest_records_the_choice(tmp_path) -> None:
    region = _config(tmp_path, "")
    assert region.shards == "auto"
    store = Store(str(tmp_path / "store"))
    result = ingest(region, store, lambda rows, row_bytes, meta: (3, f"auto: {rows} rows"))
    assert result.manifest["shards"] == 3 and len(result.manifest["rows"]) == 3
    assert result.manifest["shards_reason"] == "auto: 160 rows"
    # the same data again keeps the K chosen then, whatever a new choice would say
    again = ingest(region, store, lambda *_: (1, "auto: other"))
    assert not again.changed and again.manifest["shards"] == 3


def test_an_integer_still_forces_k(tmp_path) -> None:
    region = _config(tmp_path, "shards = 2\n")
    manifest = ingest(region, Store(str(tmp_path / "store")),
                      lambda *_: (5, "never asked")).manifest
    assert manifest["shards"] == 2 and manifest["shards_reason"] == "set in the configuration"


def test_auto_through_the_command_line_one_shard_every_worker_holds(tmp_path) -> None:
    """A new user's small region left at the default: ``hoptune ingest`` chooses one shard,
    ``hoptune tune --local-workers 2`` trains its trials with both workers holding it (task
    parallelism, one hop an epoch), and ``hoptune status`` and ``hoptune plan`` say why."""
    import os
    import subprocess
    import sys

    from hoptune.tuner import HopRecords, StudyDB, WorkerRecords

    data = tmp_path / "north.csv"
    data.write_text("user_id,item_id,rating\n" + "".join(
        f"u{i % 40},i{i % 30},{1 + i % 5}\n" for i in range(1200)))
    (tmp_path / "hoptune.toml").write_text(
        '[defaults]\nepochs = 2\ntrials = 2\nparallel = 2\nbatch_size = 64\n'
        '[defaults.pruner]\nmin_epochs = 2\n'  # no rung in 2 epochs: every trial ends
        '[defaults.space]\nlr = { type = "real", low = 0.001, high = 0.1, prior = "log" }\n'
        '[regions.north]\ndata = "north.csv"\nfamily = "rating_mf"\nrating_range = [1, 5]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOPTUNE_")}
    env.update(HOPTUNE_TORCH_THREADS="1", HOPTUNE_HOME=str(tmp_path / ".hoptune"),
               PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]))

    def hoptune(*args: str) -> str:
        done = subprocess.run(["hoptune", *args], cwd=tmp_path, env=env, text=True,
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "north: shards: 1 (auto: no recorded costs" in hoptune("ingest")
    hoptune("tune", "north", "--local-workers", "2", "--no-progress")
    db = StudyDB(f"sqlite:///{tmp_path / '.hoptune' / 'studies.db'}")
    try:
        (study,) = db.studies()
        assert study.region_config["shards"] == 1  # the study keeps the K its data has
        trials = db.trials(study.id)
        assert [t.state for t in trials] == ["done", "done"]
        hops = HopRecords(db).all(study_id=study.id)
        assert sorted((h.trial_id, h.epoch, h.shard) for h in hops) == sorted(
            (t.id, e, 0) for t in trials for e in range(2))  # one hop an epoch, shard 0
        # both local workers held the one shard (replicas of its queue): none sat idle
        owned = [w["shards"] for w in WorkerRecords(db).all()]
    finally:
        db.dispose()
    assert len(owned) == 2 and all(["north", 0] in o for o in owned), owned
    assert "shards: 1 (auto:" in hoptune("status")
    assert "shards: 1 (auto:" in hoptune("plan", "north", "--workers", "2")
