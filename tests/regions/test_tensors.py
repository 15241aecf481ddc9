from __future__ import annotations

import pytest
import torch

from hoptune.core import StoreError
from hoptune.regions import ingest, iter_batches, load_shard, load_validation


def test_rating_tensors(rating_region, store):
    manifest = ingest(rating_region(rows=60), store).manifest
    shard = load_shard(store, manifest, 1)
    assert {k: v.dtype for k, v in shard.items()} == {
        "user": torch.int64,
        "item": torch.int64,
        "rating": torch.float32,
    }
    assert len(shard["user"]) == manifest["rows"][1]
    assert int(shard["user"].max()) < manifest["meta"]["n_users"]
    assert len(load_validation(store, manifest)["rating"]) == manifest["validation_rows"]


@pytest.mark.parametrize(
    ("task", "label"), [("classification", torch.int64), ("regression", torch.float32)]
)
def test_tabular_tensors(tabular_region, store, task, label):
    manifest = ingest(tabular_region(task, rows=50), store).manifest
    shard = load_shard(store, manifest, 0)
    assert set(shard) == {"x", "y"}
    assert shard["x"].dtype == torch.float32 and shard["x"].shape == (manifest["rows"][0], 2)
    assert shard["y"].dtype == label


def test_unknown_shard_is_a_store_error(rating_region, store):
    manifest = ingest(rating_region(), store).manifest
    with pytest.raises(StoreError) as caught:
        load_shard(store, manifest, 2)
    assert str(caught.value) == "region 'north': no shard 2 (its ingest has 2 shards)"


def data(rows: int = 10) -> dict[str, torch.Tensor]:
    return {"a": torch.arange(rows), "b": torch.arange(rows, dtype=torch.float32) * 2}


def test_iter_batches_is_one_shuffled_pass():
    batches = list(iter_batches(data(), 4, torch.Generator().manual_seed(0)))
    assert [len(b["a"]) for b in batches] == [4, 4, 2]
    seen = torch.cat([b["a"] for b in batches])
    assert sorted(seen.tolist()) == list(range(10)) and seen.tolist() != list(range(10))
    for batch in batches:
        assert torch.equal(batch["b"], batch["a"].float() * 2)


def test_iter_batches_is_deterministic_given_the_generator():
    def order(seed: int) -> list[int]:
        batches = iter_batches(data(50), 8, torch.Generator().manual_seed(seed))
        return torch.cat([b["a"] for b in batches]).tolist()

    assert order(3) == order(3)
    assert order(3) != order(4)
    expected = torch.randperm(50, generator=torch.Generator().manual_seed(3)).tolist()
    assert order(3) == expected


def test_iter_batches_refuses_bad_input():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        list(iter_batches(data(), 0, torch.Generator()))
    with pytest.raises(ValueError, match="different lengths"):
        list(iter_batches({"a": torch.arange(3), "b": torch.arange(4)}, 2, torch.Generator()))


def test_stacked_batches_hold_each_trials_own_batches_row_by_row() -> None:
    from hoptune.regions._tensors import iter_batches, iter_stacked_batches

    data = {"x": torch.arange(23.0).reshape(23, 1) * 1.5, "y": torch.arange(23)}
    seeds = [4, 9, 1]
    alone = [list(iter_batches(data, 5, torch.Generator().manual_seed(s))) for s in seeds]
    stacked = list(iter_stacked_batches(data, 5, [torch.Generator().manual_seed(s)
                                                  for s in seeds]))
    assert len(stacked) == len(alone[0]) == 5  # the last batch holds the remainder: 3 rows
    for j, batch in enumerate(stacked):
        for i in range(len(seeds)):
            for name in data:
                assert torch.equal(batch[name][i], alone[i][j][name])
