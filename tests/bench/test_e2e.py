"""bench/e2e.py's verdicts: means over the seeds, first-hop medians, ratios of the means."""

from __future__ import annotations

from pathlib import Path

from bench._e2e_report import METHODS, _summary, _table
from bench.e2e import _home, region_seed


def _seed(seed: int, wall: float, best: float, first_hop: float) -> dict:
    run: dict = {"seed": seed, "first_hop_warm_s": first_hop, "first_hop_cold_s": 4 * first_hop}
    for method, field in METHODS:
        run[method] = {"wall_s": wall, "epochs": 10 * (seed + 1), field: best}
    run["hoptune_fused"].update(fuse=4, passes=50 + seed, cohort_passes=20, joined_passes=seed)
    run["optuna"]["wall_s"] = run["optuna_nightly"]["wall_s"] = wall + 1.0
    return run


def test_the_verdicts_compare_means_over_seeds_and_median_first_hops() -> None:
    runs = [_seed(0, 1.0, 0.8, 0.5), _seed(1, 2.0, 0.7, 3.0), _seed(2, 6.0, 0.9, 1.0)]
    f = _summary(runs)
    assert f["hoptune"] == {"wall_s": 3.0, "epochs": 20.0, "best": 0.8}
    assert f["nightly"] == {"wall_s": 3.0, "epochs": 20.0, "mean_best": 0.8}
    assert f["hoptune_fused"]["fuse"] == 4
    # the passes are counted over the seeds, not averaged
    assert [f["hoptune_fused"][k] for k in ("passes", "cohort_passes", "joined_passes")] == [
        153, 60, 3]
    # medians: one slow start among three does not decide the verdict, nor hide in a mean
    assert f["first_hop_warm_s"] == 1.0
    assert f["first_hop_cold_s"] == 4.0
    # the ratios are of the means (3 s over 4 s), not the mean of the seeds' ratios (0.675)
    assert f["study_vs_optuna"] == 0.75
    assert f["regions10_vs_optuna"] == 0.75
    assert f["fused_study_vs_optuna"] == 0.75


def test_the_table_gives_every_seeds_figure_and_the_mean() -> None:
    runs = [_seed(0, 1.0, 0.8, 0.5), _seed(1, 2.0, 0.7, 3.0)]
    f = {**_summary(runs), "runs": runs, "regions": 10}
    rows = _table(f).splitlines()
    assert len(rows) == len(METHODS)
    assert rows[0] == ("| `hoptune tune`, warm workers | 1.00, 2.00 (**1.50**) | 10, 20 (**15**) | "
                       "0.8000, 0.7000 (**0.7500**) |")
    assert "`fuse = 4`" in rows[1]


def test_each_seed_sets_hoptunes_seed_and_fuse(tmp_path: Path) -> None:
    home = _home(tmp_path / "h", ["a"], trials=4, epochs=2, data=tmp_path, seed=2, fuse=3)
    text = (home / "hoptune.toml").read_text()
    assert "\nseed = 2\n" in text and "\nfuse = 3\n" in text and "[regions.a]" in text


def test_each_region_of_a_night_has_its_own_seed(tmp_path: Path) -> None:
    # Optuna's in-process run of a region reads its seed from the same configuration
    from hoptune.regions import load_config

    names = ["solo", "r0", "r1", "r2"]
    for name in names:
        (tmp_path / f"{name}.csv").write_text("user,item,rating\n1,1,3.0\n")
    seeds = {}
    for seed in (0, 1, 2):
        home = _home(tmp_path / f"h{seed}", names, trials=4, epochs=2, data=tmp_path, seed=seed)
        config = load_config(home / "hoptune.toml")
        for index, name in enumerate(names):
            assert config.region(name).seed == region_seed(seed, index)
            seeds[seed, name] = config.region(name).seed
    assert [seeds[s, "solo"] for s in (0, 1, 2)] == [0, 1, 2]  # the one region: as before
    night = [seeds[s, n] for s in (0, 1, 2) for n in names[1:]]
    assert len(set(night)) == len(night)  # no two regions of any run share a seed
