"""Named locks with an expiry, on SQLite and PostgreSQL (where ``SELECT … FOR UPDATE`` runs).

The promise of the nightly lock rests on these: one holder at a time; a holder
that keeps renewing keeps it; a holder that stops renewing loses it at its
expiry, to the next one that asks. The locks read a clock the tests move by hand
(``lock_clock``), so a loaded host's pauses decide nothing.
"""

from __future__ import annotations

import threading

from hoptune.tuner import Locks, StudyDB

TTL = 0.6


def test_one_holder_at_a_time_until_release(db: StudyDB) -> None:
    locks = Locks(db)
    assert locks.acquire("nightly", "a", TTL) is None
    held = locks.acquire("nightly", "b", TTL)
    assert held is not None and held["holder"] == "a"
    assert locks.release("nightly", "b") is False  # not b's to release
    assert locks.release("nightly", "a") is True
    assert locks.acquire("nightly", "b", TTL) is None


def test_a_holder_that_stops_renewing_is_taken_over_after_its_timeout(db: StudyDB,
                                                                    lock_clock) -> None:
    locks = Locks(db)
    assert locks.acquire("nightly", "a", TTL) is None
    assert locks.acquire("nightly", "b", TTL)["holder"] == "a"
    lock_clock.advance(TTL + 0.2)  # a makes no progress: no renewal
    assert locks.acquire("nightly", "b", TTL) is None
    # the old holder has lost it: it can neither renew nor release b's lock
    assert locks.renew("nightly", "a", TTL) is False
    assert locks.release("nightly", "a") is False
    assert locks.acquire("nightly", "a", TTL)["holder"] == "b"


def test_a_holder_that_renews_keeps_the_lock_past_its_timeout(db: StudyDB, lock_clock) -> None:
    locks = Locks(db)
    assert locks.acquire("nightly", "a", TTL) is None
    for _ in range(9):  # three times the lock's timeout, renewed every third of it
        lock_clock.advance(TTL / 3)
        assert locks.renew("nightly", "a", TTL) is True
        assert locks.acquire("nightly", "b", TTL)["holder"] == "a"
    lock_clock.advance(TTL + 0.2)
    assert locks.acquire("nightly", "b", TTL) is None


def _ask_at_once(db: StudyDB, names: list[str]) -> list[str]:
    """Each name asks for the lock in its own thread, all at the same moment; the winners."""
    barrier = threading.Barrier(len(names))
    won: list[str] = []

    def ask(name: str) -> None:
        barrier.wait()
        if Locks(db).acquire("nightly", name, TTL) is None:
            won.append(name)

    threads = [threading.Thread(target=ask, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_many_holders_asking_at_once_get_one_lock(db: StudyDB, lock_clock) -> None:
    """Free or expired, a lock goes to exactly one of the processes asking at the same moment."""
    # first a missing row (the inserts race), then an expired one (the updates race)
    assert len(_ask_at_once(db, [f"first.{i}" for i in range(6)])) == 1
    lock_clock.advance(TTL + 0.2)
    assert len(_ask_at_once(db, [f"second.{i}" for i in range(6)])) == 1
