"""The flat checkpoint layout: what it carries comes back equal (types, dtypes, shapes, keys),
its tensors load as views of the bytes read, and what it does not carry is written with
torch.save and reads back as before."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hoptune.core import CheckpointError, Store
from hoptune.tasks.worker import _flat
from hoptune.tasks.worker._checkpoint import Checkpoint, load_checkpoint, save_checkpoint


def _adamw_state() -> tuple[list[torch.Tensor], dict]:
    params = [torch.randn(5, 3), torch.randn(7), torch.randn(())]
    optimizer = torch.optim.AdamW(params, lr=1e-3, betas=(0.8, 0.99))
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()
    return params, optimizer.state_dict()


def test_what_the_layout_carries_comes_back_equal(tmp_path) -> None:
    params, state = _adamw_state()
    model = {"a": params[0], "b": params[1], "c": params[2], "int": torch.arange(3),
             "bool": torch.tensor([True, False]), "empty": torch.zeros(0, 4),
             "half": torch.randn(3).bfloat16(), "strided": torch.randn(4, 6)[:, ::2]}
    store = Store(str(tmp_path))
    save_checkpoint(store, "k.pt", Checkpoint(model=model, optimizer=state, samples=9,
                                              loss=float("nan")))
    assert store.read_bytes("k.pt").startswith(_flat.MAGIC)
    back = load_checkpoint(store, "k.pt")
    assert back.samples == 9 and math.isnan(back.loss)
    for name, tensor in model.items():
        got = back.model[name]
        assert (got.dtype, got.shape) == (tensor.dtype, tensor.shape), name
        assert torch.equal(got, tensor), name
    # int keys, tuples, None and booleans of the optimizer's state as they were
    assert back.optimizer["param_groups"] == state["param_groups"]
    assert back.optimizer["param_groups"][0]["betas"] == (0.8, 0.99)
    assert sorted(back.optimizer["state"]) == [0, 1, 2]
    for i, entry in state["state"].items():
        for name, value in entry.items():
            assert torch.equal(back.optimizer["state"][i][name], value), (i, name)
    # and an optimizer takes it: the next step is bitwise the same from either
    again = [torch.nn.Parameter(back.model[k].clone()) for k in ("a", "b", "c")]
    resumed = torch.optim.AdamW(again, lr=1e-3)
    resumed.load_state_dict(back.optimizer)
    first = [torch.nn.Parameter(p.clone()) for p in params]
    original = torch.optim.AdamW(first, lr=1e-3)
    original.load_state_dict(state)
    for group in (again, first):
        for p in group:
            p.grad = torch.ones_like(p)
    resumed.step()
    original.step()
    for x, y in zip(again, first, strict=True):
        assert torch.equal(x, y)


def test_loaded_tensors_are_views_of_the_bytes_read_and_train_in_place(tmp_path) -> None:
    store = Store(str(tmp_path))
    save_checkpoint(store, "k.pt", Checkpoint(model={"w": torch.arange(6.0), "v": torch.ones(2)},
                                              optimizer={}, samples=1, loss=0.0))
    back = load_checkpoint(store, "k.pt")
    w, v = back.model["w"], back.model["v"]
    assert w.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()  # one buffer
    w.add_(1.0)  # writable: a model takes them as its parameters
    assert torch.equal(w, torch.arange(1.0, 7.0)) and torch.equal(v, torch.ones(2))
    # views of one loaded buffer are disjoint: the next checkpoint is flat again
    save_checkpoint(store, "k2.pt", back)
    assert store.read_bytes("k2.pt").startswith(_flat.MAGIC)
    assert torch.equal(load_checkpoint(store, "k2.pt").model["w"], w)


def test_equal_values_give_equal_bytes(tmp_path) -> None:
    store = Store(str(tmp_path))
    for key in ("a.pt", "b.pt"):
        save_checkpoint(store, key, Checkpoint(model={"w": torch.arange(5.0)}, optimizer={},
                                               samples=1, loss=0.5))
    assert store.read_bytes("a.pt") == store.read_bytes("b.pt")  # padding is zero


def test_tied_weights_are_written_with_torch_save_and_stay_tied(tmp_path) -> None:
    store = Store(str(tmp_path))
    shared = torch.randn(4, 2)
    save_checkpoint(store, "t.pt", Checkpoint(model={"enc": shared, "dec": shared[1:]},
                                              optimizer={}, samples=1, loss=0.0))
    assert not store.read_bytes("t.pt").startswith(_flat.MAGIC)
    back = load_checkpoint(store, "t.pt")
    back.model["enc"][1, 0] = 42.0
    assert back.model["dec"][0, 0] == 42.0  # still one tensor's memory


@pytest.mark.parametrize("value", [{1.5: torch.ones(1)}, {"x": {1, 2}}, {"x": torch.float32}])
def test_what_the_layout_does_not_carry_is_refused(value) -> None:
    with pytest.raises(_flat.NotFlat):
        _flat.encode(value)


def test_a_damaged_header_is_a_checkpoint_error_naming_it(tmp_path) -> None:
    store = Store(str(tmp_path))
    data = bytearray(_flat.encode({"w": torch.arange(4.0)}))
    data[len(_flat.MAGIC)] = 0xFF  # the header's length runs past the end
    store.write_bytes("h.pt", bytes(data))  # no trailer: nothing to catch it before decoding
    with pytest.raises(CheckpointError, match="h.pt.*header runs past"):
        load_checkpoint(store, "h.pt")


def test_a_tensor_outside_the_bytes_is_refused() -> None:
    data = _flat.encode({"w": torch.arange(4.0)})  # 16 bytes, padded to 64
    cut = len(data) - 64 + 8  # half the tensor's bytes
    with pytest.raises(ValueError, match="outside"):
        _flat.decode(np.array(data[:cut]), cut)
