"""Fixtures for the regions tests: a working folder, a store in it, small tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from hoptune.core import Store
from hoptune.regions import RegionConfig, load_config

HEADER = """\
[defaults]
shards = 2
epochs = 3
batch_size = 256
seed = 0
validation_fraction = 0.2
optimizer = "fused_adamw"
trials = 16
parallel = 4
max_redeliveries = 3
[defaults.params]
lr = 0.01
[defaults.space]
lr = { type = "real", low = 1e-3, high = 0.3, prior = "log" }
[defaults.pruner]
reduction_factor = 3
min_epochs = 1
[schedule]
cron = "0 2 * * *"
timezone = "UTC"
"""

RATING_REGION = """
[regions.north]
data = "data/north.csv"
family = "rating_mf"
task = "rating"
columns = { user = "user_id", item = "item_id", rating = "rating" }
rating_range = [1.0, 5.0]
"""


TABULAR_REGION = """
[regions.west]
data = "data/west.csv"
family = "{family}"
task = "{task}"
columns = {{ features = ["f0", "f1"], label = "label" }}
"""


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Two cores are shared by everyone: each test trains on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working folder, so that messages name files relative to it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def store(workdir: Path) -> Store:
    return Store(str(workdir / "store"))


@pytest.fixture
def write_config(workdir: Path) -> Callable[[str], Path]:
    """Write ``hoptune.toml`` with the given text; returns its path."""

    def write(text: str) -> Path:
        path = workdir / "hoptune.toml"
        path.write_text(text)
        return path

    return write


@pytest.fixture
def write_csv(workdir: Path) -> Callable[[str, str], Path]:
    """Write a CSV under ``data/`` from its text; returns its path."""

    def write(name: str, text: str) -> Path:
        path = workdir / "data" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write


def rating_rows(n: int, users: int = 7, items: int = 5) -> str:
    """A rating CSV of ``n`` valid rows over ``users`` users and ``items`` items."""
    lines = ["user_id,item_id,rating"]
    for row in range(n):
        user, item = row % users, (row * 3 + row // users) % items
        lines.append(f"u{user},i{item},{1 + (user + item) % 5}")
    return "\n".join(lines) + "\n"


def tabular_rows(n: int, task: str) -> str:
    """A CSV of ``n`` rows: features f0, f1 and a label that depends on them."""
    lines = ["f0,f1,label"]
    for row in range(n):
        f0, f1 = (row * 7) % 11 - 5.0, (row * 5) % 13 * 0.5
        label = int(f0 + f1 > 1) if task == "classification" else 2.0 * f0 - f1 + 10
        lines.append(f"{f0},{f1},{label}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def rating_region(write_config, write_csv) -> Callable[..., RegionConfig]:
    """Write ``data/north.csv`` (``text`` or ``rows`` good rows) and a config; the region."""

    def make(text: str | None = None, rows: int = 60, settings: str = "") -> RegionConfig:
        write_csv("north.csv", rating_rows(rows) if text is None else text)
        path = write_config(HEADER + RATING_REGION + settings)
        return load_config(path).region("north")

    return make


@pytest.fixture
def tabular_region(write_config, write_csv) -> Callable[..., RegionConfig]:
    """Write ``data/west.csv`` and a config for a tabular region of ``task``; the region."""

    def make(
        task: str,
        text: str | None = None,
        rows: int = 200,
        family: str = "mlp",
        settings: str = "",
    ) -> RegionConfig:
        write_csv("west.csv", tabular_rows(rows, task) if text is None else text)
        path = write_config(HEADER + TABULAR_REGION.format(task=task, family=family) + settings)
        return load_config(path).region("west")

    return make
