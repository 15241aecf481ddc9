from __future__ import annotations

import pandas as pd
import pytest
import torch

from hoptune.core import DataError, Store, StoreError
from hoptune.regions import ingest, load_id_maps, load_shard, load_validation, read_manifest

MANIFEST_KEYS = {
    "region",
    "hash",
    "shards_reason",
    "source",
    "format",
    "task",
    "columns",
    "shards",
    "rows",
    "validation_rows",
    "seed",
    "validation_fraction",
    "files",
    "meta",
    "ingested_at",
}


class RecordingStore(Store):
    """A store that remembers the keys written, in order."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.written: list[str] = []

    def write_bytes(self, key: str, data: bytes) -> None:
        self.written.append(key)
        super().write_bytes(key, data)


@pytest.fixture
def recording(workdir) -> RecordingStore:
    return RecordingStore(str(workdir / "store"))


def test_ingest_writes_shards_then_the_manifest(rating_region, recording):
    result = ingest(rating_region(rows=60), recording)
    manifest = result.manifest
    assert result.changed
    assert set(manifest) == MANIFEST_KEYS
    folder = f"shards/north/{manifest['hash']}"
    assert recording.written == [
        f"{folder}/shard-0.parquet",
        f"{folder}/shard-1.parquet",
        f"{folder}/validation.parquet",
        f"{folder}/ids.json",
        "shards/north/manifest.json",
    ]
    assert manifest["files"] == {
        "shards": [f"{folder}/shard-0.parquet", f"{folder}/shard-1.parquet"],
        "validation": f"{folder}/validation.parquet",
        "ids": f"{folder}/ids.json",
    }
    assert (manifest["shards"], manifest["rows"], manifest["validation_rows"]) == (2, [24, 24], 12)
    assert manifest["columns"] == {"user": "user_id", "item": "item_id", "rating": "rating"}
    assert (manifest["task"], manifest["format"], manifest["region"]) == ("rating", "csv", "north")
    assert set(manifest["meta"]) == {"n_users", "n_items", "rating_range", "rating_mean"}
    assert (manifest["meta"]["n_users"], manifest["meta"]["n_items"]) == (7, 5)
    assert manifest["meta"]["rating_range"] == [1.0, 5.0]
    assert read_manifest(recording, "north") == manifest


def test_shards_and_validation_hold_exactly_the_input_rows(rating_region, store, workdir):
    manifest = ingest(rating_region(rows=60), store).manifest
    ids = load_id_maps(store, manifest)
    assert ids["user"] == sorted(ids["user"]) and len(ids["user"]) == 7
    parts = [load_shard(store, manifest, k) for k in range(2)] + [load_validation(store, manifest)]
    rows = sorted(
        (ids["user"][u], ids["item"][i], r)
        for part in parts
        for u, i, r in zip(
            part["user"].tolist(), part["item"].tolist(), part["rating"].tolist(), strict=True
        )
    )
    original = pd.read_csv(workdir / "data" / "north.csv", dtype={"user_id": str, "item_id": str})
    assert rows == sorted(original.itertuples(index=False, name=None))
    train = torch.cat([parts[0]["rating"], parts[1]["rating"]]).double()
    assert manifest["meta"]["rating_mean"] == pytest.approx(train.mean().item())


def test_ids_map_in_sorted_order_of_their_string_form(rating_region, store):
    text = "user_id,item_id,rating\n10,b,1\n9,a,2\n10,a,3\n2,c,4\n9,b,5\n"
    manifest = ingest(rating_region(text, settings="validation_fraction = 0.2"), store).manifest
    assert load_id_maps(store, manifest) == {"user": ["10", "2", "9"], "item": ["a", "b", "c"]}


def test_reingesting_unchanged_data_writes_nothing(rating_region, recording):
    region = rating_region()
    first = ingest(region, recording)
    listing = recording.list("shards")
    recording.written.clear()
    again = ingest(region, recording)
    assert not again.changed
    assert again.manifest == first.manifest
    assert recording.written == []
    assert recording.list("shards") == listing


def test_changed_data_or_settings_make_a_new_ingest(rating_region, store, write_csv):
    first = ingest(rating_region(rows=60), store).manifest
    reseeded = ingest(rating_region(rows=60, settings="seed = 1"), store)
    assert reseeded.changed and reseeded.manifest["hash"] != first["hash"]
    grown = ingest(rating_region(rows=61), store)
    assert grown.changed and grown.manifest["hash"] not in (
        first["hash"],
        reseeded.manifest["hash"],
    )
    assert read_manifest(store, "north")["hash"] == grown.manifest["hash"]
    assert store.exists(first["files"]["validation"])  # a study in flight keeps its shards


def test_an_incomplete_ingest_is_written_again(rating_region, store):
    region = rating_region()
    manifest = ingest(region, store).manifest
    store.delete(manifest["files"]["shards"][1])
    again = ingest(region, store)
    assert again.changed and again.manifest["hash"] == manifest["hash"]
    assert store.exists(manifest["files"]["shards"][1])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "user_id,item_id,rating\nu1,i1,3\nu2,i2,3\nu3,i3,7\n",
            "data/north.csv: column 'rating': row 3: value 7.0 outside rating_range [1.0, 5.0]",
        ),
        (
            "user_id,item_id,rating\nu1,i1,3\nu2,i2,3\n",
            "data/north.csv: 2 data rows are too few for 2 shards and a validation set",
        ),
        (
            "user_id,item_id\nu1,i1\n",
            "data/north.csv: column 'rating': no such column (the file has: user_id, item_id)",
        ),
    ],
)
def test_bad_data_leaves_no_new_file(rating_region, store, workdir, text, message):
    before = ingest(rating_region(rows=60), store).manifest
    listing = store.list("")
    region = rating_region(text)
    with pytest.raises(DataError) as caught:
        ingest(region, store)
    assert str(caught.value) == message
    assert store.list("") == listing
    assert read_manifest(store, "north") == before
    fresh = Store(str(workdir / "fresh"))
    with pytest.raises(DataError):
        ingest(region, fresh)
    assert fresh.list("") == []


def test_missing_file_is_a_data_error(rating_region, store, workdir):
    region = rating_region()
    (workdir / "data" / "north.csv").unlink()
    with pytest.raises(DataError, match=r"^data/north.csv: no such file$"):
        ingest(region, store)


def test_read_manifest_says_how_to_ingest(store):
    with pytest.raises(StoreError) as caught:
        read_manifest(store, "north")
    assert str(caught.value) == (
        f"store {store.url}: region 'north' has no shards; run `hoptune ingest north`"
    )


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_tabular_features_are_standardised_with_training_statistics(
    tabular_region, store, workdir, task
):
    manifest = ingest(tabular_region(task, rows=200), store).manifest
    meta = manifest["meta"]
    train = [load_shard(store, manifest, k) for k in range(2)]
    validation = load_validation(store, manifest)
    x = torch.cat([part["x"] for part in train]).double()
    assert x.mean(0).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    assert x.std(0, unbiased=False).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)

    means = torch.tensor(meta["feature_means"], dtype=torch.float64)
    stds = torch.tensor(meta["feature_stds"], dtype=torch.float64)
    parts = [*train, validation]
    raw = torch.cat([part["x"].double() for part in parts]) * stds + means
    labels = torch.cat([part["y"].double() for part in parts])
    rows = sorted(zip(*raw.round(decimals=4).T.tolist(), labels.tolist(), strict=True))
    original = pd.read_csv(workdir / "data" / "west.csv").astype(float)
    assert rows == sorted(original.round(4).itertuples(index=False, name=None))

    assert meta["n_features"] == 2
    if task == "classification":
        assert set(meta) == {"n_features", "feature_means", "feature_stds", "n_classes"}
        assert meta["n_classes"] == 2
    else:
        assert set(meta) == {"n_features", "feature_means", "feature_stds", "label_mean"}
        y = torch.cat([part["y"] for part in train]).double()
        assert meta["label_mean"] == pytest.approx(y.mean().item(), rel=1e-6)
    with pytest.raises(StoreError, match="has no ids"):
        load_id_maps(store, manifest)
