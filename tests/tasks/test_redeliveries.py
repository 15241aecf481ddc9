"""A hop interrupted more than ``max_redeliveries`` times fails its trial, with that reason.

The deliveries that died mid-hop are what a SIGKILLed worker leaves in the study
database: the hop claimed (``claim_hop``) by a worker process whose heartbeat then
stopped, and never finished. The fixture's
regions allow ``max_redeliveries = 2``.
"""

from __future__ import annotations

from hoptune.core import Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import checkpoint_key, create_study, run_hop, run_inline, tune_step
from hoptune.tasks.hop import wait_written
from hoptune.tuner import HopRecords

MAX_REDELIVERIES = 2


def _first_hop(make_config, rt):  # noqa: ANN001, ANN202
    region = load_config(make_config(shards=2, epochs=1, trials=1, parallel=1)).region("north")
    assert region.max_redeliveries == MAX_REDELIVERIES
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
    (first,) = tune_step(rt, study)
    return study, first.kwargs


def _die_mid_hop(rt, hop: dict, times: int) -> None:  # noqa: ANN001
    from hoptune.tuner import utcnow

    for i in range(times):  # each a worker process with no heartbeat: gone
        HopRecords(rt.db).claim(hop["trial"], hop["epoch"], hop["position"], hop["shard"],
                        worker=f"dead{i}@h", holder=f"dead{i}@h/1/x", live_after=utcnow())


def test_a_hop_interrupted_up_to_the_cap_still_trains(make_config, rt) -> None:
    study, hop = _first_hop(make_config, rt)
    _die_mid_hop(rt, hop, MAX_REDELIVERIES)
    report = run_hop(rt, hop["trial"], hop["epoch"], hop["position"])
    assert report.trained and report.skipped is None
    assert HopRecords(rt.db).all(hop["trial"])[0].interrupted == MAX_REDELIVERIES
    run_inline(rt, report.dispatch)
    assert rt.db.trial(hop["trial"]).state == "done"


def test_redeliveries_past_the_cap_fail_the_trial_with_the_reason(make_config, rt) -> None:
    study, hop = _first_hop(make_config, rt)
    _die_mid_hop(rt, hop, MAX_REDELIVERIES + 1)
    report = run_hop(rt, hop["trial"], hop["epoch"], hop["position"])
    assert not report.trained
    trial = rt.db.trial(hop["trial"])
    assert trial.state == "failed"
    assert trial.failure.startswith(
        f"hop epoch 0 position 0 (shard {hop['shard']}) was interrupted 3 times "
        f"(max_redeliveries=2); last on worker dead2@h")
    assert report.skipped == trial.failure
    assert not rt.store.exists(checkpoint_key(study, hop["trial"], 0, 0))  # nothing trained
    # the freed slot goes back to the study, which ends: its only trial failed
    assert [d.task for d in report.dispatch] == ["hoptune.tune_step"]
    run_inline(rt, report.dispatch)
    record = rt.db.study(study)
    assert record.state == "failed" and record.failure == "every trial failed"


def test_an_undecided_epoch_whose_last_checkpoint_is_truncated_runs_that_hop_again(
        make_config, rt) -> None:
    """The last hop's worker died after recording it and before deciding its epoch.

    Its redelivery (the sweeper's) validates the epoch from that hop's own
    checkpoint; a damaged one is set aside and the hop trains again, once.
    """
    from pathlib import Path

    study, hop = _first_hop(make_config, rt)
    report = run_hop(rt, hop["trial"], 0, 0)
    (second,) = report.dispatch
    last = run_hop(rt, hop["trial"], 0, 1)  # recorded; its epoch_end is never handled
    assert last.trained and last.epoch_end is not None
    wait_written(last)  # as its task does before it ends
    key = checkpoint_key(study, hop["trial"], 0, 1)
    path = Path(rt.store.path(key))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    again = run_hop(rt, hop["trial"], 0, 1)
    assert not again.trained and again.epoch_end is None
    assert [(d.task, d.kwargs["epoch"], d.kwargs["position"]) for d in again.dispatch] == [
        ("hoptune.hop", 0, 1)]
    assert list(path.parent.glob(f"{path.name}.unreadable-*"))
    assert HopRecords(rt.db).get(hop["trial"], 0, 1).state == "queued"
    run_inline(rt, again.dispatch)
    assert rt.db.trial(hop["trial"]).state == "done"


def test_a_trial_failed_on_a_spent_budget_while_another_runs_sends_no_tune_step(
        make_config, rt) -> None:
    """A failed trial's slot moves nothing while the budget is spent and another trial runs
    (the step would have no work); the other's end still ends the study."""
    region = load_config(make_config(shards=2, epochs=1, trials=2, parallel=2)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}, {"lr": 0.01}])
    hops = tune_step(rt, study)
    first = hops[0].kwargs
    _die_mid_hop(rt, first, MAX_REDELIVERIES + 1)
    report = run_hop(rt, first["trial"], first["epoch"], first["position"])
    assert rt.db.trial(first["trial"]).state == "failed"
    assert report.dispatch == []  # the budget spent, the second trial running
    run_inline(rt, hops[1:])
    assert [t.state for t in rt.db.trials(study)] == ["failed", "done"]
    assert rt.db.study(study).state == "done"
