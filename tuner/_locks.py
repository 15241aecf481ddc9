"""Named locks with an expiry, kept in the study database."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from hoptune.core import StudyError
from hoptune.tuner._schema import locks, row_dict, utcnow
from hoptune.tuner._studydb import StudyDB

__all__ = ["Locks"]

T = TypeVar("T")


class Locks:
    """Named locks with an expiry, in the study database: a dead holder's lock runs out.

    Used for "one nightly run at a time": the holder renews its lock while it
    makes progress; a lock not renewed by its expiry is free to take.
    """

    def __init__(self, db: StudyDB) -> None:
        self.db = db

    def acquire(self, name: str, holder: str, ttl: float) -> dict[str, Any] | None:
        """Take ``name`` for ``holder``; returns None on success, else the current holder's row."""
        return self.transaction(name, lambda conn: self.take(conn, name, holder, ttl))

    def transaction(self, name: str, body: Callable[[Connection], T]) -> T:
        """``body(conn)`` in one transaction that takes lock ``name`` (``take``) with other
        writes, so no other process sees those writes without the lock or the lock without
        them; run again from the start where another process created the lock's row first."""
        for _ in range(3):
            try:
                with self.db.transaction() as conn:
                    return body(conn)
            except IntegrityError:
                continue  # another process inserted the row first: read it again
        raise StudyError(f"could not take lock {name!r}")

    def take(self, conn: Connection, name: str, holder: str, ttl: float
             ) -> dict[str, Any] | None:
        """Take ``name`` for ``holder`` in ``conn``'s transaction (see ``transaction``); None on
        success, else the current holder's row."""
        now = utcnow()
        query = select(locks).where(locks.c.name == name)
        if not self.db.is_sqlite:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            conn.execute(locks.insert().values(name=name, holder=holder,
                                               expires_at=now + timedelta(seconds=ttl)))
            return None
        current = row_dict(row)
        if current["holder"] and current["expires_at"] > now:
            return current
        conn.execute(update(locks).where(locks.c.name == name).values(
            holder=holder, expires_at=now + timedelta(seconds=ttl)))
        return None

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        with self.db.transaction() as conn:
            result = conn.execute(update(locks).where(locks.c.name == name,
                                                      locks.c.holder == holder)
                                  .values(expires_at=utcnow() + timedelta(seconds=ttl)))
            return result.rowcount == 1

    def release(self, name: str, holder: str, conn: Connection | None = None) -> bool:
        if conn is None:
            with self.db.transaction() as own:
                return self.release(name, holder, own)
        result = conn.execute(update(locks).where(locks.c.name == name,
                                                  locks.c.holder == holder)
                              .values(holder=None, expires_at=None))
        return result.rowcount == 1

