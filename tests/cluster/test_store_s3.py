"""The store on S3 (moto's server mode, started by the tests): objects, retries over an
outage, and registry versions that appear whole on a store with no rename."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from hoptune.core import Store, StoreError
from hoptune.tuner import (
    champion_card,
    clean_staging,
    next_version,
    set_champion,
    versions,
    write_version,
)
from tests.cluster.s3 import MotoServer, Outage

pytestmark = pytest.mark.xdist_group("cluster")

WEIGHTS = {"w": torch.arange(6.0).reshape(2, 3)}


def test_objects_are_written_read_listed_and_deleted_on_s3(s3_env: dict[str, str]) -> None:
    store = Store(s3_env["HOPTUNE_STORE_URL"])
    assert not store.local and store.list("checkpoints") == []
    store.write_bytes("checkpoints/study-1/a.pt", b"0123456789")
    store.write_with("checkpoints/study-1/b.pt", lambda fh: fh.write(b"xyz"), durable=False)
    store.write_json("regions/north/manifest.json", {"hash": "h"})
    assert store.read_bytes("checkpoints/study-1/a.pt") == b"0123456789"
    assert store.read_tail("checkpoints/study-1/a.pt", 3) == b"789"
    assert store.size("checkpoints/study-1/b.pt") == 3
    assert store.read_json("regions/north/manifest.json") == {"hash": "h"}
    assert store.exists("checkpoints/study-1/a.pt") and store.exists("checkpoints")
    assert store.list("checkpoints") == ["checkpoints/study-1/a.pt", "checkpoints/study-1/b.pt"]
    # another client (another host) sees what this one wrote at once: no cached listing
    other = Store(s3_env["HOPTUNE_STORE_URL"])
    assert other.list("checkpoints") == store.list("checkpoints")
    store.write_bytes("checkpoints/study-1/c.pt", b"c")
    assert len(other.list("checkpoints/study-1")) == 3
    store.delete("checkpoints/study-1/a.pt")
    store.delete("checkpoints/nothing-here")
    assert other.list("checkpoints") == ["checkpoints/study-1/b.pt", "checkpoints/study-1/c.pt"]
    store.delete("checkpoints")
    assert other.list("checkpoints") == [] and not other.exists("checkpoints/study-1/b.pt")
    with pytest.raises(StoreError, match=r"^store s3://.*: no object checkpoints/gone\.pt$"):
        store.read_bytes("checkpoints/gone.pt")


@pytest.fixture
def outage(moto_server: MotoServer, s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch):
    """The store's S3 API behind a relay the test can take down; botocore tries once, so
    what carries a request over the outage is hoptune's own retrying."""
    relay = Outage(moto_server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("HOPTUNE_STORE_RETRY_SECONDS", "0.1")
    yield relay
    relay.close()


def test_a_store_request_rides_over_an_outage_of_the_s3_api(
        outage: Outage, s3_env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    store = Store(s3_env["HOPTUNE_STORE_URL"])
    store.write_bytes("shards/north/0.parquet", b"before")
    outage.down = True
    back = threading.Timer(0.8, lambda: setattr(outage, "down", False))
    back.start()
    with caplog.at_level(logging.WARNING, logger="hoptune.core._retry"):
        store.write_bytes("shards/north/1.parquet", b"during")
        assert store.read_bytes("shards/north/0.parquet") == b"before"
    back.join()
    assert outage.refused >= 1
    assert "retry 1 of 6" in caplog.text
    assert store.read_bytes("shards/north/1.parquet") == b"during"


def test_an_outage_longer_than_the_retries_is_one_store_error(
        outage: Outage, s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HOPTUNE_STORE_RETRIES", "2")
    store = Store(s3_env["HOPTUNE_STORE_URL"])
    outage.down = True
    with caplog.at_level(logging.WARNING, logger="hoptune.core._retry"), \
            pytest.raises(StoreError) as failed:
        store.read_bytes("shards/north/0.parquet")
    message = str(failed.value)
    assert message.startswith(f"store {s3_env['HOPTUNE_STORE_URL']}: read shards/north/0.parquet")
    assert "\n" not in message and "Connect" in message
    # the first try and two retries, then no more
    assert "retry 2 of 2" in caplog.text and "retry 3" not in caplog.text
    assert outage.refused >= 3


def test_a_missing_object_is_not_retried(outage: Outage, s3_env: dict[str, str],
                                          caplog: pytest.LogCaptureFixture) -> None:
    store = Store(s3_env["HOPTUNE_STORE_URL"])
    with caplog.at_level(logging.WARNING, logger="hoptune.core._retry"), \
            pytest.raises(StoreError, match="no object"):
        store.read_bytes("nothing")
    assert "retry" not in caplog.text


@pytest.mark.parametrize("value", ["many", "-1"])
def test_a_bad_retry_setting_is_refused_naming_it(value: str, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path) -> None:
    from hoptune.core import ConfigError

    monkeypatch.setenv("HOPTUNE_STORE_RETRIES", value)
    with pytest.raises(ConfigError, match=f"^HOPTUNE_STORE_RETRIES: '{value}' is not"):
        Store(str(tmp_path))


def _card(version: str) -> dict:
    return {"version": version, "metric": 0.5}


def test_registry_versions_appear_whole_through_the_pointer_on_s3(
        s3_env: dict[str, str]) -> None:
    store = Store(s3_env["HOPTUNE_STORE_URL"])
    write_version(store, "north", "v0001", WEIGHTS, _card("v0001"), {"user": ["a"]})
    set_champion(store, "north", "v0001", "now")
    assert store.read_json("models/north/champion.json") == {
        "version": "v0001", "versions": ["v0001"], "updated_at": "now"}
    # a writer that died after its card, before the pointer: a whole folder, yet no version
    store.write_bytes("models/north/v0002/weights.pt", b"w")
    store.write_json("models/north/v0002/card.json", _card("v0002"))
    assert [c["version"] for c in versions(store, "north")] == ["v0001"]
    assert next_version(store, "north") == "v0002"
    assert champion_card(store, "north") == _card("v0001")
    assert clean_staging(store, "north") == ["v0002"]
    write_version(store, "north", "v0002", WEIGHTS, _card("v0002"))
    assert [c["version"] for c in versions(store, "north")] == ["v0001", "v0002"]
    assert champion_card(store, "north") == _card("v0001")  # written, not yet promoted
    set_champion(store, "north", "v0002", "later")
    assert champion_card(store, "north") == _card("v0002")


def test_a_registry_written_before_the_pointer_named_versions_is_read_and_carried_on(
        s3_env: dict[str, str]) -> None:
    store = Store(s3_env["HOPTUNE_STORE_URL"])
    for version in ("v0001", "v0002"):
        store.write_bytes(f"models/north/{version}/weights.pt", b"w")
        store.write_json(f"models/north/{version}/card.json", _card(version))
    store.write_json("models/north/champion.json", {"version": "v0002", "updated_at": "then"})
    assert [c["version"] for c in versions(store, "north")] == ["v0001", "v0002"]
    assert clean_staging(store, "north") == []
    assert next_version(store, "north") == "v0003"
    write_version(store, "north", "v0003", WEIGHTS, _card("v0003"))
    assert store.read_json("models/north/champion.json")["versions"] == [
        "v0001", "v0002", "v0003"]
    assert champion_card(store, "north") == _card("v0002")
