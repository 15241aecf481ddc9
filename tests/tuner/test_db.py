"""The study database over every backend: SQLite (WAL) and PostgreSQL."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from regions import StudyError
from tuner._db import StudyDB


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> StudyDB:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'studies.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    database = StudyDB(url)
    yield database
    if request.param == "postgresql":
        from tuner._db import metadata

        metadata.drop_all(database.engine)
    database.dispose()


def _study(db: StudyDB, **kw: object) -> int:
    values = dict(region="north", budget=4, parallel=2, epochs=3, seed=0,
                  region_config={"name": "north"})
    values.update(kw)
    return db.create_study(**values)


def test_study_round_trip(db: StudyDB) -> None:
    sid = _study(db, space={"lr": {"type": "real"}})
    study = db.study(sid)
    assert study["region"] == "north" and study["state"] == "running"
    assert study["space"] == {"lr": {"type": "real"}}
    assert study["created_at"].tzinfo is not None
    assert db.latest_study("north")["id"] == sid
    with pytest.raises(StudyError, match="no study 999"):
        db.study(999)


def test_trial_epoch_and_hop_lifecycle(db: StudyDB) -> None:
    sid = _study(db)
    (tid,) = db.create_trials(sid, [({"lr": 0.1}, 42)])
    order, created = db.start_epoch(tid, 0, [1, 0])
    assert (order, created) == ([1, 0], True)
    # a second request replays the recorded order and creates nothing
    assert db.start_epoch(tid, 0, [0, 1]) == ([1, 0], False)
    assert db.trial(tid)["state"] == "running"

    hop = db.begin_hop(tid, 0, 0, 1, "w0@host")
    assert (hop["state"], hop["deliveries"], hop["interrupted"]) == ("running", 1, 0)
    assert db.finish_hop(tid, 0, 0, next_hop=(1, 0), samples=10, loss=0.5) is True
    # a redelivered hop finds its successor queued and does not hand on again
    again = db.begin_hop(tid, 0, 0, 1, "w1@host")
    assert again["state"] == "done" and again["deliveries"] == 2
    assert db.finish_hop(tid, 0, 0, next_hop=(1, 0), samples=10, loss=0.5) is False

    # a delivery that finds the hop started and unfinished counts as an interruption
    db.begin_hop(tid, 0, 1, 0, "w0@host")
    assert db.begin_hop(tid, 0, 1, 0, "w1@host")["interrupted"] == 1
    db.finish_hop(tid, 0, 1, next_hop=None, samples=10, loss=0.4)

    assert db.record_metric(tid, 0, 0.9, minimize=True) is True
    assert db.record_metric(tid, 0, 0.1, minimize=True) is False
    trial = db.trial(tid)
    assert (trial["epochs_done"], trial["best_metric"]) == (1, 0.9)
    assert db.rung_values(sid, 0) == [0.9]
    assert [h["shard"] for h in db.hops(tid)] == [1, 0]
    assert db.end_trial(tid, "done") is True
    assert db.end_trial(tid, "failed") is False
    assert db.counts(sid)["done"] == 1


def test_locked_study_serialises_concurrent_holders(db: StudyDB) -> None:
    sid = _study(db)
    inside = []
    overlap = []

    def hold() -> None:
        with db.locked_study(sid) as (conn, _study_row):
            inside.append(1)
            if len(inside) > 1:
                overlap.append(1)
            db.add_trials(conn, sid, [({"x": 1}, 1)])
            threading.Event().wait(0.2)
            inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlap
    assert [t["number"] for t in db.trials(sid)] == [0, 1]


def test_stalled_trials(db: StudyDB) -> None:
    from datetime import timedelta

    from tuner._db import utcnow

    sid = _study(db)
    (tid,) = db.create_trials(sid, [({"lr": 0.1}, 1)])
    db.start_epoch(tid, 0, [0])
    assert db.stalled_trials(utcnow() - timedelta(seconds=60)) == []
    assert [t["id"] for t in db.stalled_trials(utcnow() + timedelta(seconds=1))] == [tid]
