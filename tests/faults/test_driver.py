"""A driver that tells the truth: it returns after the promotion, with a status that means it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

STOP = 3  # seconds local workers are given to stop


def test_tune_with_local_workers_returns_only_after_the_champion_is_promoted(
        write_config, fault_env: dict[str, str], home: Path, monkeypatch) -> None:
    """The promotion runs after the study ends; it must not be cut off with the workers.

    The registry is held by someone else until well after the study ended, for
    longer than local workers are given to stop (``HOPTUNE_STOP_SECONDS``, 3 s
    here), so a driver that returned when the study ended would kill the
    promotion waiting for it and leave the region without a champion.
    """
    from hoptune.core import Settings, Store
    from hoptune.tuner import Locks, StudyDB, champion_card, versions

    write_config(trials=2, epochs=1, tuned=True)
    monkeypatch.setenv("HOPTUNE_STOP_SECONDS", str(STOP))
    settings = Settings.from_env()
    db = StudyDB(settings.database_url)
    locks = Locks(db)
    assert locks.acquire("registry:north", "someone-else", 10.0) is None
    tune = subprocess.Popen(["hoptune", "tune", "north", "--local-workers", "2",
                             "--no-progress"], cwd=home, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    ended_at = None
    while ended_at is None or time.monotonic() < ended_at + STOP + 5:
        locks.renew("registry:north", "someone-else", 10.0)
        studies = db.studies("north")
        if ended_at is None and studies and studies[0].state != "running":
            ended_at = time.monotonic()
        assert tune.poll() is None, tune.communicate()
        time.sleep(0.5)
    locks.release("registry:north", "someone-else")
    out, err = tune.communicate(timeout=120)
    done = subprocess.CompletedProcess(tune.args, tune.returncode, out, err)
    assert done.returncode == 0, done.stdout + done.stderr
    (study,) = db.studies("north")
    assert study.state == "done"
    assert study.promotion["promoted"] is True
    assert done.stdout.splitlines()[-1] == f"promotion: {study.promotion['reason']}"
    store = Store(settings.store_url)
    card = champion_card(store, "north")
    assert card is not None and card["study_id"] == study.id
    assert [c["version"] for c in versions(store, "north")] == ["v0001"]
    db.dispose()
