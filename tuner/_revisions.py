"""Schema revisions of the study database: check one, make a new database, upgrade an old one.

The migrations (Alembic, in ``migrations/``) ship inside the package, one
revision per schema change. Every process checks the database's revision once,
when it opens the database (``StudyDB``): a database behind or ahead of this
hoptune stops it with one line that names the command to run. Making a new
database and upgrading one each run in one transaction under a lock
(PostgreSQL: an advisory lock; SQLite: its write lock, taken by ``BEGIN
IMMEDIATE``), so workers starting at once make a new database once, and a
second ``hoptune db upgrade`` waits for the first, then finds nothing to do.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

from sqlalchemy import create_engine, func, inspect, select, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from hoptune.core import SchemaError
from hoptune.tuner._engine import database_error, make_engine, safe_url
from hoptune.tuner._schema import metadata

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = ["MIGRATIONS", "Revisions", "open_schema", "schema_revisions", "upgrade_schema",
           "upgrade_schema_sql"]

MIGRATIONS = Path(__file__).with_name("migrations")
BASELINE = "0001"  # the schema create_all made before migrations; a legacy database is this
#: The newest revision in MIGRATIONS, which every process's open compares the database's
#: with: a constant, so that opening a current database imports no Alembic (importing the
#: app and opening a current database took 1.15 s instead of 1.33 s, medians of paired runs
#: on a 2-core host). tests/tuner/test_migrations.py holds it equal to Alembic's head; a new
#: migration changes it.
HEAD = "0004"
VERSION_TABLE = "alembic_version"
LOCK_KEY = 0x686F7074756E65  # "hoptune": PostgreSQL's advisory lock for schema changes
UPGRADE = "run `hoptune db upgrade`"

State = Literal["empty", "legacy", "current", "behind", "ahead"]


@dataclass(frozen=True)
class Revisions:
    """Where a database stands against this hoptune.

    ``state`` is one of: ``empty`` (no hoptune tables yet), ``legacy`` (tables
    from before migrations, no revision recorded), ``current``, ``behind``
    (a revision this hoptune upgrades from) or ``ahead`` (a revision it does
    not know: a newer hoptune upgraded the database).
    """

    url: str
    database: str | None
    head: str
    state: State

    @property
    def where(self) -> str:
        """The database, named for messages (no password)."""
        return f"study database {safe_url(self.url)}"

    def refusal(self) -> str:
        """The one line that stops a process on a database it does not match."""
        where = self.where
        if self.state == "legacy":
            return (f"{where} has no schema revision (made before hoptune had migrations); "
                    f"this hoptune needs revision {self.head}: {UPGRADE}")
        if self.state == "ahead":
            return (f"{where} is at schema revision {self.database}, newer than this hoptune "
                    f"knows (it needs {self.head}): run the hoptune that upgraded it "
                    f"(pip install --upgrade hoptune)")
        return (f"{where} is at schema revision {self.database}, this hoptune needs "
                f"{self.head}: {UPGRADE}")


@functools.cache
def _scripts(location: Path) -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(location))


def _head(location: Path) -> str:
    """The newest revision of the migrations at ``location``."""
    return HEAD if location == MIGRATIONS else _scripts(location).get_current_head()


def _config(location: Path, *, connection: Connection | None = None, url: str | None = None,
            out: TextIO | None = None) -> Config:
    """Alembic's configuration, made here: users need no alembic.ini."""
    from alembic.config import Config

    config = Config(output_buffer=out)
    config.set_main_option("script_location", str(location))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def _look(conn: Connection, url: str, location: Path) -> Revisions:
    head = _head(location)
    names = set(inspect(conn).get_table_names())
    found = None
    state: State
    if VERSION_TABLE in names:
        found = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    if found is None:
        state = "legacy" if names & set(metadata.tables) else "empty"
    elif found == head:
        state = "current"
    else:
        known = {script.revision for script in _scripts(location).walk_revisions()}
        state = "behind" if found in known else "ahead"
    return Revisions(url, found, head, state)


@contextmanager
def _locked(conn: Connection) -> Iterator[Connection]:
    """One transaction holding the schema lock (SQLite's ``BEGIN IMMEDIATE`` is the lock there)."""
    with conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(LOCK_KEY)))
        yield conn


def open_schema(engine: Engine, url: str, *, create: bool = True) -> None:
    """Make an empty database at the newest revision; refuse one at any other revision.

    Called once per process by ``StudyDB``. Raises ``SchemaError`` with the
    one line to show, or SQLAlchemy's error where the database cannot be reached.
    """
    with engine.connect() as conn, _locked(conn):
        found = _look(conn, url, MIGRATIONS)
        if found.state == "empty" and create:
            from alembic.runtime.migration import MigrationContext

            metadata.create_all(conn)
            MigrationContext.configure(conn).stamp(_scripts(MIGRATIONS), "head")
        elif found.state not in ("current", "empty"):
            raise SchemaError(found.refusal())


def schema_revisions(url: str, *, location: Path = MIGRATIONS) -> Revisions:
    """The database's revision and the newest this hoptune knows; changes nothing."""
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:" and not Path(database).exists():
            return Revisions(url, None, _head(location), "empty")
    engine = make_engine(url)
    try:
        with engine.connect() as conn, conn.begin():
            return _look(conn, url, location)
    except SQLAlchemyError as exc:
        raise database_error(url, exc) from exc
    finally:
        engine.dispose()


def upgrade_schema(url: str, *, location: Path = MIGRATIONS, target: str = "head"
                   ) -> tuple[Revisions, Revisions]:
    """Bring the database to the newest revision (or ``target``), keeping its rows.

    One transaction under the schema lock: it applies every revision or none.
    A legacy database whose tables are the baseline's is stamped as the
    baseline first. A database ahead of this hoptune is refused. Returns where
    the database stood before and after.
    """
    engine = make_engine(url)
    try:
        with engine.connect() as conn, _foreign_keys_off(conn), _locked(conn):
            before = _look(conn, url, location)
            if before.state == "ahead":
                raise SchemaError(before.refusal())
            from alembic import command

            config = _config(location, connection=conn)
            if before.state == "legacy":
                _check_baseline(conn, url, location)
                command.stamp(config, BASELINE)
            command.upgrade(config, target)
            _check_foreign_keys(conn, url)
            return before, _look(conn, url, location)
    except SQLAlchemyError as exc:
        raise database_error(url, exc) from exc
    finally:
        engine.dispose()


def upgrade_schema_sql(url: str, out: TextIO, *, location: Path = MIGRATIONS) -> Revisions:
    """Write the SQL that ``upgrade_schema`` would run (Alembic's offline mode), for a DBA.

    It reads the database's revision to start from there, and changes nothing.
    """
    found = schema_revisions(url, location=location)
    if found.state == "ahead":
        raise SchemaError(found.refusal())
    if found.state == "current":
        out.write(f"-- study database {safe_url(url)} is at revision {found.head}: "
                  f"nothing to do\n")
        return found
    from alembic import command

    config = _config(location, url=url, out=out)
    start = found.database
    if found.state == "legacy":
        command.stamp(config, BASELINE, sql=True)
        start = BASELINE
    if start != found.head:
        command.upgrade(config, f"{start}:head" if start else "head", sql=True)
    return found


def _shape(conn: Connection, tables: set[str] | None = None) -> dict[str, set[str]]:
    """Each table's column names."""
    inspector = inspect(conn)
    names = set(inspector.get_table_names()) - {VERSION_TABLE}
    return {t: {c["name"] for c in inspector.get_columns(t)} for t in names
            if tables is None or t in tables}


@functools.cache
def _baseline_shape(location: Path) -> dict[str, set[str]]:
    """The baseline's tables and columns, as its migration makes them (in memory)."""
    from alembic import command

    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        command.upgrade(_config(location, connection=conn), BASELINE)
        return _shape(conn)


def _check_baseline(conn: Connection, url: str, location: Path) -> None:
    """Refuse to stamp a database without a revision whose tables are not the baseline's."""
    expected = _baseline_shape(location)
    found = _shape(conn, set(expected))
    problems = [f"no table {t}" for t in sorted(set(expected) - set(found))]
    for table in sorted(set(expected) & set(found)):
        missing, extra = expected[table] - found[table], found[table] - expected[table]
        problems += [f"{table} lacks {', '.join(sorted(missing))}"] if missing else []
        problems += [f"{table} has unknown {', '.join(sorted(extra))}"] if extra else []
    if problems:
        raise SchemaError(f"study database {safe_url(url)} has no schema revision and its "
                          f"tables are not those of revision {BASELINE} ({'; '.join(problems)})"
                          f": nothing changed")


@contextmanager
def _foreign_keys_off(conn: Connection) -> Iterator[None]:
    """SQLite: no foreign key checks while a batch migration copies a table others refer to.

    SQLite's own recipe for changing a table: turn the checks off outside the
    transaction, change, check the keys (``_check_foreign_keys``), commit,
    turn them on again.
    """
    if conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.driver_connection
    raw.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys=ON")


def _check_foreign_keys(conn: Connection, url: str) -> None:
    if conn.dialect.name != "sqlite":
        return
    broken = sorted({row[0] for row in conn.exec_driver_sql("PRAGMA foreign_key_check")})
    if broken:
        raise SchemaError(f"study database {safe_url(url)}: the upgrade would break foreign "
                          f"keys of {', '.join(broken)}: nothing changed")
