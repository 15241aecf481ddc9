"""The study database over every backend (the ``db`` fixture): SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import update

from hoptune.core import StudyError
from hoptune.tuner import HopRecords, StudyDB, WorkerRecords, utcnow
from hoptune.tuner._schema import studies


def _study(db: StudyDB, **kw: object) -> int:
    values = dict(region="north", budget=4, parallel=2, epochs=3, seed=0,
                  region_config={"name": "north"})
    values.update(kw)
    return db.create_study(**values)


def test_study_round_trip(db: StudyDB) -> None:
    sid = _study(db, space={"lr": {"type": "real"}})
    study = db.study(sid)
    assert study.region == "north" and study.state == "running"
    assert study.space == {"lr": {"type": "real"}}
    assert study.created_at.tzinfo is not None
    assert db.latest_study("north").id == sid
    with pytest.raises(StudyError, match="no study 999"):
        db.study(999)


def test_a_done_hop_names_its_writer_while_it_lives_until_its_write_fails(db: StudyDB) -> None:
    """A hop's checkpoint is written behind its hand-on by the process that trained it: its
    reader waits while that process lives and has not said its write failed."""
    sid = _study(db)
    (tid,) = db.create_trials(sid, [({"lr": 0.1}, 42)])
    db.start_epoch(tid, 0, [0, 1])
    workers, records = WorkerRecords(db), HopRecords(db)
    workers.register("w0/1", name="w0@host", host="host", pid=1, shards=[])
    live = utcnow() - timedelta(seconds=30)
    assert not records.writer_alive(tid, 0, 0, live)  # queued: nobody writes it
    records.claim(tid, 0, 0, 0, worker="w0@host", holder="w0/1", live_after=live)
    assert not records.writer_alive(tid, 0, 0, live)  # running: no output yet
    records.hand_on(tid, 0, 0, region="north", shards=2, live_after=live, samples=1, loss=1.0)
    assert records.get(tid, 0, 0).holder == "w0/1"
    assert records.writer_alive(tid, 0, 0, live)
    # its heartbeat older than the liveness bound: dead, unless it is the one asking
    assert not records.writer_alive(tid, 0, 0, utcnow() + timedelta(seconds=1))
    assert records.writer_alive(tid, 0, 0, utcnow() + timedelta(seconds=1), me="w0/1")
    # another process cannot say this one's write failed; the writer can, once
    assert not records.write_failed(tid, 0, 0, holder="w1/1", reason="x")
    assert records.write_failed(tid, 0, 0, holder="w0/1", reason="its write failed: disk full")
    assert not records.write_failed(tid, 0, 0, holder="w0/1", reason="again")
    hop = records.get(tid, 0, 0)
    assert (hop.state, hop.holder, hop.error, hop.errors) == (
        "done", None, "its write failed: disk full", 0)  # the reader's rewind counts it
    assert not records.writer_alive(tid, 0, 0, live, me="w0/1")
    # a claimed hop that runs again is no longer done: its old writer is not waited for
    records.claim(tid, 0, 1, 1, worker="w0@host", holder="w0/1", live_after=live)
    records.hand_on(tid, 0, 1, region="north", shards=2, live_after=live, samples=1, loss=1.0)
    assert records.writer_alive(tid, 0, 1, live)
    assert records.rewind(tid, 0, 1, reason="lost") == 1
    assert not records.writer_alive(tid, 0, 1, live, me="w0/1")


def test_trial_epoch_and_hop_lifecycle(db: StudyDB) -> None:
    sid = _study(db)
    (tid,) = db.create_trials(sid, [({"lr": 0.1}, 42)])
    order, created = db.start_epoch(tid, 0, [1, 0])
    assert (order, created) == ([1, 0], True)
    # a second request replays the recorded order and creates nothing
    assert db.start_epoch(tid, 0, [0, 1]) == ([1, 0], False)
    assert db.trial(tid).state == "running"

    workers = WorkerRecords(db)
    for name in ("w0", "w1"):
        workers.register(f"{name}/1", name=f"{name}@host", host="host", pid=1, shards=[])
    now = utcnow()
    claim, hop, _ = HopRecords(db).claim(tid, 0, 0, 1, worker="w0@host", holder="w0/1",
                              live_after=now - timedelta(seconds=30))
    assert claim == "claimed"
    assert (hop.state, hop.deliveries, hop.interrupted) == ("running", 1, 0)
    # a copy while its live holder trains it is dropped, and is no interruption
    claim, hop, _ = HopRecords(db).claim(tid, 0, 0, 1, worker="w1@host", holder="w1/1",
                              live_after=now - timedelta(seconds=30))
    assert (claim, hop.worker, hop.interrupted) == ("held", "w0@host", 0)
    assert HopRecords(db).finish(tid, 0, 0, next_hop=(1, 0), samples=10, loss=0.5) is True
    # a redelivered hop finds it done, and its successor queued: no second hand-on
    claim, again, _ = HopRecords(db).claim(tid, 0, 0, 1, worker="w1@host", holder="w1/1",
                                live_after=now - timedelta(seconds=30))
    assert claim == "done" and again.deliveries == 3
    assert HopRecords(db).finish(tid, 0, 0, next_hop=(1, 0), samples=10, loss=0.5) is False

    # a holder whose heartbeat is older than the liveness bound is gone: taken over,
    # and counted as an interruption
    assert HopRecords(db).claim(tid, 0, 1, 0, worker="w0@host", holder="w0/1",
                        live_after=now - timedelta(seconds=30))[0] == "claimed"
    claim, hop, _ = HopRecords(db).claim(tid, 0, 1, 0, worker="w1@host", holder="w1/1",
                              live_after=utcnow() + timedelta(seconds=1))
    assert (claim, hop.worker, hop.interrupted) == ("claimed", "w1@host", 1)
    HopRecords(db).finish(tid, 0, 1, next_hop=None, samples=10, loss=0.4)

    # an epoch's end is decided once: a second decision changes nothing
    assert db.end_epoch(tid, 0, 0.9, minimize=True, outcome="continue", next_order=[0, 1])
    assert not db.end_epoch(tid, 0, 0.1, minimize=True, outcome="pruned")
    trial = db.trial(tid)
    assert (trial.state, trial.epochs_done, trial.best_metric) == ("running", 1, 0.9)
    assert db.epoch(tid, 1).visit_order == [0, 1]
    assert HopRecords(db).get(tid, 1, 0).state == "queued"
    assert db.rung_values(sid, 0) == [0.9]
    assert [h.shard for h in HopRecords(db).all(tid)] == [1, 0, 0]
    assert db.end_trial(tid, "done") is True
    assert db.end_trial(tid, "failed") is False
    assert db.counts(sid)["done"] == 1


def test_one_running_study_per_region(db: StudyDB) -> None:
    first = _study(db)
    with pytest.raises(StudyError, match=f"region 'north' already has a running study "
                                         f"\\({first}\\)"):
        _study(db)
    db.finish_study(first, "done")
    assert _study(db) != first


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
    assert [t.number for t in db.trials(sid)] == [0, 1]


def test_stalled_trials(db: StudyDB) -> None:
    from datetime import timedelta

    from hoptune.tuner import utcnow

    sid = _study(db)
    (tid,) = db.create_trials(sid, [({"lr": 0.1}, 1)])
    db.start_epoch(tid, 0, [0])
    assert db.stalled_trials(utcnow() - timedelta(seconds=60)) == []
    assert [t.id for t in db.stalled_trials(utcnow() + timedelta(seconds=1))] == [tid]


def test_a_plain_postgresql_url_uses_the_installed_driver(postgres_url: str) -> None:
    """docker-compose and most deployments write postgresql://, with no driver named."""
    from hoptune.tuner import metadata

    plain = "postgresql://" + postgres_url.split("://", 1)[1]
    db = StudyDB(plain)
    try:
        assert db.engine.dialect.driver == "psycopg2"
    finally:  # the tables it made: the session's database is empty for the next test
        metadata.drop_all(db.engine)
        with db.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        db.dispose()


def test_deliveries_of_one_hop_at_once_are_each_counted(db: StudyDB) -> None:
    """The claim is one atomic step: concurrent deliveries neither lose nor double a count."""
    sid = _study(db)
    (tid,) = db.create_trials(sid, [({"lr": 0.1}, 7)])
    db.start_epoch(tid, 0, [0, 1])
    workers = WorkerRecords(db)
    for i in range(5):
        workers.register(f"w{i}/1", name=f"w{i}@host", host="host", pid=i, shards=[])
    live = utcnow() - timedelta(seconds=30)
    HopRecords(db).claim(tid, 0, 0, 0, worker="w0@host", holder="w0/1", live_after=live)
    assert HopRecords(db).finish(tid, 0, 0, next_hop=(1, 1), samples=10, loss=0.5) is True
    barrier = threading.Barrier(5)
    outcomes: list[str] = []

    def deliver(i: int) -> None:
        barrier.wait()
        outcomes.append(HopRecords(db).claim(tid, 0, 1, 1, worker=f"w{i}@host", holder=f"w{i}/1",
                                     live_after=live)[0])

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hop = HopRecords(db).all(tid)[1]
    # every delivery counted; one claims it, the others find a live holder: no interruption
    assert sorted(outcomes) == ["claimed", "held", "held", "held", "held"]
    assert (hop.state, hop.deliveries, hop.interrupted) == ("running", 5, 0)


def test_a_hand_on_goes_to_an_idle_shard_and_is_recorded(db: StudyDB) -> None:
    """The next hop goes to the unvisited shard whose owner is idle; the order records it."""
    sid = _study(db)
    first, second = db.create_trials(sid, [({"lr": 0.1}, 1), ({"lr": 0.2}, 2)])
    records = WorkerRecords(db)
    for k in range(3):
        records.register(f"w{k}/1", name=f"w{k}@host", host="host", pid=k,
                         shards=[["north", k]])
    live = utcnow() - timedelta(seconds=30)
    db.start_epoch(first, 0, [0, 1, 2])
    db.start_epoch(second, 0, [1, 2, 0])
    HopRecords(db).claim(first, 0, 0, 0, worker="w0@host", holder="w0/1", live_after=live)
    HopRecords(db).claim(second, 0, 0, 1, worker="w1@host", holder="w1/1", live_after=live)
    loads = HopRecords(db).shard_loads("north", live)
    assert (loads.running, loads.held) == ({0: 1, 1: 1}, {"w0/1": 1, "w1/1": 1})
    # shard 1, next in the tentative order, is busy with the other trial: shard 2 is idle
    assert HopRecords(db).hand_on(first, 0, 0, region="north", shards=3, live_after=live,
                          samples=10, loss=0.5) == 2
    assert db.epoch(first, 0).visit_order == [0, 2, 1]
    assert HopRecords(db).get(first, 0, 1).shard == 2
    # a redelivery places nothing again
    assert HopRecords(db).hand_on(first, 0, 0, region="north", shards=3, live_after=live) is None
    assert db.epoch(first, 0).visit_order == [0, 2, 1]
    # the last hop of an epoch hands on to no hop
    assert HopRecords(db).hand_on(first, 0, 2, region="north", shards=3, live_after=live) is None


def test_a_reading_transaction_never_waits_for_a_writer(db: StudyDB) -> None:
    """What a hop checks before its claim reads while another process records (on SQLite a
    plain transaction takes the write lock at once, so it would wait for that one)."""
    sid = _study(db)
    other = StudyDB(db.url)
    seen: list[str] = []
    try:
        with db.transaction() as conn:  # a writer holding the database (SQLite: its lock)
            conn.execute(update(studies).where(studies.c.id == sid).values(budget=5))
            reader = threading.Thread(target=lambda: seen.append(_read_region(other, sid)),
                                      daemon=True)
            reader.start()
            reader.join(timeout=20)  # a reader that waited would wait the busy timeout (60 s)
            assert seen == ["north"], "the reader waited for the writer"
        assert other.study(sid).budget == 5  # and a later one sees what was written
    finally:
        other.dispose()


def test_no_read_of_the_records_waits_for_a_writer(db: StudyDB) -> None:
    """Every method that only reads (an epoch's decision reads the trial's epochs, the rungs'
    values, the running hops' positions and the shards' loads; status and the sweeper read
    the rest) takes no write lock: on SQLite a worker deciding an epoch never queues behind
    another's claim or hand-on, which would wait out the busy timeout if it held on."""
    sid = _study(db)
    (tid,) = db.create_trials(sid, [({"lr": 0.1}, 42)])
    db.start_epoch(tid, 0, [0, 1])
    live = utcnow() - timedelta(seconds=30)
    other = StudyDB(db.url)
    hops = HopRecords(other)
    reads = {
        "study": lambda: other.study(sid).id, "studies": lambda: len(other.studies("north")),
        "latest_study": lambda: other.latest_study("north").id,
        "data_hashes_in_use": lambda: len(other.data_hashes_in_use()),
        "trial": lambda: other.trial(tid).id, "trials": lambda: len(other.trials(sid)),
        "epoch": lambda: other.epoch(tid, 0).epoch, "epochs": lambda: len(other.epochs(tid)),
        "rung_values": lambda: len(other.rung_values(sid, 0)),
        "counts": lambda: other.counts(sid)["running"],
        "stalled_trials": lambda: len(other.stalled_trials(utcnow())),
        "get": lambda: hops.get(tid, 0, 0).state, "last": lambda: hops.last(tid).position,
        "all": lambda: len(hops.all(tid)), "since": lambda: len(hops.since(live)),
        "waiting": lambda: len(hops.waiting(utcnow())),
        "shard_loads": lambda: hops.shard_loads("north", live).queued,
        "running_positions": lambda: len(hops.running_positions(sid)),
        "writer_alive": lambda: hops.writer_alive(tid, 0, 0, live),
        "done_count": lambda: hops.done_count(sid),
    }
    seen: dict[str, object] = {}

    def read_all() -> None:
        for name, read in reads.items():
            seen[name] = read()

    try:
        with db.transaction() as conn:  # a writer holding the database (SQLite: its lock)
            conn.execute(update(studies).where(studies.c.id == sid).values(budget=5))
            reader = threading.Thread(target=read_all, daemon=True)
            reader.start()
            reader.join(timeout=30)  # a read that waited would wait the busy timeout (60 s)
            assert list(seen) == list(reads), f"{next(n for n in reads if n not in seen)} " \
                                              f"waited for the writer"
        assert seen["get"] == "queued" and seen["shard_loads"] == {0: 1}
    finally:
        other.dispose()


def _read_region(db: StudyDB, study_id: int) -> str:
    with db.reading() as conn:
        return db.study(study_id, conn).region
