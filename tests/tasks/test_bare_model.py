"""A hop's model without memory, for its checkpoint to fill: built afresh each time, the same as
a build."""

from __future__ import annotations

import torch

from hoptune.core import Store
from hoptune.regions import get_family, ingest, load_config
from hoptune.tasks.hop._training import bare_trial_model, build_trial_model


def test_a_bare_model_is_a_fresh_copy_that_takes_a_checkpoint_like_a_build(make_config,
                                                                            rt) -> None:
    region = load_config(make_config()).region("north")
    meta = ingest(region, Store(rt.settings.store_url)).manifest["meta"]
    params = {"lr": 0.01, "embedding_dim": 8}
    first, second = (bare_trial_model(region, params, meta) for _ in range(2))
    assert first is not second
    assert all(p.is_meta for p in (*first.parameters(), *second.parameters()))
    built = build_trial_model(region, params, 3, meta)
    first.load_state_dict(built.state_dict(), assign=True)
    assert not any(p.is_meta for p in first.parameters())
    assert all(p.is_meta for p in second.parameters())  # the copies share nothing
    with torch.device("meta"):
        fresh = get_family(region).build(params, meta)
    assert [(n, p.shape, p.dtype) for n, p in first.named_parameters()] == [
        (n, p.shape, p.dtype) for n, p in fresh.named_parameters()]
    batch = {"user": torch.tensor([0, 1]), "item": torch.tensor([1, 0])}
    assert torch.equal(first(batch), built(batch))
    other = bare_trial_model(region, {**params, "embedding_dim": 4}, meta)
    assert other.state_dict()["user_vectors.weight"].shape[1] == 4  # its own params
