"""Search spaces: parsing, every configuration error, round trips, sampling."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib

import numpy as np
import pytest

from hoptune.core import ConfigError
from hoptune.tuner import CategoricalDim, IntDim, RealDim, Space, parse_space
from hoptune.tuner._optimizer import skopt_dimensions

WHERE = "regions.toml: regions.eu.space"

EXAMPLE = """
[defaults.space]
lr = { type = "real", low = 1e-4, high = 1e-1, prior = "log" }
embedding_dim = { type = "int", low = 8, high = 64 }
weight_decay = { type = "real", low = 0, high = 0.1 }
activation = { type = "categorical", choices = ["relu", "tanh"] }
"""


@pytest.fixture
def space() -> Space:
    return parse_space(tomllib.loads(EXAMPLE)["defaults"]["space"], WHERE)


def test_parses_the_example(space: Space) -> None:
    assert space.names == ("activation", "embedding_dim", "lr", "weight_decay")
    assert space.dimensions == (
        CategoricalDim("activation", ("relu", "tanh")),
        IntDim("embedding_dim", 8, 64, "linear"),
        RealDim("lr", 1e-4, 1e-1, "log"),
        RealDim("weight_decay", 0.0, 0.1, "linear"),
    )
    assert isinstance(space.dimensions[3].low, float)


def test_is_frozen(space: Space) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        space.dimensions = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        space.dimensions[0].choices = ("x",)  # type: ignore[misc]


def test_key_order_does_not_matter() -> None:
    a = {"type": "real", "low": 0.0, "high": 1.0}
    b = {"type": "categorical", "choices": [1, 2]}
    assert parse_space({"a": a, "b": b}, WHERE) == parse_space({"b": b, "a": a}, WHERE)


REAL = {"type": "real", "low": 0.0, "high": 1.0}
BAD_SPACES = [
    (
        {"lr": {"type": "real", "low": 0.1, "high": 0.01}},
        "lr: low (0.1) must be < high (0.01)",
    ),
    ({"emb": {"type": "int", "low": 8, "high": 8}}, "emb: low (8) must be < high (8)"),
    ({"act": {"type": "categorical", "choices": []}}, "act: choices must not be empty"),
    (
        {"act": {"type": "categorical", "choices": ["relu", "tanh", "relu"]}},
        "act: duplicate choice 'relu'",
    ),
    (
        {"lr": {"type": "real", "low": 0.0, "high": 0.1, "prior": "log"}},
        "lr: low (0.0) must be > 0 for prior 'log'",
    ),
    (
        {"n": {"type": "int", "low": -2, "high": 8, "prior": "log"}},
        "n: low (-2) must be > 0 for prior 'log'",
    ),
    (
        {"lr": {"type": "float", "low": 0.0, "high": 1.0}},
        "lr: unknown type 'float' (expected one of: categorical, int, real)",
    ),
    (
        {"lr": {"type": "real", "low": 0.1, "high": 1.0, "prior": "log10"}},
        "lr: unknown prior 'log10' (expected one of: linear, log)",
    ),
    ({"lr": {"type": "real", "high": 1.0}}, "lr: missing key 'low'"),
    ({"emb": {"type": "int", "low": 8}}, "emb: missing key 'high'"),
    ({"lr": {"type": "real", "low": 0.0, "high": "0.1"}}, "lr: high ('0.1') must be a number"),
    ({"lr": {"type": "real", "low": True, "high": 1.0}}, "lr: low (True) must be a number"),
    ({"lr": {"type": "real", "low": 0.0, "high": math.inf}}, "lr: high (inf) must be finite"),
    ({"emb": {"type": "int", "low": 8.5, "high": 64}}, "emb: low (8.5) must be an integer"),
    ({"emb": {"type": "int", "low": 8, "high": 64.0}}, "emb: high (64.0) must be an integer"),
    ({"emb": {"type": "int", "low": "8", "high": 64}}, "emb: low ('8') must be an integer"),
    (
        {"lr": {"type": "real", "low": 0.0, "high": 1.0, "step": 0.1}},
        "lr: unknown key 'step' (allowed for type 'real': high, low, prior, type)",
    ),
    (
        {"act": {"type": "categorical", "choices": ["a"], "low": 0}},
        "act: unknown key 'low' (allowed for type 'categorical': choices, type)",
    ),
    (
        {"lr": {"low": 0.0, "high": 1.0}},
        "lr: missing key 'type' (one of: categorical, int, real)",
    ),
    ({"lr": 0.1}, "lr: must be a table with a 'type', got 0.1"),
    ({"act": {"type": "categorical"}}, "act: missing key 'choices'"),
    (
        {"act": {"type": "categorical", "choices": "relu"}},
        "act: choices must be a list, got 'relu'",
    ),
    (
        {"act": {"type": "categorical", "choices": ["relu", 1]}},
        "act: choices must all be of one type, got 'relu' (str) and 1 (int)",
    ),
    (
        {"act": {"type": "categorical", "choices": [[1, 2]]}},
        "act: choice [1, 2] must be a string, an integer, a finite float or a boolean",
    ),
    (
        {"act": {"type": "categorical", "choices": [0.5, math.nan]}},
        "act: choice nan must be a string, an integer, a finite float or a boolean",
    ),
]


@pytest.mark.parametrize(("raw", "message"), BAD_SPACES, ids=[m for _, m in BAD_SPACES])
def test_bad_dimension_message(raw: dict, message: str) -> None:
    raw = {"ok": REAL, **raw}
    with pytest.raises(ConfigError) as info:
        parse_space(raw, WHERE)
    assert str(info.value) == f"{WHERE}.{message}"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (["lr"], "must be a table of dimensions, got ['lr']"),
        ({}, "must declare at least one dimension"),
        ({"learning rate": REAL}, "dimension name 'learning rate' must be an identifier"),
    ],
)
def test_bad_space_message(raw: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_space(raw, WHERE)
    assert str(info.value) == f"{WHERE}: {message}"


def test_json_round_trip(space: Space) -> None:
    data = space.to_json()
    assert Space.from_json(data) == space
    assert Space.from_json(json.dumps(data)) == space
    assert Space.from_json(json.loads(json.dumps(data))) == space
    assert data["lr"] == {"type": "real", "low": 1e-4, "high": 1e-1, "prior": "log"}


def test_from_json_validates() -> None:
    with pytest.raises(ConfigError) as info:
        Space.from_json("{not json", where="study 7")
    assert str(info.value).startswith("study 7: not valid JSON (")
    with pytest.raises(ConfigError) as info:
        Space.from_json({"x": {"type": "real", "low": 1.0, "high": 0.0}}, where="study 7")
    assert str(info.value) == "study 7.x: low (1.0) must be < high (0.0)"


def test_categorical_choices_of_every_kind_round_trip() -> None:
    raw = {
        "s": {"type": "categorical", "choices": ["a", "b"]},
        "i": {"type": "categorical", "choices": [32, 64, 128]},
        "f": {"type": "categorical", "choices": [0.5, 1.0]},
        "b": {"type": "categorical", "choices": [True, False]},
        "one": {"type": "categorical", "choices": ["fixed"]},
    }
    space = parse_space(raw, WHERE)
    assert Space.from_json(json.dumps(space.to_json())) == space
    for params in space.sample(np.random.default_rng(0), 20):
        assert space.contains(params)
        assert params["one"] == "fixed"


def test_sample_is_inside_typed_and_reproducible(space: Space) -> None:
    points = space.sample(np.random.default_rng(3), 500)
    assert points == space.sample(np.random.default_rng(3), 500)
    assert len(points) == 500
    for params in points:
        assert space.contains(params)
        assert type(params["embedding_dim"]) is int
        assert type(params["lr"]) is float
        assert type(params["weight_decay"]) is float
        assert params["activation"] in ("relu", "tanh")
    # The log prior puts half of the draws below the geometric mean of the bounds.
    below = sum(p["lr"] < math.sqrt(1e-4 * 1e-1) for p in points)
    assert 200 < below < 300
    assert {p["embedding_dim"] for p in points} == set(range(8, 65))


def test_unit_cube_round_trip(space: Space) -> None:
    for params in space.sample(np.random.default_rng(4), 50):
        (back,) = space.from_unit(space.to_unit(params)[None, :])
        assert back["activation"] == params["activation"]
        assert back["embedding_dim"] == params["embedding_dim"]
        assert back["lr"] == pytest.approx(params["lr"])
    log_int = IntDim("n", 1, 1000, "log")
    for v in (1, 2, 999, 1000):
        assert log_int.from_unit(np.array([log_int.to_unit(v)])) == [v]


def test_contains(space: Space) -> None:
    good = {"activation": "relu", "embedding_dim": 8, "lr": 0.1, "weight_decay": 0.0}
    assert space.contains(good)
    assert space.contains({**good, "embedding_dim": 8.0})
    assert space.contains({**good, "embedding_dim": np.int64(9), "lr": np.float64(0.01)})
    assert not space.contains({**good, "embedding_dim": 8.5})
    assert not space.contains({**good, "embedding_dim": 65})
    assert not space.contains({**good, "lr": 0.2})
    assert not space.contains({**good, "lr": math.nan})
    assert not space.contains({**good, "weight_decay": True})
    assert not space.contains({**good, "activation": "gelu"})
    assert not space.contains({k: v for k, v in good.items() if k != "lr"})
    assert not space.contains({**good, "dropout": 0.1})
    assert not space.contains([("lr", 0.1)])


def test_categorical_compares_kind_too() -> None:
    space = parse_space({"b": {"type": "categorical", "choices": [True, False]}}, WHERE)
    assert space.contains({"b": True})
    assert not space.contains({"b": 1})
    ints = parse_space({"n": {"type": "categorical", "choices": [1, 2]}}, WHERE)
    assert not ints.contains({"n": True})
    assert not ints.contains({"n": 1.0})


def test_canonical(space: Space) -> None:
    params = {"weight_decay": 0, "lr": 0.01, "embedding_dim": 16.0, "activation": "tanh"}
    canonical = space.canonical(params)
    assert list(canonical) == list(space.names)
    assert type(canonical["embedding_dim"]) is int
    assert type(canonical["weight_decay"]) is float
    with pytest.raises(ValueError, match="not inside the space"):
        space.canonical({**params, "lr": 1.0})


def test_skopt_dimensions(space: Space) -> None:
    dims = skopt_dimensions(space)
    assert [d.name for d in dims] == list(space.names)
    assert list(dims[0].categories) == ["relu", "tanh"]
    assert dims[1].bounds == (8, 64)
    assert dims[2].bounds == (1e-4, 1e-1)
    assert dims[2].prior == "log-uniform"
    assert dims[3].prior == "uniform"
