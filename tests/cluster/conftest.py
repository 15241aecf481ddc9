"""Fixtures of the many-hosts tests: one S3 API (moto's server mode) for the session.

Each test gets a bucket of its own, so tests never see each other's objects.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.s3 import MotoServer


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    pytest.importorskip("s3fs", reason="the S3 store needs s3fs (the dev extra installs it)")
    pytest.importorskip("moto", reason="the S3 API of the tests is moto's server mode")
    log = Path(tempfile.mkdtemp(prefix="htmoto-")) / "moto.log"
    server = MotoServer(log).start()
    yield server
    server.stop()


@pytest.fixture
def s3_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's AWS variables pointed at the test's S3 API; ``HOPTUNE_STORE_URL``
    in a fresh bucket. Returns them, for the processes the test starts."""
    env = {**moto_server.env, "HOPTUNE_STORE_URL": f"s3://{moto_server.bucket()}/hoptune"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A database of a unique name on the machine's PostgreSQL server, dropped after the
    test; skipped, with the reason, where no server answers."""
    import os
    import secrets

    import sqlalchemy

    base = os.environ.get("HOPTUNE_TEST_POSTGRES_URL",
                          "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
    name = f"hoptune_cluster_{os.getpid()}_{secrets.token_hex(4)}"
    engine = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except sqlalchemy.exc.OperationalError as exc:
        engine.dispose()
        pytest.skip(f"no PostgreSQL server reachable at {base}: {str(exc).splitlines()[0]}")
    yield base.rsplit("/", 1)[0] + f"/{name}"
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    engine.dispose()
