"""Fixtures for the Celery side: a small region on disk, ingested, and real workers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

CONFIG = """
[defaults]
shards = {shards}
epochs = {epochs}
batch_size = {batch_size}
seed = 3
validation_fraction = 0.2
optimizer = "fused_adamw"
trials = {trials}
parallel = {parallel}
max_redeliveries = 2
[defaults.params]
embedding_dim = 8
lr = 0.02
reg = 0.0001
[defaults.space]
lr = {{ type = "real", low = 0.001, high = 0.3, prior = "log" }}
embedding_dim = {{ type = "int", low = 4, high = 16 }}
[defaults.pruner]
reduction_factor = 2
min_epochs = 1
"""

REGION = """
[regions.{name}]
data = "data/{name}.csv"
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]
"""


#: Liveness bounds of seconds, not minutes, for tests that kill workers.
FAST_LIVENESS = {"HOPTUNE_HEARTBEAT_SECONDS": "0.5", "HOPTUNE_LIVENESS_SECONDS": "4",
                 "HOPTUNE_SWEEP_SECONDS": "1", "HOPTUNE_RESEND_SECONDS": "3",
                 "HOPTUNE_TAKEOVER_SECONDS": "4"}


@pytest.fixture
def make_config(home: Path) -> Callable[..., Path]:
    """Write synthetic ratings for each region and a configuration file; returns its path."""
    from hoptune.regions import write_ratings

    def make(regions: tuple[str, ...] = ("north",), *, shards: int = 2, epochs: int = 2,
             trials: int = 4, parallel: int = 2, rows: int = 3000, batch_size: int = 128) -> Path:
        text = CONFIG.format(shards=shards, epochs=epochs, trials=trials, parallel=parallel,
                             batch_size=batch_size)
        for i, name in enumerate(regions):
            write_ratings(home / "data" / f"{name}.csv", n_users=100, n_items=80, n_rows=rows,
                          rank=3, noise=0.3, seed=10 + i)
            text += REGION.format(name=name)
        path = home / "hoptune.toml"
        path.write_text(text)
        return path

    return make


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, home) -> str:
    """The study database of the test: the SQLite default, or the PostgreSQL server."""
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("HOPTUNE_DATABASE_URL", url)
        yield url
        from hoptune.tuner import StudyDB, metadata

        db = StudyDB(url)
        metadata.drop_all(db.engine)
        with db.engine.begin() as conn:  # the next test starts from an empty database
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        db.dispose()
    else:
        yield "sqlite"


@pytest.fixture
def rt(home: Path):  # noqa: ANN201 - tasks.Runtime
    from hoptune.core import Settings
    from hoptune.tasks import Runtime

    runtime = Runtime(Settings.from_env(), worker="test")
    yield runtime
    runtime.db.dispose()


@pytest.fixture
def cluster(redis_url: str, home: Path):  # noqa: ANN201 - a starter of LocalCluster
    """Start real `hoptune worker` processes on the test Redis; stopped after the test."""
    from hoptune.tasks import app
    from hoptune.tasks.cli._cluster import LocalCluster

    started: list[LocalCluster] = []

    def start(shards: dict[str, int], workers: int = 2, env: dict[str, str] | None = None
              ) -> LocalCluster:
        """``env`` overrides the fast liveness bounds (a test that counts executions turns
        the sweeper's resends off: on a loaded host a queued hop may wait past them)."""
        c = LocalCluster(shards, workers, log_dir=home / "logs", loglevel="INFO",
                         env={"HOPTUNE_BROKER_URL": redis_url, **FAST_LIVENESS, **(env or {})})
        started.append(c)
        c.start()
        c.wait_ready(app)
        return c

    yield start
    for c in started:
        c.stop()
