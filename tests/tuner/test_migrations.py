"""Schema revisions of the study database, on SQLite and PostgreSQL.

A database made before migrations upgrades with every row intact; each later
revision upgrades the one before it with rows in it; an empty database is made
at the newest revision once, however many processes start at once; the
migrations make exactly the tables of ``_schema.py`` (Alembic's ``check``);
two upgrades at once run one after the other.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, create_engine, func, select, text
from sqlalchemy.engine import Connection, make_url

from hoptune.core import SchemaError
from hoptune.tuner import StudyDB, metadata, schema_revisions, upgrade_schema
from hoptune.tuner._revisions import BASELINE, HEAD, LOCK_KEY, MIGRATIONS, _config

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REVISION_DATA = FIXTURES / "revisions"
SCRIPTS = ScriptDirectory(str(MIGRATIONS))
# every revision after the baseline, oldest first: each gets its upgrade test
LATER = [s.revision for s in reversed(list(SCRIPTS.walk_revisions())) if s.down_revision]


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fixture_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


baseline = _module(FIXTURES / "make_baseline.py")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty study database: a SQLite file, or the PostgreSQL test database (emptied after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'studies.db'}"
        return
    url = request.getfixturevalue("postgres_url")
    yield url
    drop_everything(url)


def drop_everything(url: str) -> None:
    """Empty the session's PostgreSQL database for the next test."""
    engine = create_engine(url)
    found = MetaData()
    found.reflect(engine)
    found.drop_all(engine)
    engine.dispose()


def load_baseline(url: str) -> None:
    """Load the database recorded before migrations existed: its tables and rows, no revision."""
    if url.startswith("sqlite"):
        with sqlite3.connect(make_url(url).database) as conn:
            conn.executescript((FIXTURES / "baseline.sqlite.sql").read_text())
        return
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql((FIXTURES / "baseline.postgresql.sql").read_text())
    engine.dispose()


def load_ahead(url: str) -> None:
    """A database a newer hoptune upgraded: at a revision this one does not know."""
    StudyDB(url).dispose()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'f00dcafe'"))
    engine.dispose()


def contents(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows (the version table included), in primary key order."""
    engine = create_engine(url)
    found = MetaData()
    found.reflect(engine)
    with engine.connect() as conn:
        out = {name: [dict(r._mapping) for r in conn.execute(
            select(table).order_by(*table.primary_key.columns))]
            for name, table in found.tables.items()}
    engine.dispose()
    return out


def diffs(url: str) -> list[Any]:
    """What Alembic's ``check`` would report: the models against the database."""
    engine = create_engine(url)
    with engine.connect() as conn:
        found = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                 metadata)
    engine.dispose()
    return found


def hoptune(*args: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "HOPTUNE_HOME": str(cwd),
                               "HOPTUNE_DATABASE_URL": url})


def test_the_revisions_are_one_line_from_the_baseline() -> None:
    assert SCRIPTS.get_bases() == [BASELINE]
    assert len(SCRIPTS.get_heads()) == 1, "two revisions share a parent: renumber one"


def test_the_head_every_open_compares_with_is_alembics_head() -> None:
    assert HEAD == SCRIPTS.get_current_head()


def test_opening_a_current_database_imports_no_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    StudyDB(url).dispose()  # made at the newest revision (this one stamps with Alembic)
    code = ("import sys; from hoptune.tuner import StudyDB; db = StudyDB(sys.argv[1]); "
            "db.latest_study('north'); print('alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_every_later_revision_has_its_data_fixture() -> None:
    assert [r for r in LATER if not (REVISION_DATA / f"{r}.py").exists()] == []


def test_a_database_from_before_migrations_upgrades_with_every_row_intact(
        url: str, tmp_path: Path) -> None:
    load_baseline(url)
    recorded = contents(url)
    with pytest.raises(SchemaError, match=r"has no schema revision \(made before hoptune had "
                                          r"migrations\).*run `hoptune db upgrade`$"):
        StudyDB(url)
    assert contents(url) == recorded, "a refused database is left as it was"

    done = hoptune("db", "upgrade", url=url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("made before migrations, recorded as the baseline, now at "
                                f"{SCRIPTS.get_current_head()}\n")

    db = StudyDB(url)
    rows = json.loads(json.dumps(baseline.read(db), default=baseline._json))
    expected = json.loads((FIXTURES / "baseline.json").read_text())["rows"]
    for table, old_rows in expected.items():
        assert len(rows[table]) == len(old_rows), table
        for old, new in zip(old_rows, rows[table], strict=True):
            assert {key: new[key] for key in old} == old, table
    # new rows take fresh ids: PostgreSQL's sequences stand past the loaded rows
    assert db.create_study(region="west", budget=1, parallel=1, epochs=1, seed=0,
                           region_config={}) == 3
    db.dispose()
    assert diffs(url) == []


def test_a_new_database_is_made_at_the_newest_revision(url: str) -> None:
    StudyDB(url).dispose()
    found = schema_revisions(url)
    assert (found.state, found.database) == ("current", SCRIPTS.get_current_head())
    assert diffs(url) == []


def test_the_migrations_make_exactly_the_tables_of_the_models(url: str) -> None:
    """Alembic's ``check``: a change to ``_schema.py`` without its revision fails here."""
    before, after = upgrade_schema(url)
    assert (before.state, after.state) == ("empty", "current")
    assert diffs(url) == []


def test_workers_starting_at_once_make_a_new_database_once(url: str) -> None:
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            StudyDB(url).dispose()
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert contents(url)["alembic_version"] == [{"version_num": SCRIPTS.get_current_head()}]


@pytest.mark.parametrize("state", ["ahead", "legacy"])
def test_a_database_it_does_not_match_stops_the_process_and_is_left_alone(
        url: str, state: str) -> None:
    (load_baseline if state == "legacy" else load_ahead)(url)
    recorded = contents(url)
    with pytest.raises(SchemaError) as raised:
        StudyDB(url)
    assert "\n" not in str(raised.value)
    if state == "ahead":
        assert str(raised.value).endswith(
            f"is at schema revision f00dcafe, newer than this hoptune knows (it needs "
            f"{SCRIPTS.get_current_head()}): run the hoptune that upgraded it "
            f"(pip install --upgrade hoptune)")
        with pytest.raises(SchemaError, match="newer than this hoptune knows"):
            upgrade_schema(url)
    assert contents(url) == recorded


def test_the_password_never_shows(postgres_url: str) -> None:
    url = postgres_url.replace("postgres@", "postgres:s3cret@")  # the test server trusts anyone
    try:
        load_ahead(url)
        with pytest.raises(SchemaError) as raised:
            StudyDB(url)
        assert "postgres:***@" in str(raised.value) and "s3cret" not in str(raised.value)
    finally:
        drop_everything(url)


def test_a_legacy_database_with_other_tables_is_not_stamped(url: str) -> None:
    load_baseline(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE hops ADD COLUMN gpu_name VARCHAR(32)"))
        conn.execute(text("DROP TABLE locks"))
    engine.dispose()
    recorded = contents(url)
    with pytest.raises(SchemaError, match=r"has no schema revision and its tables are not those "
                                          r"of revision 0001 \(no table locks; hops has unknown "
                                          r"gpu_name\): nothing changed$"):
        upgrade_schema(url)
    assert contents(url) == recorded


def test_an_upgrade_waits_for_the_schema_lock_then_the_second_finds_nothing_to_do(
        url: str, tmp_path: Path) -> None:
    load_baseline(url)
    engine = create_engine(url)
    holder = engine.connect()
    if url.startswith("sqlite"):
        holder.exec_driver_sql("BEGIN IMMEDIATE")  # the lock an upgrade takes on SQLite
    else:
        holder.execute(select(func.pg_advisory_lock(LOCK_KEY)))
        holder.commit()
    command_line = [sys.executable, "-m", "hoptune.tasks.cli", "db", "upgrade"]
    env = {**os.environ, "HOPTUNE_HOME": str(tmp_path), "HOPTUNE_DATABASE_URL": url}
    upgrades = [subprocess.Popen(command_line, env=env, cwd=tmp_path, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(2)]
    if url.startswith("sqlite"):
        time.sleep(4.0)  # SQLite shows no waiters: give them time to reach the lock
    else:
        deadline = time.monotonic() + 60
        while holder.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                  "AND NOT granted")).scalar() < 2:
            assert time.monotonic() < deadline, "the upgrades never asked for the lock"
            time.sleep(0.1)
    assert [p.poll() for p in upgrades] == [None, None], "both wait for the lock"
    if url.startswith("sqlite"):
        holder.rollback()
    else:
        holder.rollback()
        holder.execute(select(func.pg_advisory_unlock(LOCK_KEY)))
        holder.commit()
    holder.close()
    engine.dispose()
    outputs = sorted(p.communicate(timeout=120)[0] for p in upgrades)
    assert [p.returncode for p in upgrades] == [0, 0]
    head = SCRIPTS.get_current_head()
    assert outputs[0].endswith(f"is at revision {head}: nothing to do\n")
    assert outputs[1].endswith(f"made before migrations, recorded as the baseline, now at {head}\n")


def test_upgrade_sql_prints_the_statements_and_changes_nothing(url: str, tmp_path: Path) -> None:
    load_baseline(url)
    recorded = contents(url)
    done = hoptune("db", "upgrade", "--sql", url=url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "CREATE TABLE alembic_version" in done.stdout
    assert f"INSERT INTO alembic_version (version_num) VALUES ('{BASELINE}')" in done.stdout
    assert contents(url) == recorded
    # the DBA runs it: the database is then where `hoptune db upgrade` would have left it
    if url.startswith("sqlite"):
        with sqlite3.connect(make_url(url).database) as conn:
            conn.executescript(done.stdout)
    else:
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(done.stdout)
        engine.dispose()
    assert schema_revisions(url).state == "current"


def test_upgrade_sql_of_an_empty_database_makes_every_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    done = hoptune("db", "upgrade", "--sql", url=url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "studies.db").exists(), "reading the revision made no database"
    with sqlite3.connect(tmp_path / "studies.db") as conn:
        conn.executescript(done.stdout)
    assert schema_revisions(url).state == "current"
    assert diffs(url) == []


# each revision after the baseline --------------------------------------------


def upgrade_keeps_rows(url: str, location: Path, revision: str, fill: Callable[[str], None],
                       check: Callable[[Connection], None], changed: frozenset[str]) -> None:
    """Bring an empty database to the revision before ``revision``, ``fill`` it, upgrade, check.

    Every row of every table survives the upgrade with the values of the
    columns it keeps, except the columns the revision says it changes
    (``"table.column"``); ``check`` reads what the revision made of them.
    """
    before = ScriptDirectory(str(location)).get_revision(revision).down_revision
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(_config(location, connection=conn), before)
    engine.dispose()
    fill(url)
    old = contents(url)
    found, now = upgrade_schema(url, location=location, target=revision)
    assert (found.database, now.database) == (before, revision)
    new = contents(url)
    for table in old.keys() - {"alembic_version"}:
        if table not in new:
            continue
        kept = [c for c in old[table][0] if c in new[table][0]
                and f"{table}.{c}" not in changed] if old[table] else []
        assert [{c: r[c] for c in kept} for r in new[table]] == \
               [{c: r[c] for c in kept} for r in old[table]], table
    engine = create_engine(url)
    with engine.connect() as conn:
        check(conn)
    engine.dispose()


@pytest.mark.parametrize("revision", LATER)
def test_each_revision_upgrades_the_one_before_it_keeping_its_rows(url: str,
                                                                   revision: str) -> None:
    data = _module(REVISION_DATA / f"{revision}.py")

    def fill(into: str) -> None:
        engine = create_engine(into)
        with engine.begin() as conn:
            data.insert(conn)
        engine.dispose()

    upgrade_keeps_rows(url, MIGRATIONS, revision, fill, data.check,
                       frozenset(getattr(data, "CHANGED", ())))


EXAMPLE = '''"""An example revision: a column filled from the rows, and a column changed in a table
that others refer to (SQLite copies that table)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "example"
down_revision = {head!r}
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("label", sa.String(80), nullable=True))
    op.execute("UPDATE studies SET label = region || '-' || CAST(id AS VARCHAR(16))")
    with op.batch_alter_table("trials") as batch:
        batch.alter_column("failure", type_=sa.String(2000), existing_type=sa.Text())
'''


def test_the_per_revision_check_runs_an_example_revision(url: str, tmp_path: Path) -> None:
    """The machinery each later revision's test uses, on a revision made up for it."""
    import shutil

    location = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, location, ignore=shutil.ignore_patterns("__pycache__"))
    (location / "versions" / "9999_example.py").write_text(
        EXAMPLE.format(head=SCRIPTS.get_current_head()))

    def fill(into: str) -> None:
        # rows any revision since 0002 can hold: that revision's own fixture
        engine = create_engine(into)
        with engine.begin() as conn:
            _module(REVISION_DATA / "0002.py").insert(conn)
        engine.dispose()

    def check(conn: Connection) -> None:
        labels = conn.execute(text("SELECT id, label FROM studies ORDER BY id")).all()
        assert [tuple(r) for r in labels] == [(1, "north-1"), (2, "north-2"), (3, "south-3")]
        assert conn.execute(text("SELECT count(*) FROM epochs")).scalar() == 1

    upgrade_keeps_rows(url, location, "example", fill, check, frozenset())
    with pytest.raises(SchemaError, match="is at schema revision example, newer than"):
        StudyDB(url)
