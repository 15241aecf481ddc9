"""Fixtures for the Celery side: a small region on disk, ingested, and real workers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.logs import print_log_tails
from tests.tasks.configs import CONFIG, FAST_LIVENESS, REGION

#: lines of each worker's log a failed test's report gets
LOG_TAIL = 80


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
def cluster(redis_url: str, home: Path, request: pytest.FixtureRequest):  # noqa: ANN201
    """Start real `hoptune worker` processes on the test Redis; stopped after the test. A
    test that failed gets the end of each worker's log in its report (the home, and the
    logs in it, are removed after the test)."""
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
    print_log_tails(request, home / "logs", LOG_TAIL)
