"""Registry versions are whole or absent, on a file system and on an object store alike."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
import torch

from hoptune.core import Store
from hoptune.tuner import (
    champion_card,
    clean_staging,
    next_version,
    set_champion,
    versions,
    write_version,
)

WEIGHTS = {"w": torch.arange(6.0).reshape(2, 3)}


def _card(version: str) -> dict:
    return {"version": version, "metric": 0.5}


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "file":
        return Store(str(tmp_path / "store"))
    return Store(f"memory://registry-{uuid.uuid4().hex}")


def test_a_written_version_is_whole(store: Store) -> None:
    write_version(store, "north", "v0001", WEIGHTS, _card("v0001"), {"user": ["a"]})
    set_champion(store, "north", "v0001", "now")
    assert [c["version"] for c in versions(store, "north")] == ["v0001"]
    assert champion_card(store, "north") == _card("v0001")
    assert store.list("models/north") == ["models/north/champion.json",
                                          "models/north/v0001/card.json",
                                          "models/north/v0001/ids.json",
                                          "models/north/v0001/weights.pt"]
    assert next_version(store, "north") == "v0002"


def test_a_writer_that_dies_leaves_no_version_and_its_leftovers_are_removed(
        store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    write_json = store.write_json

    def die_at_the_card(key: str, value: object) -> None:
        if key.endswith("card.json"):
            raise KeyboardInterrupt("killed while writing the card")
        write_json(key, value)

    monkeypatch.setattr(store, "write_json", die_at_the_card)
    with pytest.raises(KeyboardInterrupt):
        write_version(store, "north", "v0001", WEIGHTS, _card("v0001"), {"user": ["a"]})
    monkeypatch.undo()
    assert versions(store, "north") == []
    assert not store.exists("models/north/v0001/card.json")
    assert next_version(store, "north") == "v0001"
    # an older writer's half version: weights, no card
    store.write_bytes("models/north/v0002/weights.pt", b"half")
    assert versions(store, "north") == []
    with caplog.at_level(logging.WARNING, logger="hoptune.tuner._registry"):
        removed = clean_staging(store, "north")
    assert removed == ["v0001", "v0002"]
    assert store.list("models/north") == []
    assert caplog.text.count("left half-written by a writer that died") == 2


def test_weights_loaded_from_a_flat_checkpoint_are_saved_on_their_own(store: Store) -> None:
    from hoptune.tasks.worker import _flat
    from hoptune.tuner import load_weights

    big = {"w": torch.arange(6.0).reshape(2, 3), "n": torch.arange(3),
           "exp_avg": torch.zeros(100_000)}  # the optimizer's state, in the same buffer
    data = _flat.encode(big)
    viewed = _flat.decode(data, len(data))
    weights = {"w": viewed["w"], "n": viewed["n"], "tied": viewed["w"]}  # views of one buffer
    write_version(store, "north", "v0001", weights, _card("v0001"))
    assert store.size("models/north/v0001/weights.pt") < 10_000  # not the whole buffer
    back = load_weights(store, "north", "v0001")
    assert torch.equal(back["w"], big["w"]) and torch.equal(back["n"], big["n"])
    assert back["tied"].data_ptr() == back["w"].data_ptr()  # named twice, saved once
