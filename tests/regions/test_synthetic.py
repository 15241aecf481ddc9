from __future__ import annotations

import pandas as pd
import pytest
import torch

from hoptune.core import Store
from hoptune.regions import (
    get_family,
    ingest,
    iter_batches,
    load_config,
    load_shard,
    load_validation,
    write_demo,
    write_ratings,
)


def test_write_ratings_is_deterministic_and_well_formed(tmp_path):
    first = write_ratings(tmp_path / "a.csv", 50, 30, 600, rank=3, noise=0.3, seed=7)
    again = write_ratings(tmp_path / "b.csv", 50, 30, 600, rank=3, noise=0.3, seed=7)
    other = write_ratings(tmp_path / "c.csv", 50, 30, 600, rank=3, noise=0.3, seed=8)
    assert first.read_bytes() == again.read_bytes() != other.read_bytes()
    table = pd.read_csv(first)
    assert list(table.columns) == ["user_id", "item_id", "rating"]
    assert len(table) == 600 and not table.duplicated(["user_id", "item_id"]).any()
    assert set(table["rating"]) <= {1, 2, 3, 4, 5} and table["rating"].nunique() == 5
    assert table["user_id"].str.fullmatch(r"u\d+").all()
    assert table["item_id"].str.fullmatch(r"i\d+").all()


def test_write_ratings_refuses_more_rows_than_cells(tmp_path):
    with pytest.raises(ValueError, match=r"n_rows must be in 1\.\.6, got 7"):
        write_ratings(tmp_path / "x.csv", 2, 3, 7, rank=1, noise=0.1, seed=0)


def test_popularity_skew_concentrates_ratings_on_few_items(tmp_path):
    def top_share(skew: float) -> float:
        path = write_ratings(tmp_path / f"{skew}.csv", 100, 100, 2000, 2, 0.3, 0, skew=skew)
        counts = pd.read_csv(path)["item_id"].value_counts()
        return counts.iloc[:10].sum() / counts.sum()

    assert top_share(1.4) > top_share(0.2) + 0.2


def test_demo_regions_differ_and_matrix_factorisation_learns_them(workdir):
    config = load_config(write_demo(workdir / "demo"))
    assert config.path == workdir / "demo" / "hoptune.toml"
    assert list(config.regions) == ["north", "south", "east"]
    store = Store(str(workdir / "store"))
    results = {}
    for region in config.regions.values():
        assert (region.family, region.shards, region.epochs) == ("rating_mf", 2, 3)
        assert set(region.space) == {"lr", "embedding_dim", "reg"}
        manifest = ingest(region, store).manifest
        family = get_family(region)
        validation = load_validation(store, manifest)
        baseline = (validation["rating"] - manifest["meta"]["rating_mean"]).pow(2).mean().sqrt()
        torch.manual_seed(0)
        model = family.build({**region.params, "lr": 0.02}, manifest["meta"])
        optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
        generator = torch.Generator().manual_seed(0)
        for _epoch in range(region.epochs):
            for k in range(region.shards):
                for batch in iter_batches(load_shard(store, manifest, k), 256, generator):
                    optimizer.zero_grad()
                    family.loss(model, batch).backward()
                    optimizer.step()
        results[region.name] = (baseline.item(), family.evaluate(model, validation))
    for baseline, rmse in results.values():
        assert rmse < 0.75 * baseline
    assert len({round(rmse, 2) for _, rmse in results.values()}) == 3
