"""Engines for the study database: SQLite in WAL mode with a busy timeout, or any SQLAlchemy URL.

Many worker processes write at once. SQLite takes its write lock at ``BEGIN``
(``BEGIN IMMEDIATE``) so two writers queue instead of failing with "database
is locked" halfway through a transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from hoptune.core import StoreError

__all__ = ["database_error", "make_engine", "safe_url"]


#: The execution option that marks a transaction as one that only reads (``StudyDB.reading``).
READ_ONLY = "hoptune_read_only"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        from pathlib import Path

        from sqlalchemy.engine import make_url

        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False},
                               json_serializer=json.dumps)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            _wal(cursor)
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # a writer takes the write lock at once (no deadlock on upgrading a read lock); a
            # transaction that only reads (READ_ONLY) takes none: in WAL mode it never waits
            deferred = conn.get_execution_options().get(READ_ONLY, False)
            conn.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")

        return engine
    if url.startswith(("postgresql://", "postgres://")):
        # the driver hoptune installs: SQLAlchemy's default for a bare postgresql:// changes
        # between releases (psycopg 3 since 2.1), and a deployment's URL should not have to
        url = "postgresql+psycopg2://" + url.split("://", 1)[1]
    return create_engine(url, pool_pre_ping=True, json_serializer=json.dumps)


def _wal(cursor: sqlite3.Cursor, patience: float = 60.0) -> None:
    """Put the database in WAL mode (it stays so), waiting for the other connections.

    Workers that start at once on a new file all try to switch it; SQLite
    answers "database is locked" at once to those that lose, without waiting
    out the busy timeout, so they try again.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def safe_url(url: str) -> str:
    """The URL without its password, for error messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as given
        return url


def database_error(url: str, exc: SQLAlchemyError) -> StoreError:
    """One line for a database that failed: which one (no password), and the driver's first line."""
    return StoreError(f"study database {safe_url(url)}: {exc.__class__.__name__}: "
                      f"{str(exc).splitlines()[0]}")
