"""A nightly run's end: its last region's outcome, the run's end and the lock's release land at
once, and a driver waits for them before it returns (or stops its local workers)."""

from __future__ import annotations

import contextlib
import threading

import pytest

from hoptune.tasks.cli import follow
from hoptune.tasks.study._nightly import after_promotion
from hoptune.tasks.study._nightly_lock import NIGHTLY_LOCK, holder
from hoptune.tuner import Locks, NightlyRecords

DECISION = {"promoted": False, "reason": "no better than the champion"}


def _nightly_studies(rt, regions: tuple[str, ...] = ("north",)  # noqa: ANN001
                     ) -> tuple[int, list[int]]:
    """A nightly run holding the lock, with a study of each of ``regions``, ended and
    promoted, whose region's outcome is not recorded yet (as between a promotion's steps)."""
    records = NightlyRecords(rt.db)
    run_id = records.start_run("test", "host")
    assert Locks(rt.db).acquire(NIGHTLY_LOCK, holder(run_id), 600) is None
    studies = []
    for region in regions:
        study = rt.db.create_study(region=region, budget=1, parallel=1, epochs=1, seed=0,
                                   region_config={"name": region, "shards": 2},
                                   nightly_run_id=run_id)
        records.add_region(run_id, region, "running", study_id=study)
        rt.db.finish_study(study, "done")
        rt.db.set_study(study, promotion=DECISION)
        studies.append(study)
    return run_id, studies


def test_a_driver_waits_for_the_nightly_outcome_that_follows_a_promotion(rt) -> None:  # noqa: ANN001
    """``follow`` returned once the promotion was recorded, before its region's outcome and the
    run's end: a benchmark that started the next run at once was refused ("a nightly run is
    already going"), and a command that then stopped its local workers could leave the lock
    held until it expired."""
    run_id, (study,) = _nightly_studies(rt)
    with pytest.raises(TimeoutError):
        follow(rt, None, [study], progress=False, timeout=1.0)
    after_promotion(rt, rt.db.study(study), DECISION)
    follow(rt, None, [study], progress=False, timeout=5.0)
    assert NightlyRecords(rt.db).run(run_id)["state"] == "done"
    assert Locks(rt.db).acquire(NIGHTLY_LOCK, holder(run_id + 1), 600) is None  # free


def test_the_last_regions_outcome_ends_the_run_and_frees_the_lock_in_one_transaction(
        rt, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A promotion whose process fails between the region's outcome and the lock's release
    leaves nothing half done: the region still running, the run going and its lock held, so
    the promotion's redelivery ends them all."""
    run_id, (study,) = _nightly_studies(rt)

    def fails(*args: object, **kwargs: object) -> bool:
        raise RuntimeError("the worker died here")

    monkeypatch.setattr(Locks, "release", fails)
    with pytest.raises(RuntimeError, match="died here"):
        after_promotion(rt, rt.db.study(study), DECISION)
    records = NightlyRecords(rt.db)
    assert [r["state"] for r in records.regions(run_id)] == ["running"]
    assert records.run(run_id)["state"] == "running"
    monkeypatch.undo()
    after_promotion(rt, rt.db.study(study), DECISION)  # the promotion delivered again
    assert [(r["state"], r["outcome"]) for r in records.regions(run_id)] == [
        ("kept", DECISION["reason"])]
    assert records.run(run_id)["state"] == "done"
    assert Locks(rt.db).acquire(NIGHTLY_LOCK, holder(run_id + 1), 600) is None


def test_two_regions_that_end_at_once_end_their_run(backend, rt,  # noqa: ANN001
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each region's outcome and the look at the others share a transaction: two promotions at
    once must not each miss the other's outcome (PostgreSQL reads what was committed before
    each statement), or neither would end the run and its lock would stay held."""
    records = NightlyRecords(rt.db)
    run_id, studies = _nightly_studies(rt, ("north", "south"))
    both_recorded = threading.Barrier(2, timeout=3)  # a transaction held back waits it out
    regions = NightlyRecords.regions

    def after_both(self, run=None, conn=None):  # noqa: ANN001, ANN202
        if conn is not None:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_recorded.wait()
        return regions(self, run, conn)

    monkeypatch.setattr(NightlyRecords, "regions", after_both)
    failed: list[BaseException] = []

    def promote(study: int) -> None:
        from hoptune.core import Settings
        from hoptune.tasks import Runtime

        own = Runtime(Settings.from_env(), worker=f"w{study}")
        try:
            after_promotion(own, own.db.study(study), DECISION)
        except BaseException as exc:  # noqa: BLE001 - said by the test
            failed.append(exc)
        finally:
            own.db.dispose()

    threads = [threading.Thread(target=promote, args=(s,)) for s in studies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    monkeypatch.undo()
    assert not failed, failed
    assert [r["state"] for r in records.regions(run_id)] == ["kept", "kept"]
    assert records.run(run_id)["state"] == "done"
    assert Locks(rt.db).acquire(NIGHTLY_LOCK, holder(run_id + 1), 600) is None


def test_the_sweeper_sends_again_a_promotion_whose_nightly_outcome_was_never_recorded(
        rt) -> None:  # noqa: ANN001
    """A worker that died between a promotion's decision and its nightly outcome: the
    sweeper sends the promotion again (it returns its recorded decision and records the
    outcome), where a driver would otherwise wait for the run until its lock ran out."""
    from hoptune.tasks.study import sweep
    from hoptune.tasks.study._promotion import promote_study

    run_id, (study,) = _nightly_studies(rt)
    (again,) = sweep(rt, resend_after=0)
    assert (again.task, again.kwargs["study"]) == ("hoptune.promote", study)
    assert promote_study(rt, study) == DECISION  # the recorded decision, not a new one
    assert NightlyRecords(rt.db).run(run_id)["state"] == "done"
    assert sweep(rt, resend_after=0) == []


def test_a_driver_does_not_wait_for_a_run_abandoned_when_its_lock_expired(rt) -> None:  # noqa: ANN001
    """A run whose lock ran out is marked abandoned by the next one: its regions' outcomes will
    never come, and a driver still following one of its studies returns."""
    run_id, (study,) = _nightly_studies(rt)
    NightlyRecords(rt.db).finish_run(run_id, "abandoned")
    follow(rt, None, [study], progress=False, timeout=5.0)
