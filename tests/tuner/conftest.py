"""The study database over every backend: SQLite (WAL) and PostgreSQL (skipped where none runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hoptune.tuner import StudyDB


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StudyDB]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'studies.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    database = StudyDB(url)
    yield database
    if request.param == "postgresql":
        from hoptune.tuner import metadata

        metadata.drop_all(database.engine)
        with database.engine.begin() as conn:  # the next test starts from an empty database
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    database.dispose()
